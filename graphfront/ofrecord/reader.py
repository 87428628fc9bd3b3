"""The record stream behind a reader op (``OFRecordReader``, ``OneRecReader``), prefetched
on a background process.

Semantics (OneFlow v0.6.0 ``oneflow/user/data/ofrecord_dataset.h``, ``onerec_dataset.h``,
``random_shuffle_dataset.h``, ``batch_dataset.h``); the files are an OFRecord reader's
shards or a OneRec reader's ``files``, read by ``read_file`` (one file's records, in order):

* the shards are read one after the other, each from its first record to its last,
  and the data set repeats forever (epochs);
* ``shuffle_after_epoch``: the order of the shards is permuted at the start of every
  epoch; the permutations are numpy draws from the stream of ``seed`` (OneFlow shuffles
  with ``std::shuffle`` under ``std::mt19937(kOneflowDatasetSeed + epoch)``: the orders
  differ from OneFlow's, each epoch's order is still one permutation shared by all devices);
* ``random_shuffle``: records pass through a buffer of ``shuffle_buffer_size`` records;
  each emitted record is drawn uniformly from the buffer and its slot refilled with the
  next record of the stream;
* ``seed``: seeds both permutations (``-1``: a fresh random seed); equal seeds give equal
  streams;
* batches are ``batch_size`` consecutive records of the (shuffled) stream; with
  ``shuffle_mode="batch"`` (OneRec's) the stream is cut into batches first and whole
  batches pass through a buffer of ``shuffle_buffer_size`` batches instead;
* on several devices (``part = (parallel_id, parallel_num)``) device ``parallel_id`` reads
  only its balanced range of the shards (``BalancedSplitter(data_part_num,
  parallel_num).At(parallel_id)``: the first ``data_part_num % parallel_num`` devices take
  one shard more), in the order of that epoch's permutation of *all* the shards, which
  every device draws alike from ``seed`` (``ofrecord_dataset.h``: ``GetLocalFilePaths``
  after ``ShuffleAfterEpoch``); ``parallel_num > data_part_num`` is an error.

:class:`Prefetcher` runs a producer in a worker process and hands its results over
through a bounded queue, so that reading (and whatever the producer does besides, such
as decoding images) overlaps the training step. The worker stops when the prefetcher
is garbage collected (its compiled job dropped), :meth:`Prefetcher.close` is called, or
its parent process dies. In a daemonic process (a device's worker of the multi-device
runtime), which may not start processes of its own, and in a process where a runtime that
a fork cannot copy safely has started its threads (JAX's, started by the XLA lowering:
:func:`prefetch_on_threads`), the producer runs on a thread.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import weakref

import numpy as np

from graphfront.ofrecord.records import iter_raw_records, parse_record
from graphfront.ops.common import balanced_range

#: how a reader shuffles: records one at a time, or whole batches (OneRec's ``shuffle_mode``)
SHUFFLE_MODES = ("instance", "batch")


def _rng(seed):
    return np.random.default_rng(None if seed is None or seed < 0 else seed)


def shard_range(data_part_num, part=(0, 1)) -> range:
    """The indices of the shards device ``part[0]`` of ``part[1]`` reads: OneFlow's
    ``BalancedSplitter(data_part_num, parallel_num).At(parallel_id)`` (the first
    ``data_part_num % parallel_num`` devices take one shard more).

    Raises ValueError if ``parallel_num > data_part_num`` (a device would read nothing)."""
    index, count = part
    if count > data_part_num:
        raise ValueError(f"{count} devices cannot share {data_part_num} shard(s): each device reads whole shards, "
                         f"data_part_num must be >= the device count")
    return balanced_range(data_part_num, count, index)


def record_stream(paths, random_shuffle=False, shuffle_buffer_size=1024, shuffle_after_epoch=False, seed=-1,
                  part=(0, 1), read_file=iter_raw_records, group=None, what="OFRecord shards"):
    """Yield serialized records forever, in the order a reader op reads them (on device
    ``part[0]`` of ``part[1]``: its range of the files, see :func:`shard_range`).

    ``read_file(path)`` yields one file's records (default: OFRecord's framing); with
    ``group=k`` the stream yields lists of ``k`` consecutive records instead, and
    ``random_shuffle`` shuffles those lists as units (a buffer of ``shuffle_buffer_size``
    lists). ``what`` names the files in errors.

    Raises ValueError if the files hold no record at all (the stream would never yield),
    or if there are fewer files than devices."""
    if random_shuffle and shuffle_buffer_size < 1:
        raise ValueError(f"shuffle_buffer_size must be >= 1, received {shuffle_buffer_size}")
    mine = shard_range(len(paths), part)
    if seed is None or seed < 0:
        seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
    # two streams of one seed: the shard permutations, alike on every device, and the shuffle
    # buffer's draws (whose count depends on this device's records)
    order_rng, rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))

    def epochs():
        while True:
            order = [paths[i] for i in order_rng.permutation(len(paths))] if shuffle_after_epoch else paths
            order = [order[i] for i in mine]
            count = 0
            for path in order:
                for raw in read_file(path):
                    count += 1
                    yield raw
            if count == 0:
                raise ValueError(f"the {what} {order} hold no record")

    items = epochs() if group is None else grouped(epochs(), group)
    if not random_shuffle:
        yield from items
        return
    yield from shuffle_buffer(items, shuffle_buffer_size, rng)


def grouped(items, size):
    """Yield lists of ``size`` consecutive items of the endless iterator ``items``."""
    while True:
        yield [next(items) for _ in range(size)]


def shuffle_buffer(items, size, rng):
    """Yield the endless iterator ``items`` through a random shuffle buffer of ``size``:
    the buffer fills first, then each emitted item is drawn uniformly from it (numpy
    ``rng``) and its slot refilled with the next item."""
    buffer, draws = [], iter(())
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = next(draws, None)
        if i is None:  # slot indices are drawn 4096 at a time (numpy's per-call cost dominates)
            draws = iter(rng.integers(len(buffer), size=4096).tolist())
            i = next(draws)
        out, buffer[i] = buffer[i], item
        yield out


def record_batches(paths, batch_size, parse=True, shuffle_mode="instance", **stream_kw):
    """Yield lists of ``batch_size`` records, forever: parsed ``OFRecord`` messages, or
    their serialized bytes with ``parse=False``. ``shuffle_mode``: ``"instance"`` shuffles
    records before batching, ``"batch"`` whole batches after (with ``random_shuffle``).
    ``stream_kw`` go to :func:`record_stream`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, received {batch_size}")
    if shuffle_mode not in SHUFFLE_MODES:
        raise ValueError(f"shuffle_mode must be one of {SHUFFLE_MODES}, received {shuffle_mode!r}")
    if shuffle_mode == "batch":
        batches = record_stream(paths, group=batch_size, **stream_kw)
    else:
        batches = grouped(record_stream(paths, **stream_kw), batch_size)
    for raw in batches:
        yield [parse_record(r, "a read record") for r in raw] if parse else raw


