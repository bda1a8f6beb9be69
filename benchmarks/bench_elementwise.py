"""Elementwise kernels (fastop._core.elementwise) against numpy and torch.

Raw kernel calls on DenseTensors that share memory with the numpy arrays. Every
implementation writes into a preallocated output (``out=``), so the cases measure the
kernels; the ``alloc`` cases show the same calls allocating their result.
"""
import numpy as np

from fastop._core import elementwise as E
from fastop._core.storage import from_numpy


def _unary_cases(suite, name, n, rng, target):
    """`name` on n float32 elements: with out= (target) and allocating."""
    torch = suite.torch
    x = rng.standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    tx, ty = from_numpy(x), from_numpy(y)
    kernel, np_fn = getattr(E, name), getattr(np, name)
    if torch:
        px, py, t_fn = torch.from_numpy(x), torch.from_numpy(y), getattr(torch, name)
    suite.add("elementwise", f"{name} f32 {n:.0e} out=",
              fastop=lambda: kernel(tx, out=ty), numpy=lambda: np_fn(x, out=y),
              torch=(lambda: t_fn(px, out=py)) if torch else None, target=target)
    suite.add("elementwise", f"{name} f32 {n:.0e} alloc",
              fastop=lambda: kernel(tx), numpy=lambda: np_fn(x),
              torch=(lambda: t_fn(px)) if torch else None)


def _binary_case(suite, name, n, rng, target):
    """`name` on two n-element float32 arrays, with out=."""
    torch = suite.torch
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(a)
    ta, tb, tout = from_numpy(a), from_numpy(b), from_numpy(out)
    kernel, np_fn = getattr(E, name), getattr(np, name)
    if torch:
        pa, pb, pout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
        t_fn = getattr(torch, {"multiply": "mul"}.get(name, name))
    suite.add("elementwise", f"{name} f32 {n:.0e} out=",
              fastop=lambda: kernel(ta, tb, out=tout), numpy=lambda: np_fn(a, b, out=out),
              torch=(lambda: t_fn(pa, pb, out=pout)) if torch else None, target=target)


def _call_overhead_case(suite, rng):
    """A raw kernel call on 100 elements with out=: the per-call cost."""
    torch = suite.torch
    x = rng.standard_normal(100).astype(np.float32)
    y = np.empty_like(x)
    tx, ty = from_numpy(x), from_numpy(y)
    if torch:
        px, py = torch.from_numpy(x), torch.from_numpy(y)
    suite.add("elementwise", "tanh f32 100 out= (call overhead)",
              fastop=lambda: E.tanh(tx, out=ty), numpy=lambda: np.tanh(x, out=y),
              torch=(lambda: torch.tanh(px, out=py)) if torch else None,
              target="≥ 1.0× numpy")


def register(suite):
    rng = np.random.default_rng(0)
    sizes = [100_000, 1_000_000] if suite.quick else [1_000_000, 10_000_000]
    math_target = "≥ 1.0× numpy" if suite.threads == 1 else "≥ 1.7× numpy"
    for n in sizes:
        for name in ("tanh", "exp"):
            _unary_cases(suite, name, n, rng, math_target)
    for name in ("add", "multiply"):
        _binary_case(suite, name, sizes[-1], rng,
                     "≥ 1.2× numpy" if suite.threads > 1 else "")
    _call_overhead_case(suite, rng)
