"""What the two digits examples share: the data, the mini-batches and the progress display.

The data is scikit-learn's bundled digits set (1797 grayscale 8x8 images of the digits
0-9, no download), pixels scaled to [0, 1], split 75/25 into training and held-out
images with every digit in the same proportion in both.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Iterable

import numpy as np


def parse_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """The examples' options: ``--epochs N`` and ``--quiet``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=15, help="passes over the data (15)")
    parser.add_argument("--quiet", action="store_true", help="only the final lines")
    return parser.parse_args(argv)


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
