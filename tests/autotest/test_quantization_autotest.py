"""AutoTest of the quantization-aware training ops: min_max_observer then fake_quantization
(built as the qat pass builds them) against a PyTorch eager fake quantization with a
straight-through gradient (OneFlow's fake_quantization grad is an identity)."""
from graphfront.testing import autotest, random_tensor

N = 6


def user_op(flow, op_type, inputs, outputs, attrs):
    b = flow.user_op_builder(flow.util.unique_str(op_type + "_")).Op(op_type)
    for arg, blob in inputs.items():
        b.Input(arg, [blob])
    for arg in outputs:
        b.Output(arg)
    for k, v in attrs.items():
        b.Attr(k, v)
    return list(b.Build().InferAndTryRun().RemoteBlobList())


def torch_fake_quant(torch, x, symmetric, per_layer, bit=8):
    """OneFlow's google-formula observer and fake quantization, in torch; STE gradient."""
    v = x.detach()
    flat = v.reshape(1, -1) if per_layer else v.reshape(v.shape[0], -1)
    lo, hi = flat.amin(dim=1), flat.amax(dim=1)
    shape = (-1,) + (1,) * (x.dim() - 1) if not per_layer else (1,) * x.dim()
    if symmetric:
        s = (torch.maximum(hi.abs(), lo.abs()) / (2.0 ** (bit - 1) - 1)).reshape(shape)
        q = torch.clamp(torch.round(v / s), -2.0 ** (bit - 1), 2.0 ** (bit - 1) - 1) * s
    else:
        s = ((hi - lo) / (2.0 ** bit - 1)).reshape(shape)
        z = ((-torch.round(lo / s.reshape(-1))).to(torch.int64) % 256).to(v.dtype).reshape(shape)
        q = (torch.clamp(torch.round(v / s + z), 0, 2.0 ** bit - 1) - z) * s
    return x + (q - x).detach()


@autotest(n=N)
def test_min_max_observer_and_fake_quantization(check):
    symmetric = bool(check.rng.integers(0, 2))
    per_layer = bool(check.rng.integers(0, 2))
    attrs = {"quantization_formula": "google", "quantization_bit": 8,
             "quantization_scheme": "symmetric" if symmetric else "affine"}

    def gf(flow, x):
        scale, zero_point = user_op(flow, "min_max_observer", {"in": x}, ["scale", "zero_point"],
                                    dict(attrs, per_layer_quantization=per_layer))
        return user_op(flow, "fake_quantization", {"in": x, "scale": scale, "zero_point": zero_point}, ["out"], attrs)

    check(graphfront=gf, torch=lambda torch, x: [torch_fake_quant(torch, x, symmetric, per_layer)],
          x=random_tensor(ndim=int(check.rng.integers(2, 4)), low=-3, high=2))
