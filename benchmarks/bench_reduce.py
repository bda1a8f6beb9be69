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
        dt = np.dtype(dtype).name[-2:]
        for n in sizes:
            x = rng.random(n, dtype=dtype)
            rows = x.reshape(-1, 1000)
            fx, frows = from_numpy(x), from_numpy(rows)
            tx = torch.from_numpy(x) if torch else None
            trows = torch.from_numpy(rows) if torch else None
            cases = [
                ("sum", "all", lambda: reduce.sum(fx), lambda: np.sum(x),
                 lambda: torch.sum(tx)),
                ("mean", "all", lambda: reduce.mean(fx), lambda: np.mean(x),
                 lambda: torch.mean(tx)),
                ("sum", "last", lambda: reduce.sum(frows, axis=-1),
                 lambda: np.sum(rows, axis=-1), lambda: torch.sum(trows, -1)),
                ("mean", "last", lambda: reduce.mean(frows, axis=-1),
                 lambda: np.mean(rows, axis=-1), lambda: torch.mean(trows, -1)),
            ]
            for op, where, fo, npf, tf in cases:
                shape = f"{n:.0e}" if where == "all" else f"{n // 1000}x1000 axis=-1"
                suite.add("reduce", f"{op} f{dt} {shape}", fastop=fo, numpy=npf,
                          torch=tf if torch else None, work=n, unit="elem",
                          target="≥ 1.0× numpy")


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
            shifted = x - x.max(axis=1, keepdims=True)
            e = np.exp(shifted)
            s = e.sum(axis=1, keepdims=True)
            loss = np.log(s) - shifted[rows, label][:, None]
            grad = e / s
            grad[rows, label] -= 1
            grad *= dloss
            return loss, grad

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
                  numpy=numpy_ce, torch=torch_ce, work=n * c, unit="elem",
                  target="≥ 2.0× numpy")


def register(suite):
    _reductions(suite, suite.torch)
    _cross_entropy(suite, suite.torch)
