"""Many devices: embeddings as OneFlow's Wide & Deep model writes them.

An embedding table split over devices (``distribute=flow.distribute.split(0)`` or
``split(1)``), read with ``flow.gather`` and updated sparsely
(``indexed_slices_optimizer_conf``), and an ``OFRecordReader`` on a placement of its
own: each 2-device run is compared with the same job on one device (same seeds, same
data).
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import dtypes
from graphfront.ofrecord import OFRecord, float_feature, int32_feature
from graphfront.ofrecord.reader import Prefetcher
from graphfront.ofrecord.records import write_records

V, D, B, S = 40, 8, 8, 6


def test_host_object_dtypes_have_an_item_size():
    """Blobs of records and tensor buffers are sized at build time (memory checks, the
    boxing cost of a layout), as every other blob."""
    assert dtypes.float32.itemsize == 4 and dtypes.int64.itemsize == 8 and dtypes.float16.itemsize == 2
    assert dtypes.record.itemsize == 8 and dtypes.tensor_buffer.itemsize == 8


def _on_daemon_process(out):
    pf = Prefetcher(lambda: iter(range(5)), depth=2)
    out.put(list(pf))


def test_prefetcher_runs_in_a_daemonic_process():
    """A multi-device worker is a daemonic process, which may not start children: the
    prefetcher's producer runs on a thread there, with the same items."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_on_daemon_process, args=(out,), daemon=True)
    p.start()
    items = out.get(timeout=60)
    p.join(timeout=10)
    assert items == [0, 1, 2, 3, 4]


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


