"""flow.model: a Model trained by fit() on real MNIST digits.

The reference is the same network written by hand as @flow.global_function train and
predict jobs, started from the same checkpoint and fed the same batches: fit() must give
the same losses and predictions step for step, call validation and the callbacks at
their steps, and save checkpoints that a new session loads back to the same predictions.
"""
import os
import sys
import warnings

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp

BATCH, HIDDEN, CLASSES, LR = 50, 32, 10, 0.1
STEPS, VAL_EVERY, SAVE_EVERY = 20, 5, 10


@pytest.fixture(scope="module")
def mnist():
    (train_x, train_y), (test_x, test_y) = flow.data.load_mnist(BATCH, BATCH, verbose=False)
    return train_x, train_y, test_x, test_y


def _initial_checkpoint(path):
    """Initial weights drawn by numpy (Glorot-scaled), saved as a OneFlow checkpoint."""
    rng = np.random.default_rng(0)
    shapes = {"fc1-weight": (HIDDEN, 784), "fc1-bias": (HIDDEN,), "fc2-weight": (CLASSES, HIDDEN),
              "fc2-bias": (CLASSES,)}
    arrays = {name: (rng.standard_normal(shape) * np.sqrt(2.0 / sum(shape))).astype(np.float32)
              for name, shape in shapes.items()}
    flow.checkpoint.save(path, arrays)
    return arrays


def _net(images):
    x = flow.reshape(images, (images.shape[0], -1))
    h = flow.layers.dense(x, HIDDEN, activation=flow.math.relu, name="fc1")
    return flow.layers.dense(h, CLASSES, name="fc2")


def _sgd():
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0)


class Digits(flow.model.Model):
    def forward(self, images):
        return _net(images)

    def training_step(self, batch, optimizer_idx):
        images, labels = batch
        return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, self(images))

    def validation_step(self, batch):
        images, labels = batch
        return self(images)

    def configure_optimizers(self):
        return _sgd()


class TrainBatches(flow.model.NumpyDataModule):
    def __init__(self, images, labels):
        super().__init__()
        self.images, self.labels = images, labels
        self.asked = []

    def forward(self, step_idx, optimizer_idx=0):
        self.asked.append(step_idx)
        return self.images[step_idx], self.labels[step_idx]


class Recorder(flow.model.Callback):
    def __init__(self):
        self.train, self.val = [], []

    def on_training_step_end(self, outputs, step_idx, optimizer_idx):
        self.train.append((step_idx, optimizer_idx, outputs.numpy().copy()))

    def on_validation_step_end(self, outputs, step_idx):
        self.val.append((step_idx, outputs.numpy().copy()))


def _fit(mnist, tmp_path, init, callbacks):
    train_x, train_y, test_x, test_y = mnist
    train_cfg = flow.model.TrainingConfig()
    train_cfg.config_execution(flow.ExecutionConfig())
    train_cfg.config_data(TrainBatches(train_x, train_y))
    val_cfg = flow.model.ValidationConfig()
    val_cfg.config_data(TrainBatches(test_x, test_y))
    val_cfg.config_step_interval(VAL_EVERY)
    ck_cfg = flow.model.CheckpointConfig()
    ck_cfg.config_load(dirpath=str(init))
    ck_cfg.config_save(dirpath=str(tmp_path / "ck"), step_interval=SAVE_EVERY)
    Digits(is_deprecated_function_style=True).fit(training_config=train_cfg, validation_config=val_cfg,
                                                  checkpoint_config=ck_cfg, callbacks=callbacks, max_steps=STEPS)
    return train_cfg.data, val_cfg.data


def _reference_train_job():
    """The train step of the digits model written as a plain global function."""
    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images))
        _sgd().minimize(loss)
        return loss
    return train


