"""fastop's built-in distributed plugin: the op ``dist::allreduce_mean``, registered
through the same hook as any plugin (``fastop_register_ops``), which
``fastop.distributed.DistributedOptimizer`` appends to static programs — one per bucket
of gradients — and the executor runs like any Python-kernel op.

Registered at ``import fastop`` (so a saved program using it loads anywhere); MPI is
only touched when the kernel runs, under an MPI launcher. The kernel averages through
the process group fastop.distributed installs in :mod:`fastop._job` (this layer is
below it and does not import it).
"""
from __future__ import annotations

import math

import numpy as np

from fastop._job import allreduce_mean as job_allreduce_mean
from fastop.hookspecs import hookimpl
from fastop.ops._registry import TensorMeta


def check_bucket(xs) -> None:
    """A bucket is at least one tensor, all of one dtype, with known shapes (its size
    must be the same on every rank); `xs` are metas or arrays (both have .shape and a
    dtype with .name)."""
    if not xs:
        raise ValueError("dist::allreduce_mean: 'xs' must hold at least one tensor")
    dtypes = sorted({x.dtype.name for x in xs})
    if len(dtypes) > 1:
        raise TypeError(f"dist::allreduce_mean: every input of 'xs' must have one dtype, "
                        f"got {dtypes}")
    unknown = [i for i, x in enumerate(xs) if None in x.shape]
    if unknown:
        raise ValueError(f"dist::allreduce_mean: input xs[{unknown[0]}] has an unknown dim "
                         f"({xs[unknown[0]].shape}); bucket sizes must be known")


def allreduce_mean_meta(xs):
    """One flat output holding every input, in order."""
    check_bucket(xs)
    return TensorMeta([sum(math.prod(x.shape) for x in xs)], xs[0].dtype)


@hookimpl
def fastop_register_ops(registry):
    op = registry.define(
        "dist::allreduce_mean", inputs=["xs*"], outputs=["out"], meta=allreduce_mean_meta,
        differentiable=(),
        doc="The mean over all ranks of xs (one dtype), flattened and concatenated in "
            "order: one MPI all-reduce for a bucket of gradients. In a world of one "
            "process, the concatenation.")

    @op.kernel("float32", "float64")
    def allreduce_mean(xs):
        check_bucket(xs)
        return job_allreduce_mean(xs, "dist::allreduce_mean")


@hookimpl
def fastop_op_samples():
    """Buckets for fastop.testing.opcheck: several shapes in one bucket, float32 and
    float64, and a bucket of one tensor (outside an MPI launcher: the concatenation)."""
    from fastop.ops.checking import Sample

    rng = np.random.default_rng(0)
    return {"dist::allreduce_mean": [
        Sample([rng.standard_normal((2, 3)), rng.standard_normal(4),
                rng.standard_normal((1, 1, 2))]),
        Sample([rng.standard_normal((3, 2)).astype("float32"),
                rng.standard_normal(5).astype("float32")]),
        Sample([rng.standard_normal(())]),
    ]}
