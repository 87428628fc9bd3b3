"""``flow.sbp``: SBP objects, OneFlow's names for how a blob is laid out over the devices of
its placement.

* ``flow.sbp.split(axis)``: each device holds one slice along ``axis`` (the same policy as
  ``flow.distribute.split(axis)``);
* ``flow.sbp.broadcast``: each device holds the whole blob (``flow.distribute.broadcast()``);
* ``flow.sbp.partial_sum``: each device holds a summand; the blob is their sum.

They stand where a ``flow.distribute`` policy is taken (``get_variable(distribute=)``,
``layers.dense(model_distribute=)``, ``blob.with_distribute``, ``flow.parallel_cast``;
``partial_sum`` is refused there with an ``ArgumentError``) and where SBP strings are taken:
an entry of ``flow.hierarchical_parallel_cast``'s ``nd_sbp`` / ``grad_nd_sbp`` (``str()``
gives "S(0)", "B", "P"). OneFlow v0.6.0 ``python/oneflow/compatible/single_client/sbp.py``
defines the names (its objects serve the eager API's ``to_consistent``, which graphfront
does not have).
"""
from graphfront.distribute import PARTIAL_SUM as partial_sum
from graphfront.distribute import broadcast as _broadcast
from graphfront.distribute import split_policy as _split_policy

__all__ = ["broadcast", "partial_sum", "split"]

broadcast = _broadcast()


def split(axis):
    """The split of a blob along ``axis`` (an int >= 0) over its devices.

    Returns:
        Distribute: the same policy as ``flow.distribute.split(axis)``.

    Raises:
        ArgumentError: (a TypeError and a ValueError) ``axis`` is not an int >= 0.
    """
    return _split_policy(axis, "flow.sbp.split")
