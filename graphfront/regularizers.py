"""Regularizers (``flow.regularizers``): ``RegularizerConf`` protos for variables.

The optimizer pass applies them to the gradient with ``l1_l2_regularize_gradient``:
``diff + l1 * sign(model) + l2 * model``.
"""
from __future__ import annotations

from graphfront.core import regularizer_conf_pb2 as _pb


def l1_l2(l1=0.01, l2=0.01) -> _pb.RegularizerConf:
    conf = _pb.RegularizerConf()
    conf.l1_l2_conf.l1 = float(l1)
    conf.l1_l2_conf.l2 = float(l2)
    return conf


def l1(l=0.01) -> _pb.RegularizerConf:  # noqa: E741 - OneFlow's parameter name
    return l1_l2(l1=l, l2=0.0)


def l2(l=0.01) -> _pb.RegularizerConf:  # noqa: E741
    return l1_l2(l1=0.0, l2=l)
