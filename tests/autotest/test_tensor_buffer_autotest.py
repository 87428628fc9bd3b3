"""AutoTest of the TensorBuffer ops (graphfront/ops/tensor_buffer_ops.py) against PyTorch:
tensor_to_tensor_buffer, tensor_buffer_to_tensor, gen_tensor_buffer and
tensor_buffer_to_list_of_tensors (v1 through flow's wrapper, v2 through the user-op
builder). All are NoGrad: forward only."""
import numpy as np

from graphfront.testing import autotest, constant

N = 10
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "int8"]
CPU_ONLY = ("cpu",)  # tensor buffers are host objects: their ops have CPU kernels only, as in OneFlow


def drawn_tensor(check, max_numel=240):
    """A tensor of 1..4 axes and a drawn dtype, with at most ``max_numel`` elements."""
    rng = check.rng
    while True:
        shape = [int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 5)))]
        if np.prod(shape) <= max_numel:
            break
    dtype = str(rng.choice(DTYPES))
    if dtype.startswith("float"):
        x = rng.standard_normal(shape).astype(dtype)
    else:
        x = rng.integers(0 if dtype == "uint8" else -100, 100, size=shape).astype(dtype)
    return x, shape, dtype


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_tensor_to_tensor_buffer_and_back(check):
    """A blob packed into buffers and stacked again, and every buffer as its own blob."""
    x, shape, dtype = drawn_tensor(check)
    k = int(check.rng.integers(0, len(shape)))
    outer, inner = shape[:len(shape) - k], shape[len(shape) - k:]
    count = int(np.prod(outer))

    def gf(flow, x):
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=k)
        dense = flow.tensor_buffer_to_tensor(buf, dtype=getattr(flow, dtype), instance_shape=tuple(inner))
        # each buffer reshaped to (its element count,)
        pieces = flow.tensor_buffer_to_list_of_tensors(buf, (int(np.prod(inner)),), getattr(flow, dtype))
        assert len(pieces) == count
        return [dense] + pieces

    def th(torch, x):
        return [x] + list(x.reshape(count, -1).unbind(0))

    check(graphfront=gf, torch=th, x=constant(x))


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_gen_tensor_buffer_to_list_of_tensors(check):
    """gen_tensor_buffer's filled tensors read back as dynamic blobs of their own shapes,
    or, with equal shapes, stacked by tensor_buffer_to_tensor."""
    rng = check.rng
    shape = [int(d) for d in rng.integers(1, 4, size=int(rng.integers(1, 3)))]
    n = int(np.prod(shape))
    dtype = str(rng.choice(["float32", "float64", "int32", "int64"]))
    max_shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 4))))
    shapes = [tuple(int(rng.integers(0, m + 1)) for m in max_shape) for _ in range(n)]
    values = [float(v) for v in rng.uniform(-50, 50, size=n)]

    def gf(flow):
        buf = flow.gen_tensor_buffer(shape, shapes, values, data_type=getattr(flow, dtype))
        same = flow.gen_tensor_buffer(shape, [max_shape] * n, values, data_type=getattr(flow, dtype),
                                      dynamic_out=True)
        return flow.tensor_buffer_to_list_of_tensors(buf, max_shape, getattr(flow, dtype), dynamic_out=True) + \
            [flow.tensor_buffer_to_tensor(same, dtype=getattr(flow, dtype), instance_shape=max_shape)]

    def th(torch):
        # the values are float32 attrs; integers convert toward zero (torch's float -> int cast)
        def fill(s, v):
            return torch.full(s, float(np.float32(v)), dtype=torch.float32).to(getattr(torch, dtype))
        stacked = torch.stack([fill(max_shape, v) for v in values]).reshape(tuple(shape) + max_shape)
        return [fill(s, v) for s, v in zip(shapes, values)] + [stacked]

    check(graphfront=gf, torch=th)


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_tensor_buffer_to_list_of_tensors_v2(check):
    """The v2 op: a shape per output, static (a reshape) or dynamic (the buffer's own shape)."""
    rng = check.rng
    x, shape, dtype = drawn_tensor(check, max_numel=60)
    while len(shape) < 2:
        x, shape, dtype = drawn_tensor(check, max_numel=60)
    k = int(rng.integers(1, len(shape)))
    outer, inner = shape[:len(shape) - k], tuple(shape[len(shape) - k:])
    count = int(np.prod(outer))
    dynamic = bool(rng.random() < 0.5)
    if dynamic:
        out_shapes = [tuple(d + int(rng.integers(0, 3)) for d in inner) for _ in range(count)]
    else:
        out_shapes = [(int(np.prod(inner)),) if rng.random() < 0.5 else inner[::-1] for _ in range(count)]

    def gf(flow, x):
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=k)
        return (flow.user_op_builder("TensorBufferToListOfTensorsV2").Op("tensor_buffer_to_list_of_tensors_v2")
                .Input("in", [buf]).Output("out", count).Attr("out_shapes", out_shapes)
                .Attr("out_dtypes", [getattr(flow, dtype)] * count).Attr("dynamic_out", dynamic)
                .Build().InferAndTryRun().RemoteBlobList())

    def th(torch, x):
        pieces = x.reshape((count,) + inner).unbind(0)
        return list(pieces) if dynamic else [p.reshape(s) for p, s in zip(pieces, out_shapes)]

    check(graphfront=gf, torch=th, x=constant(x))
