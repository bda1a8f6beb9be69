"""What the digits examples share: the data, the mini-batches, the progress display, and
the eager examples' training loop (profiled) and checkpoint round trip.

The data is scikit-learn's bundled digits set (1797 grayscale 8x8 images of the digits
0-9, no download), pixels scaled to [0, 1], split 75/25 into training and held-out
images with every digit in the same proportion in both.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable, Iterable

import numpy as np

import fastop
from fastop import nn
from fastop.profiler import Profiler


def parse_args(doc: str, argv: list[str] | None, epochs: int = 15, profiled: bool = False,
               plotted: bool = False) -> argparse.Namespace:
    """The examples' options: ``--epochs N``, ``--quiet``, for the profiled (eager)
    examples ``--trace FILE``, and for those drawing a picture ``--plot FILE``/
    ``--no-plot``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=epochs,
                        help=f"passes over the data ({epochs})")
    parser.add_argument("--quiet", action="store_true", help="only the final lines")
    if profiled:
        parser.add_argument("--trace", metavar="FILE.json",
                            help="write the training's profile as a Chrome trace (open it "
                                 "in ui.perfetto.dev)")
    if plotted:
        parser.add_argument("--plot", metavar="FILE.png", default=DEFAULT_PICTURE,
                            help="where to draw some held-out digits with the model's "
                                 f"answers and the training curves ({DEFAULT_PICTURE})")
        parser.add_argument("--no-plot", dest="plot", action="store_const", const=None,
                            help="draw no picture")
    return parser.parse_args(argv)


DEFAULT_PICTURE = "train_digits.png"


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x_train [n, 64] float32, y_train [n] int64, x_test, y_test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (x / 16.0).astype(np.float32), y.astype(np.int64), test_size=0.25, stratify=y,
        random_state=seed)
    return x_train, y_train, x_test, y_test


def batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The row indices of one epoch's mini-batches, in a new random order."""
    order = rng.permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def track(items: list, desc: str,
          quiet: bool = False) -> tuple[Iterable, Callable[[str], None]]:
    """The items of one epoch, and ``finish(text)`` that prints the epoch's line
    ``desc: text``. On a terminal the items come under a tqdm progress bar, which the
    line replaces when the epoch ends; with ``quiet`` nothing is shown.
    """
    def finish(text: str) -> None:
        if bar is not None:
            bar.close()
        if not quiet:
            print(f"{desc}: {text}", flush=True)
    bar = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm
        bar = items = tqdm(items, desc=desc, unit="batch", leave=False)
    return items, finish


def accuracy(model: nn.Layer, x: np.ndarray, y: np.ndarray) -> float:
    """The share of images `model` (eager) classifies right."""
    with fastop.no_grad():
        logits = model(fastop.to_tensor(x)).numpy()
    return float(np.mean(logits.argmax(axis=1) == y))


def train_eager(model: nn.Layer, data: tuple, args: argparse.Namespace,
                learning_rate: float, batch_size: int = 32,
                history: list[tuple[float, float]] | None = None) -> Profiler:
    """Train with softmax cross-entropy and Adam, one line per epoch (with a tqdm bar on
    a terminal), under the profiler: each mini-batch is a ``ProfileStep``. Each epoch's
    mean loss and held-out accuracy are appended to `history` if given. Returns the
    profiler, stopped (its summary says where the time went)."""
    x_train, y_train, x_test, y_test = data
    loss_fn = nn.CrossEntropyLoss()
    opt = fastop.optimizer.Adam(learning_rate=learning_rate, parameters=model.parameters())
    rng = np.random.default_rng(0)
    with Profiler() as prof:
        for epoch in range(1, args.epochs + 1):
            steps, finish = track(batches(len(x_train), batch_size, rng),
                                  f"epoch {epoch}/{args.epochs}", args.quiet)
            losses = []
            for rows in steps:
                x, y = fastop.to_tensor(x_train[rows]), fastop.to_tensor(y_train[rows])
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                opt.clear_grad()
                losses.append(float(loss))
                prof.step()
            epoch_loss, epoch_accuracy = float(np.mean(losses)), accuracy(model, x_test, y_test)
            if history is not None:
                history.append((epoch_loss, epoch_accuracy))
            finish(f"loss {epoch_loss:.4f}, held-out accuracy {epoch_accuracy:.1%}")
    if args.trace:
        prof.export_chrome_tracing(args.trace)
    return prof


def reloaded_accuracy(model: nn.Layer, make_model: Callable[[], nn.Layer],
                      x_test: np.ndarray, y_test: np.ndarray) -> tuple[float, float]:
    """Save `model`'s state dict with ``fastop.save``, load it into a fresh
    ``make_model()``; the held-out accuracy of both."""
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "digits.fastop")
        fastop.save(model.state_dict(), checkpoint)
        reloaded = make_model()
        reloaded.set_state_dict(fastop.load(checkpoint))
    return accuracy(model, x_test, y_test), accuracy(reloaded, x_test, y_test)


def draw_report(path: str, model: nn.Layer, x_test: np.ndarray, y_test: np.ndarray,
                history: list[tuple[float, float]], shown: int = 12) -> str:
    """A PNG at `path`: `shown` held-out digits with the model's answer and the true
    label (its mistakes first, in red), and the loss and held-out accuracy per epoch.
    Returns the file's absolute path."""
    import matplotlib
    matplotlib.use("Agg")   # a file only: no display needed
    import matplotlib.pyplot as plt

    with fastop.no_grad():
        predicted = model(fastop.to_tensor(x_test)).numpy().argmax(axis=1)
    wrong = np.flatnonzero(predicted != y_test)
    picked = [*wrong[:shown // 3], *np.flatnonzero(predicted == y_test)][:shown]
    fig = plt.figure(figsize=(11, 4.6), layout="constrained")
    digits_area, curves_area = fig.subfigures(1, 2, width_ratios=[1.1, 1])
    digits_area.suptitle(f"held-out digits: the model's answer (true label), mistakes in "
                         f"red; {len(wrong)} of {len(y_test)} wrong", fontsize=10)
    for ax, i in zip(digits_area.subplots(3, shown // 3).ravel(), picked):
        ax.imshow(x_test[i].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(f"{predicted[i]} (true {y_test[i]})", fontsize=10,
                     color="black" if predicted[i] == y_test[i] else "red")
        ax.set_axis_off()
    epochs = np.arange(1, len(history) + 1)
    loss_ax, accuracy_ax = curves_area.subplots(2, 1, sharex=True)
    loss_ax.plot(epochs, [loss for loss, _ in history], marker="o", markersize=3)
    loss_ax.set(ylabel="training loss", yscale="log",
                title="training loss and held-out accuracy per epoch")
    accuracy_ax.plot(epochs, [100 * acc for _, acc in history], marker="o", markersize=3,
                     color="tab:green")
    accuracy_ax.set(xlabel="epoch", ylabel="held-out accuracy (%)")
    for ax in (loss_ax, accuracy_ax):
        ax.grid(color="0.9")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.abspath(path)