def _reference(mnist, init_arrays):
    """The same training written as plain global functions."""
    train_x, train_y, test_x, test_y = mnist
    flow.clear_default_session()

    train = _reference_train_job()

    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28))) -> tp.Numpy:
        return _net(images)

    flow.load_variables(init_arrays)
    losses, preds = [], {}
    for step in range(STEPS):
        losses.append(train(train_x[step], train_y[step]))
        if (step + 1) % VAL_EVERY == 0:
            preds[step] = predict(test_x[step])
    return np.stack(losses), preds


def test_fit_matches_hand_written_jobs(mnist, tmp_path):
    init = _initial_checkpoint(tmp_path / "init")
    rec = Recorder()
    train_data, val_data = _fit(mnist, tmp_path, tmp_path / "init", [rec])

    assert [(s, o) for s, o, _ in rec.train] == [(s, 0) for s in range(STEPS)]
    assert [s for s, _ in rec.val] == [4, 9, 14, 19]  # after every VAL_EVERY-th step
    assert train_data.asked == list(range(STEPS))  # step 0's batch is read once, to shape the job
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("ck")) == ["ck-19", "ck-9"]
    trained = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    saved = flow.checkpoint.get(tmp_path / "ck-19")
    for name in init:
        np.testing.assert_array_equal(saved[name].numpy(), trained[name], err_msg=name)

    losses = np.stack([out for _, _, out in rec.train])
    assert losses.shape == (STEPS, BATCH)
    assert losses[-5:].mean() < 0.7 * losses[:5].mean(), losses.mean(axis=1)

    ref_losses, ref_preds = _reference(mnist, init)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for step, pred in rec.val:
        np.testing.assert_allclose(pred, ref_preds[step], rtol=1e-5, atol=1e-5, err_msg=f"step {step}")


def test_saved_checkpoint_gives_the_same_predictions_in_a_new_session(mnist, tmp_path):
    _initial_checkpoint(tmp_path / "init")
    rec = Recorder()
    _fit(mnist, tmp_path, tmp_path / "init", [rec])
    last_step, last_pred = rec.val[-1]

    # a new model validated only: fit() starts a new session and loads ck-19 first
    _, _, test_x, test_y = mnist
    val_cfg = flow.model.ValidationConfig()
    val_cfg.config_data(TrainBatches(test_x, test_y))
    val_cfg.config_step_interval(1)
    ck_cfg = flow.model.CheckpointConfig()
    ck_cfg.config_load(dirpath=str(tmp_path / f"ck-{last_step}"))
    again = Recorder()
    Digits().fit(validation_config=val_cfg, checkpoint_config=ck_cfg, callbacks=again,
                 max_steps=last_step + 1)
    assert [s for s, _ in again.val] == list(range(last_step + 1))
    np.testing.assert_array_equal(again.val[-1][1], last_pred)
    assert again.train == []


class Pair(flow.model.Model):
    """Two optimizers (one per layer): one train job each, run in order every step."""

    def forward(self, images):
        return _net(images)

    def training_step(self, batch, optimizer_idx):
        images, labels = batch
        logits = self(images)
        return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), logits

    def configure_optimizers(self):
        return [flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0,
                                   variables=["fc1-weight", "fc1-bias"]),
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0,
                                   variables=["fc2-weight", "fc2-bias"])]


def test_each_optimizer_gets_its_own_train_job(mnist, tmp_path):
    train_x, train_y, _, _ = mnist
    init = _initial_checkpoint(tmp_path / "init")
    cfg = flow.model.TrainingConfig()
    cfg.config_data(TrainBatches(train_x, train_y))
    ck = flow.model.CheckpointConfig()
    ck.config_load(str(tmp_path / "init"))

    class TupleRecorder(Recorder):
        def on_training_step_end(self, outputs, step_idx, optimizer_idx):
            loss, logits = outputs
            assert logits.shape == (BATCH, CLASSES)
            self.train.append((step_idx, optimizer_idx, loss.numpy().copy()))

    rec = TupleRecorder()
    Pair().fit(training_config=cfg, checkpoint_config=ck, callbacks=[rec], max_steps=2)
    assert [(s, o) for s, o, _ in rec.train] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # job 0 moved only fc1, so job 1's loss on the same batch differs from job 0's
    assert not np.array_equal(rec.train[0][2], rec.train[1][2])
    now = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for name in init:
        assert not np.array_equal(now[name], init[name]), name


