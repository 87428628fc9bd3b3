"""The AutoTest's mutation score: a catalogue of deliberately wrong kernels, each of which
the autotests of its op must catch (graphfront/testing/mutation.py). The score must be
100 %: a surviving mutant is a gap in the AutoTest. The score is printed in the AutoTest
summary at the end of the run."""
import os

import pytest
import torch

from graphfront.testing import coverage, mutation
from graphfront.testing.autotest import DRAW_ENV, N_ENV, SEED_ENV
from graphfront.testing.mutation import (Mutant, attrs, flip, inputs, outputs, replace, retype, scale, shorter,
                                         swap_args, swap_outputs, zeros)

AUTOTEST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "autotest")


def identity_permutation(k):
    return lambda x: torch.arange(x.shape[0], dtype=torch.int32, device=x.device)


# The three wrong kernels that an all-ones cotangent and an identity-accepting comparer let through.
NAMED = [
    Mutant("softmax_grad: dx zeroed", "softmax_grad", outputs(zeros), ("test_softmax",)),
    Mutant("upsample_grad: fed a mirrored dy", "upsample_grad", inputs(dy=flip(-1)), ("test_upsample_2d",)),
    Mutant("generate_random_batch_permutation_indices: the identity", "generate_random_batch_permutation_indices",
           replace(identity_permutation), ("test_generate_random_batch_permutation_indices",)),
    Mutant("shuffle: rows kept in order (identity permutation)", "generate_random_batch_permutation_indices",
           replace(identity_permutation), ("test_shuffle",)),
]

def _mutant(name, op_type, change, *tests):
    """A Mutant from a kernel transform or a (kernel, infer) pair (retype, shorter)."""
    kernel, infer = change if isinstance(change, tuple) else (change, None)
    return Mutant(f"{op_type}: {name}", op_type, kernel, tuple(tests), infer)


def other_axes(axes, k):
    return [a for a in range(len(k.input("input_tensor").shape)) if a not in axes]


def minimum(k):
    return torch.minimum


def unflipped(k):
    return lambda dy: dy.clone()


def softmax_over_dim0(k):
    return lambda x: torch.softmax(x, 0)


def half(p):
    return torch.full_like(p, 0.5)


def reversed_list(xs):
    return list(xs)[::-1]


def other_direction(direction, k):
    return "ASCENDING" if direction == "DESCENDING" else "DESCENDING"


