"""What a training script shows and keeps: progress bars, TensorBoard scalars, a plot.

    from graphfront.runlog import RunLog

    with RunLog("runs/lenet") as log:                  # the run directory
        for epoch in range(1, epochs + 1):
            bar = log.progress(batches, batch_size=100, desc=f"epoch {epoch}")
            for x, y in bar:                            # tqdm bar in samples/s
                ...
                bar.set_postfix(loss=f"{loss:.4f}")     # the running loss beside the rate
            log.scalars(epoch, **{"train/loss": loss, "test/accuracy": acc})
    # runs/lenet/tensorboard/events.out.tfevents.*   (tensorboard --logdir runs)
    # runs/lenet/curves.png                          (one panel per scalar, by epoch)

The bar is ``tqdm``'s, hidden when stderr is not a terminal; scalars are written with
TensorBoard's own writer (``torch.utils.tensorboard.SummaryWriter``) and plotted with a matplotlib
``Figure`` (no pyplot, no window). These three packages form the ``examples`` extra
(``pip install "graphfront[examples]"``, with ``tensorboard``); they are imported only
when a ``RunLog`` is made. A job's graph goes next to the scalars with
``job.graph.to_tensorboard(log.tensorboard_dir)`` (TensorBoard's Graphs tab).
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator

#: Subdirectory of the run directory that holds the TensorBoard event files.
TENSORBOARD_DIR = "tensorboard"
#: File name of the plot written by :meth:`RunLog.plot`.
PLOT_NAME = "curves.png"


class RunLog:
    """Progress bars, TensorBoard scalars and a PNG plot for one run.

    Args:
        run_dir: directory of the run (created); the TensorBoard files go to
            ``<run_dir>/tensorboard`` and the plot to ``<run_dir>/curves.png``.

    Raises:
        ImportError: ``tqdm``, ``matplotlib`` or ``tensorboard`` is missing (the message
            names the extra to install).
    """

    def __init__(self, run_dir):
        try:
            import matplotlib  # noqa: F401
            import tqdm  # noqa: F401
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        except ImportError as e:
            raise ImportError(f"graphfront.runlog needs tqdm, matplotlib and tensorboard ({e}); "
                              "install them with: pip install \"graphfront[examples]\"") from e
        self.run_dir = os.fspath(run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        #: where the TensorBoard event files go (``tensorboard --logdir`` of the run's parent)
        self.tensorboard_dir = os.path.join(self.run_dir, TENSORBOARD_DIR)
        self.writer = SummaryWriter(log_dir=self.tensorboard_dir)
        #: ``{tag: [(step, value), ...]}``, everything passed to :meth:`scalars`.
        self.history: dict = {}

    def progress(self, batches: Iterable, batch_size: int, desc: str = "") -> Iterator:
        """Iterate over ``batches`` behind a tqdm bar that counts samples (``batch_size`` per item).

        Returns the ``tqdm`` bar itself (an iterator over ``batches``): call
        ``bar.set_postfix(loss=...)`` to show a running value beside the rate.
        """
        from tqdm import tqdm
        # unit_scale=batch_size: the bar counts items x batch_size, so its rate reads samples/s.
        return tqdm(batches, desc=desc, unit="sample", unit_scale=batch_size, leave=False, disable=None)

    def scalars(self, step: int, **values: float) -> None:
        """Record scalars at ``step`` (e.g. the epoch): TensorBoard and :attr:`history`.

        Args:
            step: int, the x coordinate (epoch or iteration).
            **values: tag -> float; tags may contain ``/`` (``"train/loss"``), which
                TensorBoard shows as groups. Pass them as ``**{"train/loss": v}``.
        """
        for tag, value in values.items():
            value = float(value)
            self.writer.add_scalar(tag, value, step)
            self.history.setdefault(tag, []).append((int(step), value))
        self.writer.flush()

    def plot(self, path=None) -> str:
        """Plot every recorded scalar against its step, one panel per tag, into a PNG.

        Args:
            path: output file; default ``<run_dir>/curves.png``.

        Returns:
            str: the path written.
        """
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state
        from matplotlib.ticker import MaxNLocator

        path = os.fspath(path) if path is not None else os.path.join(self.run_dir, PLOT_NAME)
        tags = sorted(self.history)
        fig = Figure(figsize=(4.5 * max(len(tags), 1), 3.5), layout="constrained")
        for i, tag in enumerate(tags):
            ax = fig.add_subplot(1, len(tags), i + 1)
            steps, values = zip(*self.history[tag])
            ax.plot(steps, values, marker="o")
            ax.set_title(tag)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
        fig.suptitle(os.path.basename(os.path.abspath(self.run_dir)))
        fig.savefig(path, dpi=100)
        return path

    def close(self) -> None:
        """Flush and close the TensorBoard writer, and write the plot if anything was recorded."""
        self.writer.close()
        if self.history:
            self.plot()

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