def _embedding_run(ndev, split_axis, indexed, steps=3):
    """Losses and the table after ``steps`` of SGD with momentum on an embedding table
    laid out as ``split(split_axis)`` (None: broadcast); the gathered rows are split on the
    batch axis with their gradient split on the embedding axis (Wide & Deep's deep
    embedding)."""
    _session(ndev)
    cfg = flow.FunctionConfig()
    if indexed:
        cfg.indexed_slices_optimizer_conf({"include_op_names": {"op_name": ["emb"]}})

    @flow.global_function(type="train", function_config=cfg)
    def job(ids: tp.Numpy.Placeholder((B, S), dtype=flow.int32), y: tp.Numpy.Placeholder((B, 1))) -> tp.Numpy:
        ids = flow.parallel_cast(ids, distribute=flow.distribute.broadcast())
        table = flow.get_variable("emb", shape=(V, D), initializer=flow.random_uniform_initializer(-0.5, 0.5),
                                  distribute=flow.distribute.broadcast() if split_axis is None
                                  else flow.distribute.split(split_axis))
        e = flow.gather(params=table, indices=ids)
        e = flow.parallel_cast(e, distribute=flow.distribute.split(0), gradient_distribute=flow.distribute.split(2))
        logits = flow.layers.dense(flow.reshape(e, (-1, S * D)), 1, kernel_initializer=flow.constant_initializer(0.1),
                                   name="fc")
        loss = flow.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0.9).minimize(loss)
        return flow.math.reduce_mean(loss)

    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        # ids 0 .. V/2 - 1 only: the rows of the second half of a split(0) table never change
        ids = rng.integers(0, V // 2, (B, S)).astype(np.int32)
        y = (rng.random((B, 1)) > 0.5).astype(np.float32)
        losses.append(job(ids, y).item())
    return np.array(losses), flow.get_all_variables()["emb"].numpy()


@pytest.mark.slow  # spawns worker processes
@pytest.mark.parametrize("split_axis,ndev", [(0, 2), (1, 2), (None, 2), (0, 3)])
def test_sparse_update_of_a_split_embedding_matches_one_device(split_axis, ndev):
    """``indexed_slices_momentum_update`` on a table split on axis 0 (each device updates
    the rows it holds, ids counted from its first row; on 3 devices the 40 rows are cut
    14 + 13 + 13), on axis 1 (the gradient rows split on the embedding axis) or broadcast
    gives one device's losses and table."""
    want_losses, want_table = _embedding_run(1, split_axis, indexed=True)
    dense_losses, dense_table = _embedding_run(1, split_axis, indexed=False)
    losses, table = _embedding_run(ndev, split_axis, indexed=True)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    np.testing.assert_allclose(table, want_table, rtol=1e-5, atol=1e-6)
    # the sparse update touched only the gathered rows: the other half kept its initial values
    np.testing.assert_array_equal(table[V // 2:], want_table[V // 2:])
    assert not np.allclose(losses[1:], dense_losses[1:])  # (lazy momentum differs from the dense one)


def test_sparse_update_layouts_follow_the_table():
    """The SBP signature of the sparse update: ids and values broadcast for a table split
    on axis 0; the values split on the embedding axis for a table split on axis 1."""
    import copy

    from graphfront.framework import job_builder as jb
    from graphfront.framework.session import default_session, trace
    from graphfront.parallel import sbp as _sbp
    from graphfront.passes import complete
    from graphfront.passes.boxing import boxing

    for split_axis, values in ((0, "B"), (1, "S(2)")):
        _session(2)
        cfg = flow.FunctionConfig()
        cfg.indexed_slices_optimizer_conf({"include_op_names": {"op_name": ["emb"]}})

        @flow.global_function(type="train", function_config=cfg)
        def job(ids: tp.Numpy.Placeholder((B, S), dtype=flow.int32)) -> tp.Numpy:
            ids = flow.parallel_cast(ids, distribute=flow.distribute.broadcast())
            table = flow.get_variable("emb", shape=(V, D), initializer=flow.ones_initializer(),
                                      distribute=flow.distribute.split(split_axis))
            e = flow.gather(params=table, indices=ids)
            loss = flow.math.reduce_sum(flow.reshape(e, (B, S * D)), axis=[1])
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
            return loss

        builder, _ = trace(default_session(), job)
        done = boxing(complete(copy.deepcopy(builder.job)), 2)
        update = next(op for op in done.net.op if jb.op_type_name(op).startswith("indexed_slices_"))
        sig = done.job_parallel_view_conf.op_name2sbp_signature_conf[update.name].bn_in_op2sbp_parallel
        got = {bn: _sbp.from_proto(sig[bn]) for bn in ("model_0", "model_diff_indices_0", "model_diff_values_0")}
        assert got == {"model_0": f"S({split_axis})", "model_diff_indices_0": "B", "model_diff_values_0": values}


def _write_shards(data_dir, parts=2, per_part=16):
    rng = np.random.default_rng(0)
    for p in range(parts):
        write_records(str(data_dir / f"part-{p}"), [
            OFRecord(feature={"x": float_feature(rng.random(4).astype(np.float32)),
                              "label": int32_feature([int(rng.integers(0, 2))])})
            for _ in range(per_part)])


def _reader_run(ndev, data_dir, steps=3):
    """A reader on a CPU placement of 2 devices (one shard each) feeding a model on ndev devices."""
    _session(ndev)

    @flow.global_function(type="train")
    def job() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            rec = flow.data.ofrecord_reader(str(data_dir), batch_size=8, data_part_num=2, random_shuffle=False)
            x = flow.data.OFRecordRawDecoder(rec, "x", shape=(4,), dtype=flow.float)
            y = flow.data.OFRecordRawDecoder(rec, "label", shape=(1,), dtype=flow.int32)
        x, y = flow.identity_n([x, y])
        logits = flow.layers.dense(x, 1, kernel_initializer=flow.constant_initializer(0.1), name="fc")
        loss = flow.nn.sigmoid_cross_entropy_with_logits(labels=flow.cast(y, flow.float), logits=logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5])).minimize(loss)
        return flow.math.reduce_mean(loss)

    return np.array([job().item() for _ in range(steps)])


@pytest.mark.slow  # spawns worker processes
def test_reader_on_its_own_placement_feeds_a_two_device_model(tmp_path):
    """The reader's record blobs are sized for the boxing cost and read on the workers
    (daemonic processes): the same losses as one device."""
    _write_shards(tmp_path)
    np.testing.assert_allclose(_reader_run(2, tmp_path), _reader_run(1, tmp_path), rtol=1e-5)