# The catalogue: wrong kernels of every family, none of them in the harness's own ops (cast,
# multiply, reduce_sum, scalar_mul, add_n), so each is caught by the op's own autotests.
CATALOGUE = NAMED + [
    # activations and unary math
    _mutant("dx scaled by -3", "softmax_grad", outputs(scale(-3.0)), "test_softmax"),
    _mutant("normalised over dim 0 (wrong reduction axis)", "softmax", replace(softmax_over_dim0), "test_softmax"),
    _mutant("dx zeroed", "log_softmax_grad", outputs(zeros), "test_logsoftmax"),
    _mutant("dx sign flipped", "relu_grad", outputs(scale(-1.0)), "test_relu"),
    _mutant("returns float64 (declared and computed)", "relu", retype("float64"), "test_relu"),
    _mutant("dx zeroed", "tanh_grad", outputs(zeros), "test_tanh"),
    _mutant("y off by 0.1 %", "exp", outputs(scale(1.001)), "test_exp"),
    _mutant("the kernel returns float64 (declared float32)", "exp", outputs(lambda t: t.double()), "test_exp"),
    _mutant("dx sign flipped", "sqrt_grad", outputs(scale(-1.0)), "test_sqrt"),
    _mutant("dx halved", "square_grad", outputs(scale(0.5)), "test_square"),
    _mutant("fed a mirrored dy", "leaky_relu_grad", inputs(dy=flip(-1)), "test_leaky_relu"),
    _mutant("dx zeroed", "elu_grad", outputs(zeros), "test_elu_celu"),
    _mutant("dx doubled", "hardswish_grad", outputs(scale(2.0)), "test_hard_activations"),
    _mutant("dx sign flipped", "silu_grad", outputs(scale(-1.0)), "test_smooth_activations"),
    _mutant("dx sign flipped", "abs_grad", outputs(scale(-1.0)), "test_abs"),
    # binary math and comparisons
    _mutant("output mirrored", "broadcast_add", outputs(flip(-1)), "test_broadcast_add"),
    _mutant("operands swapped", "broadcast_sub", swap_args(0, 1), "test_broadcast_sub"),
    _mutant("sign flipped", "broadcast_mul", outputs(scale(-1.0)), "test_broadcast_mul"),
    _mutant("dy sign flipped", "broadcast_div_grad", outputs(scale(-1.0)), "test_broadcast_div"),
    _mutant("computes the minimum", "broadcast_maximum", replace(minimum), "test_broadcast_maximum_minimum"),
    _mutant("dx and dy swapped", "elementwise_maximum_backward", swap_outputs(0, 1),
            "test_elementwise_maximum_minimum"),
    _mutant("dx zeroed", "clip_by_scalar_grad", outputs(zeros), "test_clip_by_value"),
    _mutant("returns int8 (declared and computed)", "argmax", retype("int8"), "test_argmax"),
    _mutant("indices in reverse order", "top_k", outputs(flip(-1)), "test_argmax_top_k_sort"),
    _mutant("sorts in the other direction", "arg_sort", attrs(direction=other_direction), "test_argmax_top_k_sort"),
    _mutant("correction factor off by 1 %", "adam_bias_correction_factor", outputs(scale(1.01)),
            "test_adam_bias_correction_factor"),
    # reductions
    _mutant("reduces the other axes (wrong reduction axes)", "reduce_max", attrs(axis=other_axes),
            "test_reduce_sum_max_min"),
    _mutant("sign flipped", "reduce_prod", outputs(scale(-1.0)), "test_reduce_prod_any_all"),
    _mutant("doubled", "square_sum", outputs(scale(2.0)), "test_square_sum_and_counts"),
    # array ops
    _mutant("perm reversed (transposed axes)", "transpose", attrs(perm=lambda perm, k: list(perm)[::-1]),
            "test_transpose"),
    _mutant("inputs concatenated in reverse order", "concat", inputs(**{"in": reversed_list}), "test_concat"),
    _mutant("one element short (declared and returned)", "concat", shorter(), "test_concat"),
    _mutant("one element short (declared and returned)", "slice", shorter(), "test_slice_v2_and_reverse"),
    _mutant("one element short (the kernel only)", "slice", outputs(lambda t: t[..., :-1] if t.shape[-1] > 1 else t),
            "test_slice_v2_and_reverse"),
    _mutant("fed a mirrored dy", "slice_grad", inputs(dy=flip(-1)), "test_slice_v2_and_reverse"),
    _mutant("dy not flipped back", "flip_grad", replace(unflipped), "test_flip_and_flip_grad"),
    _mutant("values in reverse order", "reshape", outputs(lambda t: t.flatten().flip(0).reshape(t.shape)),
            "test_reshape"),
    _mutant("dx doubled", "expand_grad", outputs(scale(2.0)), "test_expand"),
    _mutant("indices mirrored", "gather", inputs(indices=flip(-1)), "test_gather"),
    _mutant("indices mirrored", "gather_nd", inputs(indices=flip(0)), "test_gather_nd"),
    _mutant("index mirrored", "dim_gather", inputs(index=flip(-1)), "test_dim_gather"),
    _mutant("updates doubled", "scatter_nd", inputs(updates=scale(2.0)), "test_scatter_nd_and_tensor_scatter_nd"),
    _mutant("segment ids mirrored", "unsorted_segment_sum", inputs(segment_ids=flip(-1)),
            "test_unsorted_segment_sum"),
    _mutant("fed a mirrored dy", "pad_grad", inputs(dy=flip(-1)), "test_pad_and_pad_grad"),
    _mutant("fed a mirrored dy", "constant_pad2d_grad", inputs(dy=flip(-1)), "test_constant_padnd"),
    _mutant("shifts the other way", "roll", attrs(shifts=lambda shifts, k: [-s for s in shifts]), "test_roll"),
    _mutant("diagonal off by one", "tril", attrs(diagonal=lambda d, k: d + 1), "test_tril_fused_scale_tril"),
    _mutant("x and y swapped", "where", swap_args(1, 2), "test_where"),
    _mutant("hot index off by one", "one_hot", outputs(lambda t: t.roll(1, -1)), "test_one_hot"),
    _mutant("dx zeroed", "diag_grad", outputs(zeros), "test_diag"),
    # nn ops
    _mutant("bias dropped", "bias_add", inputs(b=zeros), "test_bias_add"),
    _mutant("bias dropped", "conv2d", inputs(bias=zeros), "test_conv2d_with_bias"),
    _mutant("fed a mirrored dy", "conv_data_grad", inputs(dy=flip(-1)), "test_conv2d"),
    _mutant("filter gradient sign flipped", "conv_filter_grad", outputs(scale(-1.0)), "test_conv2d"),
    _mutant("rows mirrored", "matmul", outputs(flip(-2)), "test_matmul"),
    _mutant("sign flipped", "batch_matmul", outputs(scale(-1.0)), "test_batch_matmul"),
    _mutant("dx zeroed", "maxpool_2d_grad", outputs(zeros), "test_maxpool"),
    _mutant("fed a mirrored dy", "avgpool_2d_grad", inputs(dy=flip(-1)), "test_avgpool"),
    _mutant("dx doubled", "adaptive_avg_pool2d_grad", outputs(scale(2.0)), "test_adaptive_avg_pool"),
    _mutant("output mirrored", "upsample", outputs(flip(-1)), "test_upsample_2d"),
    _mutant("dx sign flipped", "layer_norm_grad", outputs(scale(-1.0)), "test_layer_norm"),
    _mutant("beta dropped", "layer_norm", inputs(beta=zeros), "test_layer_norm"),
    _mutant("gamma gradient zeroed", "normalization_grad", outputs(zeros, None, None), "test_normalization_training"),
    _mutant("beta dropped", "normalization", inputs(beta=zeros), "test_normalization_inference"),
    _mutant("dx zeroed", "l2_normalize_grad", outputs(zeros), "test_l2_normalize"),
    _mutant("alpha gradient zeroed", "prelu_grad", outputs(None, zeros), "test_prelu"),
    _mutant("dx halved (scale dropped)", "dropout_grad", outputs(scale(0.5)), "test_dropout"),
    _mutant("rate ignored (nothing dropped)", "random_mask_like", attrs(rate=lambda rate, k: 0.0), "test_dropout"),
    _mutant("out halved (scale dropped)", "dropout", outputs(scale(0.5)), "test_dropout"),
    _mutant("rate halved", "random_mask_like", attrs(rate=lambda rate, k: rate / 2), "test_random_mask_like"),
    _mutant("p ignored (always 0.5)", "bernoulli", inputs(**{"in": half}), "test_bernoulli"),
    # losses
    _mutant("dx sign flipped", "sparse_softmax_cross_entropy_grad", outputs(scale(-1.0)),
            "test_sparse_softmax_cross_entropy"),
    _mutant("dx doubled", "smooth_l1_loss_grad", outputs(scale(2.0)), "test_smooth_l1_loss"),
    _mutant("dx sign flipped", "binary_cross_entropy_grad", outputs(scale(-1.0)), "test_bce_loss"),
    _mutant("grad zeroed", "ctc_loss_grad", outputs(zeros), "test_ctc_loss"),
    # fused ops
    _mutant("fed a mirrored value gradient", "fused_self_attention_query_mul_key_and_value_grad",
            inputs(value_grad=flip(-1)), "test_fused_self_attention_query_mul_key_and_value"),
    _mutant("dx zeroed", "fused_tril_scale_softmax_mask_scale_grad", outputs(zeros),
            "test_fused_tril_scale_softmax_mask_scale"),
    _mutant("bias dropped", "fused_bias_add_gelu", inputs(b=zeros), "test_fused_bias_add_gelu"),
    _mutant("bias dropped", "fused_bias_add_mask_scale", inputs(b=zeros), "test_fused_bias_add_mask_scale"),
]


@pytest.fixture(scope="module")
def autotests():
    found = {}
    for path in coverage.autotest_files(AUTOTEST_DIR):
        for at in coverage.autotests_in(coverage.load_module(path)):
            found[at.name] = at
    return found


@pytest.fixture(autouse=True)
def no_autotest_env(monkeypatch):
    for name in (SEED_ENV, DRAW_ENV, N_ENV):
        monkeypatch.delenv(name, raising=False)


def test_the_catalogue_spans_the_op_families():
    from graphfront.ops import registry
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names)) and len(names) >= 60
    families = {registry.lookup(m.op_type).kernel.__module__.rsplit(".", 1)[-1] for m in CATALOGUE}
    assert len(families) >= 8, families


@pytest.mark.parametrize("mutant", NAMED, ids=lambda m: m.name)
def test_the_named_mutants_fail_the_autotest(mutant, autotests):
    assert mutation.caught(mutant, autotests), f"mutant survived: {mutant.name}"


@pytest.mark.slow
def test_every_mutant_is_caught(autotests):
    result = mutation.score(CATALOGUE, autotests)
    survivors = [name for name, failure in result.items() if failure is None]
    assert not survivors, f"mutation score {len(result) - len(survivors)}/{len(result)}; survivors: {survivors}"
