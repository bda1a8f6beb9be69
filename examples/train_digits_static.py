"""The digits network of ``train_digits.py`` as a static Program, with a py_func activation.

The seeds' way (PaddlePaddle's ``py_func``): swish is a numpy forward function and a
numpy backward function placed in the Program with ``fastop.static.py_func``;
``Adam.minimize(loss)`` appends the backward pass and the updates; an ``Executor`` runs
the Program on each mini-batch. The inference Program (cloned before the loss) is saved
with ``fastop.static.save``, loaded back with ``load_program`` + ``load`` into a fresh
scope, and checked on the held-out images.

    python examples/train_digits_static.py [--epochs N] [--quiet]
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings

import numpy as np

import fastop
from fastop import static

from digits_common import batches, load_digits_split, parse_args, track


def swish(x):
    """Forward of the py_func: y = x * sigmoid(x), on numpy arrays."""
    x = np.asarray(x)
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))


def swish_grad(x, dy):
    """Backward: receives the input x and the output's gradient dy (the output y is
    skipped with ``skip_vars_in_backward_input``); returns the gradient of x."""
    x, dy = np.asarray(x), np.asarray(dy)
    s = 0.5 * (1.0 + np.tanh(0.5 * x))
    return dy * (s + x * s * (1.0 - s))


def py_swish(hidden):
    """Append the py_func op: the output variable is declared first (seed 000, step 2)."""
    out = static.default_main_program().current_block().create_var(
        name=hidden.name + "_swish", dtype=hidden.dtype, shape=hidden.shape)
    return static.py_func(func=swish, x=hidden, out=out, backward_func=swish_grad,
                          skip_vars_in_backward_input=out)


def build(hidden: int = 128):
    """The training and inference Programs, their startup Program and their variables."""
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        x = static.data(name="x", shape=[None, 64], dtype="float32")
        y = static.data(name="y", shape=[None], dtype="int64")
        h = py_swish(static.nn.fc(x, size=hidden))
        h = py_swish(static.nn.fc(h, size=hidden))
        logits = static.nn.fc(h, size=10)
        infer = main.clone(for_test=True)   # before the loss: only the forward pass
        loss = fastop.nn.CrossEntropyLoss()(logits, y)
        fastop.optimizer.Adam(learning_rate=0.003).minimize(loss)
    return main, infer, startup, loss, logits


def accuracy(exe, program, logits_name: str, x: np.ndarray, y: np.ndarray, scope=None) -> float:
    logits, = exe.run(program, feed={"x": x}, fetch_list=[logits_name], scope=scope)
    return float(np.mean(logits.argmax(axis=1) == y))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)

    fastop.seed(0)
    x_train, y_train, x_test, y_test = load_digits_split()
    print(f"fastop {fastop.__version__}: static Program, MLP 64-128-128-10 with a py_func "
          f"swish, on {len(x_train)} training and {len(x_test)} held-out digits, Adam")
    fastop.enable_static()
    try:
        main_program, infer, startup, loss, logits = build()
    finally:
        fastop.disable_static()
    exe = static.Executor(fastop.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(0)
    for epoch in range(1, args.epochs + 1):
        steps, finish = track(batches(len(x_train), 32, rng), f"epoch {epoch}/{args.epochs}",
                              args.quiet)
        losses = [exe.run(main_program, feed={"x": x_train[rows], "y": y_train[rows]},
                          fetch_list=[loss])[0] for rows in steps]
        finish(f"loss {np.mean(losses):.4f}, held-out accuracy "
               f"{accuracy(exe, infer, logits.name, x_test, y_test):.1%}")

    trained = accuracy(exe, infer, logits.name, x_test, y_test)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "digits_static")
        with warnings.catch_warnings():
            # save warns that loading needs this script's module allowed: we allow it below
            warnings.filterwarnings("ignore", "static.save: the program calls Python")
            static.save(infer, path)
        reloaded = static.load_program(path, allowed_modules=["__main__"])
        scope = static.Scope()
        static.load(reloaded, path, exe, scope=scope)
    restored = accuracy(exe, reloaded, logits.name, x_test, y_test, scope=scope)
    print(f"held-out accuracy {trained:.1%}; the saved Program loaded into a fresh scope: "
          f"{restored:.1%}")
    return 0 if restored == trained else 1


if __name__ == "__main__":
    sys.exit(main())
