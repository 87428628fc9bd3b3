"""The AutoTest's mutation score: a catalogue of deliberately wrong kernels, each of which
the autotests of its op must catch (graphfront/testing/mutation.py). The score must be
100 %: a surviving mutant is a gap in the AutoTest. The score is printed in the AutoTest
summary at the end of the run."""
import os

import pytest
import torch

from graphfront.testing import coverage, mutation
from graphfront.testing.autotest import DRAW_ENV, N_ENV, SEED_ENV
from graphfront.testing.mutation import Mutant, flip, inputs, outputs, replace, scale, zeros

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

CATALOGUE = NAMED + [
    Mutant("softmax_grad: dx scaled by -3", "softmax_grad", outputs(scale(-3.0)), ("test_softmax",)),
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
    assert len(names) == len(set(names))
    for m in CATALOGUE:
        registry.lookup(m.op_type)


@pytest.mark.parametrize("mutant", NAMED, ids=lambda m: m.name)
def test_the_named_mutants_fail_the_autotest(mutant, autotests):
    assert mutation.caught(mutant, autotests), f"mutant survived: {mutant.name}"


@pytest.mark.slow
def test_every_mutant_is_caught(autotests):
    result = mutation.score(CATALOGUE, autotests)
    survivors = [name for name, failure in result.items() if failure is None]
    assert not survivors, f"mutation score {len(result) - len(survivors)}/{len(result)}; survivors: {survivors}"
