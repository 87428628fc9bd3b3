"""Sessions used from several threads: whole-variable reads and writes are never torn,
jobs compiled from several threads at once stay separate, predict calls from many
threads give exactly the serial results."""
import threading

import numpy as np

import graphfront as flow
from graphfront import typing as tp

N = 200_000  # elements per variable: copying them takes long enough for a tear to show


def _lockstep_train_job():
    """Two variables that every step lowers by exactly 1 (SGD, lr 1, loss = sum(a) + sum(b)),
    so a consistent snapshot has a == b == -(train step) everywhere."""
    @flow.global_function(type="train")
    def step(x: tp.Numpy.Placeholder((1,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            a = flow.get_variable("a", (N,), initializer=flow.zeros_initializer())
            b = flow.get_variable("b", (N,), initializer=flow.zeros_initializer())
            loss = flow.math.reduce_sum(a) + flow.math.reduce_sum(b) + flow.math.reduce_sum(x)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0]), momentum=0).minimize(loss)
        return loss
    return step


class _Trainer:
    """Calls ``step`` in a thread until :meth:`stop`; counts the finished calls, so a test can
    wait for training to progress instead of passing vacuously when the thread is starved."""

    HANG_GUARD_S = 600  # only against a hang: a starved thread makes the wait longer, never a failure

    def __init__(self, step):
        self.steps = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        x = np.zeros((1,), np.float32)

        def loop():
            while not self._stop.is_set():
                step(x)
                with self._cond:
                    self.steps += 1
                    self._cond.notify_all()
        self._thread = threading.Thread(target=loop)
        self._thread.start()

    def wait_steps(self, n):
        """Return once ``n`` more train steps have finished (the last of them started after this call)."""
        with self._cond:
            target = self.steps + n
            assert self._cond.wait_for(lambda: self.steps >= target, timeout=self.HANG_GUARD_S), "training hung"

    def stop(self):
        self._stop.set()
        self._thread.join()


def _train_step_of(snapshot):
    return float([v for k, v in snapshot.items() if k.startswith("System-Train-TrainStep")][0].reshape(-1)[0])


def _consistent(snapshot):
    a, b = snapshot["a"], snapshot["b"]
    return a.min() == a.max() == b.min() == b.max() == -_train_step_of(snapshot)


def test_get_all_variables_is_never_torn_while_another_thread_trains():
    step = _lockstep_train_job()
    step(np.zeros((1,), np.float32))
    trainer = _Trainer(step)
    snapshots = []
    try:
        for _ in range(60):
            trainer.wait_steps(2)  # a train step ran between every two snapshots
            snapshots.append({k: v.numpy() for k, v in flow.get_all_variables().items()})
    finally:
        trainer.stop()
    torn = [i for i, s in enumerate(snapshots) if not _consistent(s)]
    assert torn == []
    assert len({float(s["a"][0]) for s in snapshots}) == 60  # training ran between every two snapshots


def test_checkpoint_save_is_never_torn_while_another_thread_trains(tmp_path):
    step = _lockstep_train_job()
    step(np.zeros((1,), np.float32))
    trainer = _Trainer(step)
    try:
        for i in range(15):
            trainer.wait_steps(2)  # a train step ran between every two saves
            flow.checkpoint.save(str(tmp_path / f"ckpt{i}"))
    finally:
        trainer.stop()
    saved_steps = []
    for i in range(15):
        ckpt = {k: v.numpy() for k, v in flow.checkpoint.get(str(tmp_path / f"ckpt{i}")).items()}
        assert _consistent(ckpt), i
        saved_steps.append(_train_step_of(ckpt))
    assert saved_steps == sorted(set(saved_steps))  # every save saw training progress


def test_load_variables_is_never_seen_half_done_by_a_running_job():
    step = _lockstep_train_job()
    step(np.zeros((1,), np.float32))
    values = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    loaded_step = _train_step_of(values)
    trainer = _Trainer(step)
    try:
        for _ in range(20):
            flow.load_variables(values)
            trainer.wait_steps(2)  # a train step ran on the loaded values
            snapshot = {k: v.numpy() for k, v in flow.get_all_variables().items()}
            assert _consistent(snapshot)
            assert _train_step_of(snapshot) > loaded_step
    finally:
        trainer.stop()


def _make_jobs(count):
    """``count`` predict jobs, each with its own variable and its own op chain."""
    def make(k):
        def body(x: tp.Numpy.Placeholder((4, 8))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                w = flow.get_variable(f"w{k}", (8, 8), initializer=flow.random_normal_initializer(),
                                    random_seed=k)
                y = flow.matmul(x, w)
                for _ in range(10 * (k + 1)):  # a different number of ops per job
                    y = flow.math.tanh(y) * (k + 1.0)
                return y
        body.__name__ = f"job{k}"
        return flow.global_function(type="predict")(body)
    return [make(k) for k in range(count)]


def _expected(k, x, w):
    y = x @ w
    for _ in range(10 * (k + 1)):
        y = np.tanh(y) * (k + 1.0)
    return y


def test_first_calls_from_several_threads_build_each_job_separately():
    jobs = _make_jobs(6)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    barrier = threading.Barrier(len(jobs))
    results, errors = {}, []

    def first_call(k):
        try:
            barrier.wait()
            results[k] = jobs[k](x)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)
    threads = [threading.Thread(target=first_call, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    variables = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    assert sorted(variables) == [f"w{k}" for k in range(len(jobs))]
    for k, job in enumerate(jobs):
        ops = [op for op in job.compiled_job.user_job.net.op if op.HasField("user_conf")]
        assert sum(op.user_conf.op_type_name == "tanh" for op in ops) == 10 * (k + 1)  # no other job's ops
        np.testing.assert_allclose(results[k], _expected(k, x, variables[f"w{k}"]), rtol=1e-5, atol=1e-5)


def test_predict_calls_from_many_threads_equal_serial_calls():
    job = _make_jobs(3)[2]
    inputs = [np.random.default_rng(i).standard_normal((4, 8)).astype(np.float32) for i in range(64)]
    serial = [job(x) for x in inputs]
    parallel = [None] * len(inputs)

    def worker(start):
        for i in range(start, len(inputs), 8):
            parallel[i] = job(inputs[i])
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(serial, parallel):
        assert np.array_equal(a, b)
