"""A small convolutional network on the digits, with the ``fastop-vision`` plugin.

Two 3x3 convolutions (``fastop_vision.Conv2D``: numpy im2col + GEMM kernels registered
by the plugin), each followed by ReLU and 2x2 max pooling (``fastop_vision.MaxPool2D``),
then a linear classifier: 8x8 -> 8 channels at 4x4 -> 16 channels at 2x2 -> 10 classes.
Eager mode, softmax cross-entropy, Adam; the same data, progress display, profiling and
checkpoint round trip as ``train_digits.py``.

    python examples/train_digits_cnn.py [--epochs N] [--quiet] [--trace FILE.json]
"""
from __future__ import annotations

import sys

import fastop
import fastop_vision as vision
from fastop import nn
from threadpoolctl import threadpool_limits

from digits_common import load_digits_split, parse_args, reloaded_accuracy, train_eager


class CNN(nn.Layer):
    """conv 1->8, relu, pool; conv 8->16, relu, pool; linear 64->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = vision.Conv2D(1, 8, 3, padding=1)
        self.conv2 = vision.Conv2D(8, 16, 3, padding=1)
        self.pool = vision.MaxPool2D(2)
        self.out = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        relu = nn.functional.relu
        h = self.pool(relu(self.conv1(x.reshape([-1, 1, 8, 8]))))   # [n, 8, 4, 4]
        h = self.pool(relu(self.conv2(h)))                            # [n, 16, 2, 2]
        return self.out(h.reshape([-1, 16 * 2 * 2]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, epochs=20, profiled=True)

    fastop.seed(0)
    data = load_digits_split()
    x_test, y_test = data[2], data[3]
    print(f"fastop {fastop.__version__}: CNN conv3x3(8)-pool-conv3x3(16)-pool-linear "
          f"(fastop-vision) on {len(data[0])} training and {len(x_test)} held-out digits, "
          f"Adam")
    model = CNN()
    # The plugin's kernels are numpy GEMMs of a few hundred kFLOP, which numpy's OpenBLAS
    # splits over every core: on a shared 2-core machine that made an epoch take 1.6-3.5 s
    # instead of 0.18 s (measured). One BLAS thread suits matrices this small.
    with threadpool_limits(limits=1, user_api="blas"):
        prof = train_eager(model, data, args, learning_rate=0.01)
    trained, restored = reloaded_accuracy(model, CNN, x_test, y_test)
    print(f"held-out accuracy {trained:.1%}; the checkpoint loaded into a fresh model: "
          f"{restored:.1%}")

    if not args.quiet:
        print()
        prof.summary(sorted_by="self", row_limit=10)
    return 0 if restored == trained else 1


if __name__ == "__main__":
    sys.exit(main())
