"""Reductions (sum/mean over everything and along the last axis) and the fused
softmax-cross-entropy forward + backward, against numpy and torch.

Each library works on its own array type, made once outside the timed call: numpy
arrays, torch tensors, fastop DenseTensors sharing the numpy arrays' memory.
"""
import numpy as np

from fastop._core import reduce, softmax
from fastop._core.storage import from_numpy


def _reductions(suite, torch):
    sizes = [100_000, 1_000_000] if suite.quick else [1_000_000, 10_000_000]
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for n in sizes:
            x = rng.random(n, dtype=dtype)
            for op in ("sum", "mean"):
                _add_reduction(suite, torch, op, x, None)
                _add_reduction(suite, torch, op, x.reshape(-1, 1000), -1)


def _add_reduction(suite, torch, op, x, axis):
    """One case: `op` of x over everything (axis None) or along `axis`."""
    fx = from_numpy(x)
    kernel, np_fn = getattr(reduce, op), getattr(np, op)
    tx = torch.from_numpy(x) if torch else None
    t_fn = getattr(torch, op) if torch else None
    where = f"{x.size:.0e}" if axis is None else \
        f"{'x'.join(map(str, x.shape))} axis={axis}"
    suite.add("reduce", f"{op} f{x.dtype.itemsize * 8} {where}",
              fastop=lambda: kernel(fx, axis=axis),
              numpy=lambda: np_fn(x, axis=axis),
              torch=(lambda: t_fn(tx) if axis is None else t_fn(tx, axis)) if torch else None,
              target="≥ 1.0× numpy")


def numpy_cross_entropy(x, label, dloss, rows):
    """Softmax cross-entropy in numpy: per-row losses and the gradient of sum(loss * dloss)
    with respect to the logits (``rows`` = arange(len(x)), made once by the caller)."""
    shifted = x - x.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    loss = np.log(s) - shifted[rows, label][:, None]
    grad = e / s
    grad[rows, label] -= 1
    grad *= dloss
    return loss, grad


def _cross_entropy(suite, torch):
    shapes = [(64, 10), (512, 1000)] if suite.quick else [(64, 10), (4096, 1000)]
    rng = np.random.default_rng(1)
    for n, c in shapes:
        x = rng.standard_normal((n, c)).astype(np.float32)
        label = rng.integers(0, c, n)
        dloss = np.full((n, 1), 1.0 / n, dtype=np.float32)
        rows = np.arange(n)

        def fastop_ce(x=from_numpy(x), label=from_numpy(label), dloss=from_numpy(dloss)):
            _, sm = softmax.softmax_cross_entropy(x, label)
            return softmax.softmax_cross_entropy_grad(label, sm, dloss)

        def numpy_ce(x=x, label=label, dloss=dloss, rows=rows):
            return numpy_cross_entropy(x, label, dloss, rows)

        torch_ce = None
        if torch:
            tx = torch.from_numpy(x).requires_grad_()
            tlabel = torch.from_numpy(label)
            tdloss = torch.from_numpy(dloss[:, 0])

            def torch_ce(tx=tx, tlabel=tlabel, tdloss=tdloss):
                tx.grad = None
                loss = torch.nn.functional.cross_entropy(tx, tlabel, reduction="none")
                loss.backward(tdloss)
                return tx.grad

        suite.add("softmax", f"softmax_cross_entropy fwd+bwd f32 {n}x{c}", fastop=fastop_ce,
                  numpy=numpy_ce, torch=torch_ce,
                  target="≥ 2.0× numpy")


def register(suite):
    _reductions(suite, suite.torch)
    _cross_entropy(suite, suite.torch)