def test_invalid_parts_are_skipped_with_a_warning_and_bad_arguments_refused(mnist):
    train_x, train_y, _, _ = mnist
    no_data = flow.model.TrainingConfig()
    with pytest.warns(UserWarning, match=r"TrainingConfig data is None;.*will not do training"):
        Digits().fit(training_config=no_data, max_steps=1)

    class NoSteps(flow.model.Model):
        pass

    cfg = flow.model.TrainingConfig()
    cfg.config_data(TrainBatches(train_x, train_y))
    with pytest.warns(UserWarning, match=r"training_step\(\) is empty;.*configure_optimizers\(\) is empty"):
        NoSteps().fit(training_config=cfg, max_steps=1)

    with pytest.raises(TypeError, match="callbacks must be a model.Callback"):
        Digits().fit(training_config=cfg, callbacks=[print], max_steps=1)

    class ListBatches(TrainBatches):
        def forward(self, step_idx, optimizer_idx=0):
            return [self.images[step_idx], self.labels[step_idx]]

    cfg.config_data(ListBatches(train_x, train_y))
    with pytest.raises(TypeError, match="must return a tuple of numpy arrays, received list"):
        Digits().fit(training_config=cfg, max_steps=1)

    ck = flow.model.CheckpointConfig()
    with pytest.raises(ValueError, match="step_interval must be a positive int, received 0"):
        ck.config_save("somewhere", step_interval=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        val = flow.model.ValidationConfig()
        val.config_step_interval(0)
        val.config_data(TrainBatches(train_x, train_y))
        assert not val.check_valid() and "step_interval must be a positive int" in val.error_msg


def test_model_is_also_flow_model_top_level():
    assert flow.Model is flow.model.Model
    assert flow.model.ExecutionConfig is flow.ExecutionConfig is flow.FunctionConfig


def test_a_failing_step_names_the_step(mnist):
    train_x, train_y, _, _ = mnist

    class Short(TrainBatches):
        def forward(self, step_idx, optimizer_idx=0):
            if step_idx == 2:
                return self.images[step_idx][:10], self.labels[step_idx][:10]
            return super().forward(step_idx)

    cfg = flow.model.TrainingConfig()
    cfg.config_data(Short(train_x, train_y))
    with pytest.raises(flow.FeedError) as info:
        Digits().fit(training_config=cfg, max_steps=3)
    if sys.version_info >= (3, 11):  # before, the note is logged instead
        assert "step_idx 2 training failed" in "".join(info.value.__notes__)


class InJobData(flow.model.DataModule):
    """A DataModule that builds its batch inside the job: here it reads two untrained
    variables, filled from the checkpoint."""

    def forward(self, step_idx=0, optimizer_idx=0):
        images = flow.get_variable("data-images", (BATCH, 1, 28, 28), trainable=False,
                                   initializer=flow.zeros_initializer())
        labels = flow.get_variable("data-labels", (BATCH,), dtype=flow.int32, trainable=False,
                                   initializer=flow.zeros_initializer(flow.int32))
        return images, labels


def test_a_data_module_that_builds_blobs_in_the_job(mnist, tmp_path):
    train_x, train_y, _, _ = mnist
    init = _initial_checkpoint(tmp_path / "init")
    flow.checkpoint.save(tmp_path / "init", {**init, "data-images": train_x[0], "data-labels": train_y[0]})
    cfg = flow.model.TrainingConfig()
    cfg.config_data(InJobData())
    ck = flow.model.CheckpointConfig()
    ck.config_load(str(tmp_path / "init"))
    rec = Recorder()
    Digits().fit(training_config=cfg, checkpoint_config=ck, callbacks=rec, max_steps=3)
    losses = [out.mean() for _, _, out in rec.train]
    assert losses[2] < losses[1] < losses[0]  # the same batch three times: the loss falls

    # reference: the hand-written job on the same batch
    flow.clear_default_session()

    train = _reference_train_job()

    flow.load_variables(init)
    ref = [train(train_x[0], train_y[0]).mean() for _ in range(3)]
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


def _gan_dense(x, units, name, trainable, reuse=False):
    w = flow.get_variable(f"{name}-weight", (units, x.shape[1]), trainable=trainable, reuse=reuse,
                          initializer=flow.random_normal_initializer(stddev=0.1))
    return flow.matmul(x, w, transpose_b=True, name=name + ("_reuse" if reuse else ""))


class TinyGAN(flow.model.Model):
    """OneFlow's DCGAN model test pattern: two optimizers, and each train job marks the
    other network's variables untrainable."""

    def generate(self, z, trainable):
        h = flow.nn.leaky_relu(_gan_dense(z, 32, "g1", trainable), 0.3)
        return flow.math.tanh(_gan_dense(h, 784, "g2", trainable))

    def discriminate(self, x, trainable, reuse=False):
        h = flow.nn.leaky_relu(_gan_dense(x, 32, "d1", trainable, reuse), 0.3)
        return _gan_dense(h, 1, "d2", trainable, reuse)

    def forward(self, z):
        return self.generate(z, False)

    def training_step(self, batch, optimizer_idx):
        if optimizer_idx == 0:
            (z,) = batch
            fake = self.generate(z, True)
            logits = self.discriminate(fake, False)
            return flow.nn.sigmoid_cross_entropy_with_logits(flow.ones_like(logits), logits), fake
        z, images = batch
        fake = self.discriminate(self.generate(z, False), True)
        real = self.discriminate(images, True, reuse=True)
        return (flow.nn.sigmoid_cross_entropy_with_logits(flow.zeros_like(fake), fake)
                + flow.nn.sigmoid_cross_entropy_with_logits(flow.ones_like(real), real))

    def configure_optimizers(self):
        return [_sgd(), _sgd()]


class GanBatches(flow.model.NumpyDataModule):
    def __init__(self, images):
        super().__init__()
        rng = np.random.default_rng(1)
        self.images = [(x.reshape(BATCH, -1) * 2 - 1).astype(np.float32) for x in images]
        self.z = [rng.standard_normal((BATCH, 8)).astype(np.float32) for _ in images]

    def forward(self, step_idx, optimizer_idx):
        return (self.z[step_idx],) if optimizer_idx == 0 else (self.z[step_idx], self.images[step_idx])


def test_gan_jobs_update_only_their_own_network(mnist):
    train_x, _, _, _ = mnist

    class Moved(flow.model.Callback):
        def __init__(self):
            self.before, self.moved = None, []

        def on_training_step_end(self, outputs, step_idx, optimizer_idx):
            now = {k: v.numpy().copy() for k, v in flow.get_all_variables().items() if "System" not in k}
            if optimizer_idx == 0:
                loss, fake = outputs
                assert fake.shape == (BATCH, 784) and np.abs(fake.numpy()).max() <= 1
            if self.before is not None:
                self.moved.append(sorted(k for k in now if not np.array_equal(now[k], self.before[k])))
            self.before = now

    cfg = flow.model.TrainingConfig()
    cfg.config_data(GanBatches(train_x))
    cb = Moved()
    TinyGAN(is_deprecated_function_style=True).fit(training_config=cfg, callbacks=cb, max_steps=3)
    generator, discriminator = ["g1-weight", "g2-weight"], ["d1-weight", "d2-weight"]
    # from the second job on: each job moved only its own network's variables
    assert cb.moved == [discriminator, generator, discriminator, generator, discriminator]