_DONE = "__graphfront_prefetch_done__"
_FORK_UNSAFE = []  # why forking this process is unsafe (a multithreaded runtime), if it is


def prefetch_on_threads(reason: str) -> None:
    """From now on, prefetchers of this process run their producers on threads: ``reason``
    (a runtime such as JAX has started threads that a forked child would inherit in an
    unknown state, a deadlock risk)."""
    if reason not in _FORK_UNSAFE:
        _FORK_UNSAFE.append(reason)


def _produce(make_items, out, stop, parent):
    try:
        for item in make_items():
            while not stop.is_set():
                if parent is not None and os.getppid() != parent:   # the job's process died without stopping us
                    return
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
        try:
            out.put((_DONE, e))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled: send its text
            out.put((_DONE, RuntimeError(f"{type(e).__name__}: {e}")))
        return
    out.put((_DONE, None))


def _shutdown(stop, process, owner):
    if os.getpid() != owner:  # a forked reader collecting a prefetcher it inherited: not its worker
        return
    stop.set()
    process.join(timeout=1.0)
    if process.is_alive() and hasattr(process, "terminate"):  # (a thread ends at its next stop check)
        process.terminate()


class Prefetcher:
    """Iterate ``make_items()`` in a worker process, ``depth`` items ahead.

    A process, not a thread: the reader's Python work (framing, shuffling, parsing,
    decoding) would otherwise compete with the training step for the GIL, and every torch
    call of the step would wait for it. The worker is forked (so ``make_items`` need not
    be picklable; its items must be) and must not use torch. In a daemonic process (a
    device's worker of the multi-device runtime), which Python forbids to start
    processes, or one that must not fork (:func:`prefetch_on_threads`), the producer runs
    on a daemon thread instead. ``next()`` returns the next item, or raises the worker's
    exception or StopIteration when it ended."""

    def __init__(self, make_items, depth=2, name="graphfront-prefetch"):
        self._ended = None
        if multiprocessing.current_process().daemon or _FORK_UNSAFE:
            self._queue = queue.Queue(maxsize=max(1, depth))
            self._stop = threading.Event()
            self._process = threading.Thread(target=_produce, args=(make_items, self._queue, self._stop, None),
                                             name=name, daemon=True)
        else:
            ctx = multiprocessing.get_context("fork")
            self._queue = ctx.Queue(maxsize=max(1, depth))
            self._stop = ctx.Event()
            self._process = ctx.Process(target=_produce, args=(make_items, self._queue, self._stop, os.getpid()),
                                        name=name, daemon=True)
        self._process.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._process, os.getpid())

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended is not None:
            raise self._ended
        while True:
            try:
                item = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._process.is_alive():
                    self._ended = RuntimeError(f"the reader process {self._process.name} died "
                                               f"(exit code {getattr(self._process, 'exitcode', None)})")
                    raise self._ended from None
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and item[0] == _DONE:
            self._ended = StopIteration() if item[1] is None else item[1]
            raise self._ended
        return item

    def close(self) -> None:
        """Stop the worker process."""
        self._finalizer()
