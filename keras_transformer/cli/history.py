"""The training curve of a `train` run: `history.csv` and `loss.png`."""

import csv
import os
import time

import keras
import numpy as np


class HistoryLog(keras.callbacks.Callback):
    """Writes one row per evaluation interval to `history.csv`: step,
    training loss (the interval's mean), held-out loss, learning rate and
    seconds since the start. A resumed run keeps the rows up to its backup."""

    FIELDS = ["step", "loss", "val_loss", "learning_rate", "seconds"]

    def __init__(self, path, every, initial_step):
        super().__init__()
        self.path, self.every, self.initial_step = path, every, initial_step
        self.start = time.time()

    def on_train_begin(self, logs=None):
        rows = read_history(self.path)
        kept = [r for r in rows if int(r["step"]) <= self.initial_step]
        self.offset = float(kept[-1]["seconds"]) if kept else 0.0
        self._write(kept, "w")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        row = {
            "step": (epoch + 1) * self.every,
            "loss": logs.get("loss"),
            "val_loss": logs.get("val_loss"),
            "learning_rate": float(
                keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)
            ),
            "seconds": round(self.offset + time.time() - self.start, 1),
        }
        self._write([row], "a")

    def _write(self, rows, mode):
        new = mode == "w" or not os.path.exists(self.path)
        with open(self.path, mode, newline="") as f:
            writer = csv.DictWriter(f, self.FIELDS)
            if new:
                writer.writeheader()
            writer.writerows(rows)


def read_history(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_history(history_path, png_path, title):
    """loss.png from history.csv; False where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return False
    rows = read_history(history_path)
    steps = [int(r["step"]) for r in rows]
    figure, axes = pyplot.subplots(figsize=(6, 4))
    for key, label in (("loss", "training"), ("val_loss", "held-out")):
        values = [float(r[key]) if r[key] not in ("", None) else None for r in rows]
        if any(v is not None for v in values):
            axes.plot(steps, [np.nan if v is None else v for v in values], label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats per token)")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    pyplot.close(figure)
    return True
