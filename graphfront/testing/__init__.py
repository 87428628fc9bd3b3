"""graphfront's op AutoTest: random draws checked against PyTorch eager autograd.

``from graphfront.testing import autotest, random, random_bool, oneof, nothing,
constant, random_tensor, random_device``; see :mod:`graphfront.testing.autotest` for
how a draw is run and compared, :mod:`graphfront.testing.generators` for the
generators, :mod:`graphfront.testing.compare` for the comparison modes (values,
statistics, dropout/mask helpers), :mod:`graphfront.testing.records` for the run
statistics and exercised op types, :mod:`graphfront.testing.coverage` for the
op-coverage check, and :mod:`graphfront.testing.mutation` for the wrong kernels the
AutoTest must catch (its mutation score).
"""
from graphfront.testing.autotest import AutoTest, autotest
from graphfront.testing.compare import Case, dropout_statistics, mask_statistics
from graphfront.testing.generators import (constant, nothing, oneof, random, random_bool, random_device,
                                           random_tensor)
from graphfront.testing.records import exercised_op_types, summary

__all__ = ["autotest", "AutoTest", "random", "random_bool", "oneof", "nothing", "constant", "random_tensor",
           "random_device", "Case", "dropout_statistics", "mask_statistics", "exercised_op_types",
           "summary"]
