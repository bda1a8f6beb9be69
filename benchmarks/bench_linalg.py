"""matmul (float32/float64, square n×n, and an MLP's batch-64 products) and the fused
fc = tanh(x @ W + b).

numpy and fastop get the same allocation policy: matmul allocates its result in both;
fc writes into a preallocated output in both (numpy's three calls use ``out=``).
torch's fc is ``torch.tanh(torch.addmm(b, x, W))``.
"""
import numpy as np

from fastop._core import linalg
from fastop._core.storage import from_numpy

FC_SHAPES = [(64, 784, 256), (512, 1024, 1024)]
# The products of a batch-64 784-256-256-10 MLP's forward pass: small panels, where
# OpenBLAS's sgemm depends on blas.fault_in_buffers (11-14 against 31-35 GFLOP/s).
MLP_PRODUCTS = [(64, 784, 256), (64, 256, 256)]


def register(suite):
    rng = np.random.default_rng(0)
    torch = suite.torch
    sizes = (256, 512) if suite.quick else (256, 512, 1024, 2048)

    def add_matmul(name, m, k, n, dtype, target):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        fa, fb = from_numpy(a), from_numpy(b)
        ta, tb = (torch.from_numpy(a), torch.from_numpy(b)) if torch else (None, None)
        suite.add("linalg", name,
                  fastop=lambda: linalg.matmul(fa, fb),
                  numpy=lambda: a @ b,
                  torch=(lambda: torch.matmul(ta, tb)) if torch else None,
                  target=target)

    for dtype in ("float32", "float64"):
        for n in sizes:
            add_matmul(f"matmul {dtype} {n}", n, n, n, dtype, "≥ 0.95× numpy")
    for m, k, n in MLP_PRODUCTS:
        add_matmul(f"matmul float32 {m}x{k}x{n} (MLP layer)", m, k, n, "float32",
                   "≥ 0.95× numpy, ≥ 0.9× torch")
    for m, k, n in FC_SHAPES:
        x = rng.standard_normal((m, k)).astype("float32")
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
        bias = rng.standard_normal(n).astype("float32")
        out = np.empty((m, n), "float32")
        fx, fw, fbias, fout = from_numpy(x), from_numpy(w), from_numpy(bias), from_numpy(
            np.empty((m, n), "float32"))

        def numpy_fc(x=x, w=w, bias=bias, out=out):
            np.matmul(x, w, out=out)
            np.add(out, bias, out=out)
            np.tanh(out, out=out)

        def fastop_fc(fx=fx, fw=fw, fbias=fbias, fout=fout):
            linalg.fc(fx, fw, fbias, activation="tanh", out=fout)

        if torch:
            tx, tw, tbias = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)

            def torch_fc(tx=tx, tw=tw, tbias=tbias):
                torch.tanh(torch.addmm(tbias, tx, tw))
        suite.add("linalg", f"fc tanh f32 {m}x{k}x{n}", fastop=fastop_fc, numpy=numpy_fc,
                  torch=torch_fc if torch else None,
                  target="≥ 1.0× numpy, ≥ 1.1× torch")
