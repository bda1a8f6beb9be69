"""Training-step layers: layer_norm and dropout forward + backward through eager autograd
(the issue's targets, 64x256 float32), the same computations as raw kernel calls (what
the kernels cost without the framework: dispatch, autograd recording, the backward
walk), and embedding / GELU steps for reference.

Each fastop step runs the layer's functional and ``backward`` on a tensor that needs a
gradient, then drops the gradients; torch does the same; numpy computes the forward and
backward formulas (for dropout with ``Generator.random`` for the mask).
"""
import numpy as np

import fastop
import fastop.nn.functional as F
from fastop._core import norm as norm_kernels
from fastop._core import random as random_kernels
from fastop._core.storage import from_numpy

ROWS, COLS = 64, 256


def _numpy_layer_norm_step(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    xhat = (x - mean) * rstd
    _ = xhat * w + b
    gw = g * w
    dx = rstd * (gw - gw.mean(axis=1, keepdims=True)
                 - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    return dx, (g * xhat).sum(axis=0), g.sum(axis=0)


def _register_layer_norm(suite):
    torch = suite.torch
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal((ROWS, COLS), dtype=np.float32), \
        rng.standard_normal((ROWS, COLS), dtype=np.float32)
    wa, ba = np.ones(COLS, np.float32), np.zeros(COLS, np.float32)
    x = fastop.to_tensor(a, stop_gradient=False)
    w, b = fastop.to_tensor(wa, stop_gradient=False), fastop.to_tensor(ba, stop_gradient=False)
    dy = fastop.to_tensor(g)

    def fastop_step():
        F.layer_norm(x, COLS, w, b).backward(dy)
        x.grad = w.grad = b.grad = None

    torch_step = None
    if torch:
        tx = torch.from_numpy(a.copy()).requires_grad_()
        tw, tb = torch.from_numpy(wa.copy()).requires_grad_(), \
            torch.from_numpy(ba.copy()).requires_grad_()
        tg = torch.from_numpy(g)

        def torch_step():
            torch.nn.functional.layer_norm(tx, (COLS,), tw, tb).backward(tg)
            tx.grad = tw.grad = tb.grad = None

    name = f"layer_norm fwd+bwd {ROWS}x{COLS} f32"
    suite.add("nn", name, fastop=fastop_step,
              numpy=lambda: _numpy_layer_norm_step(a, wa, ba, g), torch=torch_step,
              target="≥ 1.5× torch")

    da, dw, db = from_numpy(a), from_numpy(wa), from_numpy(ba)
    dg = from_numpy(g)
    _, mean, rstd = norm_kernels.layer_norm(da, dw, db)

    def kernels_only():
        norm_kernels.layer_norm(da, dw, db)
        norm_kernels.layer_norm_grad(da, mean, rstd, dg, dw)

    suite.add("nn", f"{name}, kernels alone", fastop=kernels_only,
              numpy=lambda: _numpy_layer_norm_step(a, wa, ba, g), torch=torch_step,
              target="(the raw kernel calls: the framework's share is the difference)")


def _register_dropout(suite):
    torch = suite.torch
    rng = np.random.default_rng(1)
    a, g = rng.standard_normal((ROWS, COLS), dtype=np.float32), \
        rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x, dy = fastop.to_tensor(a, stop_gradient=False), fastop.to_tensor(g)
    gen = np.random.default_rng(2)

    def fastop_step():
        F.dropout(x, 0.5).backward(dy)
        x.grad = None

    def numpy_step():
        keep = gen.random(a.shape, dtype=np.float32) >= 0.5
        _ = np.where(keep, a * 2.0, 0.0)
        return np.where(keep, g * 2.0, 0.0)

    torch_step = None
    if torch:
        tx, tg = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(g)

        def torch_step():
            torch.nn.functional.dropout(tx, 0.5, training=True).backward(tg)
            tx.grad = None

    name = f"dropout fwd+bwd {ROWS}x{COLS} f32"
    suite.add("nn", name, fastop=fastop_step, numpy=numpy_step, torch=torch_step, target="≥ 1.5× torch")

    da, dg = from_numpy(a), from_numpy(g)

    def kernels_only():
        _, mask = random_kernels.dropout(da, p=0.5)
        random_kernels.dropout_grad(mask, dg, p=0.5)

    suite.add("nn", f"{name}, kernels alone", fastop=kernels_only, numpy=numpy_step,
              torch=torch_step,
              target="(the raw kernel calls: the framework's share is the difference)")


def _register_embedding_and_gelu(suite):
    torch = suite.torch
    rng = np.random.default_rng(3)
    table = rng.standard_normal((10_000, 128), dtype=np.float32)
    ids = rng.integers(0, 10_000, (64, 32))
    g = rng.standard_normal((64, 32, 128), dtype=np.float32)
    w, fids, dy = fastop.to_tensor(table, stop_gradient=False), fastop.to_tensor(ids), \
        fastop.to_tensor(g)

    def fastop_embedding():
        F.embedding(fids, w).backward(dy)
        w.grad = None

    def numpy_embedding():
        _ = table[ids]
        grad = np.zeros_like(table)
        np.add.at(grad, ids.reshape(-1), g.reshape(-1, 128))
        return grad

    torch_embedding = None
    if torch:
        tw, tids, tg = torch.from_numpy(table.copy()).requires_grad_(), torch.from_numpy(ids), \
            torch.from_numpy(g)

        def torch_embedding():
            torch.nn.functional.embedding(tids, tw).backward(tg)
            tw.grad = None

    suite.add("nn", "embedding fwd+bwd 64x32 ids, 10000x128 f32", fastop=fastop_embedding,
              numpy=numpy_embedding, torch=torch_embedding)

    a = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x, dz = fastop.to_tensor(a, stop_gradient=False), fastop.to_tensor(a)

    def fastop_gelu():
        F.gelu(x).backward(dz)
        x.grad = None

    torch_gelu = None
    if torch:
        tx, tz = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a)

        def torch_gelu():
            torch.nn.functional.gelu(tx).backward(tz)
            tx.grad = None

    suite.add("nn", f"gelu fwd+bwd {ROWS}x{COLS} f32", fastop=fastop_gelu, torch=torch_gelu)


def register(suite):
    _register_layer_norm(suite)
    _register_dropout(suite)
    _register_embedding_and_gelu(suite)
