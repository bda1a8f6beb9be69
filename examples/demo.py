"""fastop demo: a small fully connected network, forward and backward, through fastop's
Cython kernels — each one found in the op registry by name — checked against the same
computation in numpy, then trained for a few SGD steps with the ``fastop::sgd_update``
kernel.

    make demo                                  # builds, installs, runs this
    PYTHONPATH=src python examples/demo.py     # in a source checkout with built extensions

The network: x [N, 2] -> fc(32, tanh) -> fc(3) -> softmax cross-entropy with integer
labels, on three Gaussian blobs. The backward pass is written kernel by kernel, then
compared with eager autograd's ``loss.backward()``, which runs the gradient rules
registered with the ops.
"""
from __future__ import annotations

import sys

import numpy as np

import fastop
from fastop.ops import registry

# The kernels this demo runs, by registry name.
OPS = ("fastop::fc", "fastop::matmul", "fastop::tanh_grad", "fastop::sum", "fastop::mean",
       "fastop::softmax_cross_entropy", "fastop::softmax_cross_entropy_grad",
       "fastop::argmax", "fastop::sgd_update")

DTYPE = np.float32
TOLERANCE = 1e-4   # float32, relative to the largest entry


def run(name: str, *inputs: np.ndarray, **attrs) -> np.ndarray | tuple[np.ndarray, ...]:
    """Call a registered op on numpy arrays (eager mode: its kernel runs now); numpy
    arrays out."""
    outs = registry.get(name)(*inputs, **attrs)
    if isinstance(outs, (tuple, list)):
        return tuple(np.asarray(t) for t in outs)
    return np.asarray(outs)


def forward_backward(params, x, label):
    """Loss, logits and the four parameter gradients, computed by fastop kernels."""
    w1, b1, w2, b2 = params
    h = run("fastop::fc", x, w1, b1, activation="tanh")
    logits = run("fastop::fc", h, w2, b2)
    loss_rows, probs = run("fastop::softmax_cross_entropy", logits, label)
    loss = run("fastop::mean", loss_rows)

    dloss = np.full_like(loss_rows, 1.0 / len(x))                      # d mean
    dlogits = run("fastop::softmax_cross_entropy_grad", label, probs, dloss)
    dw2 = run("fastop::matmul", h, dlogits, transpose_x=True)
    db2 = run("fastop::sum", dlogits, axis=0)
    dh = run("fastop::matmul", dlogits, w2, transpose_y=True)
    dz1 = run("fastop::tanh_grad", h, dh)                              # dh * (1 - h²)
    dw1 = run("fastop::matmul", x, dz1, transpose_x=True)
    db1 = run("fastop::sum", dz1, axis=0)
    return float(loss), logits, (dw1, db1, dw2, db2)


def autograd_grads(params, x, label) -> list[np.ndarray]:
    """The same gradients from eager autograd, i.e. from the ops' registered rules."""
    ops = fastop.ops.fastop
    tensors = [fastop.to_tensor(p, stop_gradient=False) for p in params]
    w1, b1, w2, b2 = tensors
    logits = ops.fc(ops.fc(x, w1, b1, activation="tanh"), w2, b2)
    loss_rows, _ = ops.softmax_cross_entropy(logits, label)
    ops.mean(loss_rows).backward()
    return [t.grad.numpy() for t in tensors]


def numpy_forward_backward(params, x, label):
    """The same computation in numpy, as the reference."""
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = -np.log(probs[rows, label]).mean()
    dlogits = probs.copy()
    dlogits[rows, label] -= 1.0
    dlogits /= len(x)
    dh = dlogits @ w2.T
    dz1 = dh * (1.0 - h * h)
    return float(loss), logits, (x.T @ dz1, dz1.sum(0), h.T @ dlogits, dlogits.sum(0))


def blobs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Three Gaussian blobs in 2-D with integer labels."""
    centers = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    label = rng.integers(0, 3, n)
    x = centers[label] + 0.7 * rng.standard_normal((n, 2))
    return x.astype(DTYPE), label.astype(np.int64)


def init_params(rng: np.random.Generator, hidden: int = 32) -> list[np.ndarray]:
    return [(rng.standard_normal((2, hidden)) / np.sqrt(2)).astype(DTYPE),
            np.zeros(hidden, DTYPE),
            (rng.standard_normal((hidden, 3)) / np.sqrt(hidden)).astype(DTYPE),
            np.zeros(3, DTYPE)]


def max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def main() -> int:
    missing = [name for name in OPS if name not in registry]
    if missing:
        print("demo: these kernels are not registered yet: " + ", ".join(missing)
              + "\n(registered: " + ", ".join(op.name for op in registry) + ")",
              file=sys.stderr)
        return 1
    rng = np.random.default_rng(0)
    x, label = blobs(300, rng)
    params = init_params(rng)
    print(f"fastop {fastop.__version__} demo: a 2-32-3 tanh network on {len(x)} points "
          f"(3 classes), {np.dtype(DTYPE).name}, {fastop.get_num_threads()} thread(s)\n")

    loss, logits, grads = forward_backward(params, x, label)
    ref_loss, ref_logits, ref_grads = numpy_forward_backward(params, x, label)
    ok = abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss) \
        and max_rel_diff(logits, ref_logits) <= TOLERANCE
    print("forward   h = fc(x, w1, b1, activation='tanh') -> logits = fc(h, w2, b2)")
    print(f"          logits {list(logits.shape)}, max rel. diff vs numpy "
          f"{max_rel_diff(logits, ref_logits):.1e}")
    print(f"          loss = mean(softmax_cross_entropy(logits, label)) = {loss:.6f} "
          f"(numpy {ref_loss:.6f})\n")
    print("backward  param  shape     grad norm   max rel. diff vs numpy")
    for pname, g, ref in zip(("w1", "b1", "w2", "b2"), grads, ref_grads):
        diff = max_rel_diff(g, ref)
        ok &= diff <= TOLERANCE
        print(f"          {pname:5s}  {str(list(g.shape)):8s}  {np.linalg.norm(g):9.6f}"
              f"   {diff:.1e}")

    auto = autograd_grads(params, x, label)
    diff = max(max_rel_diff(a, g) for a, g in zip(auto, grads))
    ok &= diff <= TOLERANCE
    print(f"          eager autograd (loss.backward()) gives the same gradients: "
          f"max rel. diff {diff:.1e}")

    lr = np.array([0.5], DTYPE)
    print("\ntraining  SGD (fastop::sgd_update), learning rate 0.5, full batch")
    for step in range(1, 101):
        loss, logits, grads = forward_backward(params, x, label)
        params = [run("fastop::sgd_update", p, g, lr) for p, g in zip(params, grads)]
        if step == 1 or step % 25 == 0:
            print(f"          step {step:3d}  loss {loss:.4f}")
    predicted = run("fastop::argmax", forward_backward(params, x, label)[1], axis=1)
    print(f"          accuracy {np.mean(predicted == label):.1%}")

    print("\nfastop and numpy agree." if ok else "\nMISMATCH between fastop and numpy.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
