"""Elementwise kernels (fastop._core.elementwise) against numpy and torch.

Raw kernel calls on DenseTensors that share memory with the numpy arrays. Every
implementation writes into a preallocated output (``out=``), so the cases measure the
kernels; the ``alloc`` cases show the same calls allocating their result.
"""
import numpy as np

from fastop._core import elementwise as E
from fastop._core.storage import from_numpy


def register(suite):
    torch = suite.torch
    rng = np.random.default_rng(0)
    big = [100_000, 1_000_000] if suite.quick else [1_000_000, 10_000_000]
    math_target = "≥ 1.0× numpy" if suite.threads == 1 else "≥ 1.7× numpy"

    for n in big:
        x = rng.standard_normal(n).astype(np.float32)
        y = np.empty_like(x)
        tx, ty = from_numpy(x), from_numpy(y)
        px, py = (torch.from_numpy(x), torch.from_numpy(y)) if torch else (None, None)
        for name in ("tanh", "exp"):
            kernel, np_fn = getattr(E, name), getattr(np, name)
            t_fn = getattr(torch, name) if torch else None
            suite.add("elementwise", f"{name} f32 {n:.0e} out=",
                      fastop=lambda k=kernel: k(tx, out=ty),
                      numpy=lambda f=np_fn: f(x, out=y),
                      torch=(lambda f=t_fn: f(px, out=py)) if torch else None,
                      work=n, target=math_target)
            suite.add("elementwise", f"{name} f32 {n:.0e} alloc",
                      fastop=lambda k=kernel: k(tx),
                      numpy=lambda f=np_fn: f(x),
                      torch=(lambda f=t_fn: f(px)) if torch else None,
                      work=n)

    n = big[-1]
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(a)
    ta, tb, tout = from_numpy(a), from_numpy(b), from_numpy(out)
    pa, pb, pout = (torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)) \
        if torch else (None, None, None)
    for name, np_name in (("add", "add"), ("multiply", "multiply")):
        kernel, np_fn = getattr(E, name), getattr(np, np_name)
        t_fn = getattr(torch, np_name if np_name != "multiply" else "mul") if torch else None
        suite.add("elementwise", f"{name} f32 {n:.0e} out=",
                  fastop=lambda k=kernel: k(ta, tb, out=tout),
                  numpy=lambda f=np_fn: f(a, b, out=out),
                  torch=(lambda f=t_fn: f(pa, pb, out=pout)) if torch else None,
                  work=n, target="≥ 1.2× numpy" if suite.threads > 1 else "")

    # per-call overhead: a raw kernel call on 100 elements
    s = rng.standard_normal(100).astype(np.float32)
    s_out = np.empty_like(s)
    ts, ts_out = from_numpy(s), from_numpy(s_out)
    ps, ps_out = (torch.from_numpy(s), torch.from_numpy(s_out)) if torch else (None, None)
    suite.add("elementwise", "tanh f32 100 out= (call overhead)",
              fastop=lambda: E.tanh(ts, out=ts_out),
              numpy=lambda: np.tanh(s, out=s_out),
              torch=(lambda: torch.tanh(ps, out=ps_out)) if torch else None,
              work=100, unit="elem", target="≥ 1.0× numpy")
