"""AutoTest of OneFlow's framework test ops (graphfront/ops/test_ops.py), built through
flow.user_op_builder exactly as OneFlow's own framework tests build them, against PyTorch
eager equivalents (OneFlow's fixed test gradients included)."""
import numpy as np

from graphfront.testing import autotest, constant, random_tensor

N = 6


def dims(check, ndim, low=1, high=5):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def tensor(shape, requires_grad=True):
    return random_tensor(ndim=len(shape), low=-2, high=2, requires_grad=requires_grad,
                         **{f"dim{i}": d for i, d in enumerate(shape)})


def user_op(flow, op_type, inputs, outputs, attrs=None, num=None):
    b = flow.user_op_builder(flow.util.unique_str(op_type + "_")).Op(op_type)
    for arg, blobs in inputs.items():
        b.Input(arg, blobs)
    for arg in outputs:
        b.Output(arg, (num or {}).get(arg, 1))
    for k, v in (attrs or {}).items():
        b.Attr(k, v)
    return list(b.Build().InferAndTryRun().RemoteBlobList())


@autotest(n=N)
def test_ccrelu(check):
    check(graphfront=lambda flow, x: user_op(flow, "ccrelu", {"in": [x]}, ["out"]),
          torch=lambda torch, x: [torch.relu(x)], x=tensor(dims(check, int(check.rng.integers(1, 4)))))


@autotest(n=N, devices=("cpu",))  # cpu_only_relu_test has a CPU kernel only
def test_cpu_only_relu_and_attr_auto_type(check):
    def gf(flow, x):
        y = user_op(flow, "cpu_only_relu_test", {"in": [x]}, ["out"])[0]
        return user_op(flow, "test_user_op_attr_auto_type", {"in": [y]}, ["out"], {"int1": 1, "int2": 2})

    check(graphfront=gf, torch=lambda torch, x: [torch.relu(x)], x=tensor(dims(check, 2), requires_grad=False))


@autotest(n=N)
def test_test_reshape(check):
    """Forward only: OneFlow registers no grad function for TestReshape."""
    a, b, c = dims(check, 3)
    check(graphfront=lambda flow, x: user_op(flow, "TestReshape", {"in": [x]}, ["out"], {"shape": (b, a, c)}),
          torch=lambda torch, x: [x.reshape(b, a, c)], x=tensor([a, b, c], requires_grad=False))


@autotest(n=N, auto_backward=False)
def test_test_sources(check):
    out_num = int(check.rng.integers(1, 10))

    def gf(flow):
        src = user_op(flow, "TestSource", {}, ["out"])
        fixed = user_op(flow, "TestSourceMultiGpuFixedOutNum", {}, ["out"], {"out_num": out_num})
        dyn = user_op(flow, "TestDynamicSource", {}, ["out"])
        return src + fixed + dyn

    check(graphfront=gf, torch=lambda torch: [torch.arange(5.0), torch.arange(float(out_num)), torch.arange(3.0)])


@autotest(n=N, auto_backward=False)
def test_test_random_source(check):
    """OneFlow's kernel: std::mt19937(seed) words / 2**32 as float32; numpy's legacy
    RandomState(seed) yields the same MT19937 words."""
    seed = int(check.rng.integers(0, 2 ** 31))
    words = np.random.RandomState(seed).randint(0, 2 ** 32, size=5, dtype=np.uint32)
    check(graphfront=lambda flow: user_op(flow, "TestRandomSource", {}, ["out"], {"seed": seed}),
          torch=lambda torch: [torch.from_numpy(words.astype(np.float32) / np.float32(2 ** 32))])


@autotest(n=N)
def test_test_multi_output_order(check):
    shape = dims(check, int(check.rng.integers(1, 4)))

    def th(torch, x):
        return [x.clone(), torch.zeros(shape[:-1] + [shape[-1] * 2])]

    check(graphfront=lambda flow, x: user_op(flow, "TestMultiOutputOrder", {"in": [x]}, ["out1", "out2"]),
          torch=th, x=tensor(shape, requires_grad=False))


def fixed_grads_identity(torch, x1, x2):
    """x1, with the fixed gradients 1 (x1) and 2 (x2) of OneFlow's TestMultiInputGrad."""
    class FixedGrads(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a.clone()

        @staticmethod
        def backward(ctx, dy):
            return torch.ones_like(dy), torch.full_like(dy, 2.0)
    return FixedGrads.apply(x1, x2)


@autotest(n=N)
def test_test_multi_input_grad(check):
    """y = x1; OneFlow's TestMultiInputGrad returns fixed gradients 1 (x1) and 2 (x2) whatever
    the upstream gradient, which the torch side reproduces with a custom autograd Function."""
    shape = dims(check, 2)
    check(graphfront=lambda flow, x1, x2: user_op(flow, "TestMultiInput", {"x1": [x1], "x2": [x2]}, ["y"]),
          torch=lambda torch, x1, x2: [fixed_grads_identity(torch, x1, x2)],
          x1=tensor(shape), x2=tensor(shape))


@autotest(n=N, auto_backward=False)
def test_test_data_type_attrs(check):
    shapes = [tuple(dims(check, int(check.rng.integers(1, 3)))) for _ in range(3)]
    names = [str(check.rng.choice(["float32", "int32", "int64", "float64", "int8"])) for _ in range(3)]

    def gf(flow, x):
        types = [getattr(flow, n) for n in names]
        cast = user_op(flow, "TestDataTypeAttr", {"in": [x]}, ["out"], {"output_type": types[0]})
        zeros = user_op(flow, "TestListDataTypeAndListShapeAndListStringAttr", {"in": [x]}, ["out"],
                        {"out_shapes": shapes, "out_types": types, "string_list": ["a", "bc"]}, num={"out": 3})
        return cast + zeros

    def th(torch, x):
        types = [getattr(torch, n) for n in names]
        return [x.to(types[0])] + [torch.zeros(s, dtype=t) for s, t in zip(shapes, types)]

    check(graphfront=gf, torch=th, x=constant(check.rng.integers(-5, 5, size=(3, 2)).astype(np.float32)))
