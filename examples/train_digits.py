"""Train a small network to read handwritten digits, in eager mode.

An MLP (64 -> 128 -> 128 -> 10) on scikit-learn's bundled digits (1797 8x8 images),
with swish activations from the ``fastop-activations`` plugin (Python/numpy kernels
found through the op registry: ``fastop.ops.activations.swish``), softmax
cross-entropy, and Adam. After training it saves a checkpoint with ``fastop.save``,
loads it into a fresh model and checks that model on the held-out images.

    make demo                                        # builds, installs, runs this
    python examples/train_digits.py [--epochs N] [--quiet]
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import fastop
from fastop import nn

from digits_common import batches, load_digits_split, parse_args, track


class MLP(nn.Layer):
    """64 -> hidden -> hidden -> 10, swish between the layers."""

    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 10)

    def forward(self, x):
        swish = fastop.ops.activations.swish   # a plugin's op: numpy kernels, autograd
        return self.out(swish(self.fc2(swish(self.fc1(x)))))


def accuracy(model: nn.Layer, x: np.ndarray, y: np.ndarray) -> float:
    with fastop.no_grad():
        logits = model(fastop.to_tensor(x)).numpy()
    return float(np.mean(logits.argmax(axis=1) == y))


def train(model, data, epochs: int, quiet: bool) -> None:
    x_train, y_train, x_test, y_test = data
    loss_fn = nn.CrossEntropyLoss()
    opt = fastop.optimizer.Adam(learning_rate=0.003, parameters=model.parameters())
    rng = np.random.default_rng(0)
    for epoch in range(1, epochs + 1):
        steps, finish = track(batches(len(x_train), 32, rng), f"epoch {epoch}/{epochs}", quiet)
        losses = []
        for rows in steps:
            x, y = fastop.to_tensor(x_train[rows]), fastop.to_tensor(y_train[rows])
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        finish(f"loss {np.mean(losses):.4f}, held-out accuracy "
               f"{accuracy(model, x_test, y_test):.1%}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)

    fastop.seed(0)
    data = load_digits_split()
    x_test, y_test = data[2], data[3]
    print(f"fastop {fastop.__version__}: MLP 64-128-128-10 (swish from fastop-activations) "
          f"on {len(data[0])} training and {len(x_test)} held-out digits, Adam")
    model = MLP()
    train(model, data, args.epochs, args.quiet)

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "digits_mlp.fastop")
        fastop.save(model.state_dict(), checkpoint)
        reloaded = MLP()
        reloaded.set_state_dict(fastop.load(checkpoint))
    trained, restored = accuracy(model, x_test, y_test), accuracy(reloaded, x_test, y_test)
    print(f"held-out accuracy {trained:.1%}; the checkpoint loaded into a fresh model: "
          f"{restored:.1%}")

    # -- where the time went: the place for the profiler's summary (fastop.profiler) --

    return 0 if restored == trained else 1


if __name__ == "__main__":
    sys.exit(main())
