"""Train a small network to read handwritten digits, in eager mode, and see where the
time goes.

An MLP (64 -> 128 -> 128 -> 10) on scikit-learn's bundled digits (1797 8x8 images),
with swish activations from the ``fastop-activations`` plugin (Python/numpy kernels
found through the op registry: ``fastop.ops.activations.swish``), softmax
cross-entropy, and Adam. Training runs under ``fastop.profiler.Profiler``; after it, the
model is saved with ``fastop.save``, loaded into a fresh model and checked on the
held-out images, a picture shows some held-out digits with the model's answers and the
loss and accuracy per epoch (``--plot FILE.png``, ``train_digits.png`` by default;
``--no-plot``: none), and the profiler's summary shows the time per op: the plugin's
numpy kernels next to fastop's own.

    make demo                                        # builds, installs, runs this
    python examples/train_digits.py [--epochs N] [--quiet] [--trace FILE.json]
                                    [--plot FILE.png | --no-plot]
"""
from __future__ import annotations

import sys

import fastop
from fastop import nn

from digits_common import (draw_report, load_digits_split, parse_args, reloaded_accuracy,
                           train_eager)


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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, profiled=True, plotted=True)

    fastop.seed(0)
    data = load_digits_split()
    x_test, y_test = data[2], data[3]
    print(f"fastop {fastop.__version__}: MLP 64-128-128-10 (swish from fastop-activations) "
          f"on {len(data[0])} training and {len(x_test)} held-out digits, Adam")
    model, history = MLP(), []
    prof = train_eager(model, data, args, learning_rate=0.003, history=history)
    trained, restored = reloaded_accuracy(model, MLP, x_test, y_test)
    print(f"held-out accuracy {trained:.1%}; the checkpoint loaded into a fresh model: "
          f"{restored:.1%}")
    if args.plot:
        picture = draw_report(args.plot, model, x_test, y_test, history)
        print(f"held-out digits and training curves drawn in {picture}")

    # -- where the time went: the profiler's summary, the ops taking the most self time
    if not args.quiet:
        print()
        prof.summary(sorted_by="self", row_limit=10)
    return 0 if restored == trained else 1


if __name__ == "__main__":
    sys.exit(main())
