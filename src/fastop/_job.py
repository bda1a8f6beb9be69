"""This process's place in a data-parallel job, for the layers below
:mod:`fastop.distributed` that must not import it: the default rank and world size of
:class:`fastop.io.DistributedBatchSampler`, and the kernel of the built-in op
``dist::allreduce_mean``.

:mod:`fastop.distributed` installs its process group here when it is imported (an
inversion: the lower layers ask, the upper one answers). Until then this process is a
world of one, except that an all-reduce under an MPI launcher is an error: each rank
would otherwise silently compute its own result.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    SizeAndRank = Callable[[], tuple[int, int]]
    AllreduceMean = Callable[[Sequence[np.ndarray]], np.ndarray]

__all__ = ["LAUNCHER_VARS", "install", "size_and_rank", "allreduce_mean"]

# The environment variables by which an MPI launcher says it started this process:
# PMI_SIZE/PMI_RANK from MPICH's and Intel's mpiexec and Slurm, OMPI_COMM_WORLD_SIZE
# from Open MPI, PMIX_RANK from PMIx launchers.
LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")

_size_and_rank: SizeAndRank | None = None
_allreduce_mean: AllreduceMean | None = None


def install(size_and_rank_fn: SizeAndRank, allreduce_mean_fn: AllreduceMean) -> None:
    """Answer this module's questions from a process group (fastop.distributed does, on
    import): `size_and_rank_fn()` gives (world size, rank) once the group is
    initialised, else (1, 0); `allreduce_mean_fn(arrays)` gives the mean over the ranks
    of `arrays` (one dtype), flattened and concatenated in order."""
    global _size_and_rank, _allreduce_mean
    _size_and_rank, _allreduce_mean = size_and_rank_fn, allreduce_mean_fn


def size_and_rank() -> tuple[int, int]:
    """(world size, rank) of this process's initialised process group, else (1, 0)."""
    return (1, 0) if _size_and_rank is None else _size_and_rank()


def allreduce_mean(arrays: Sequence[np.ndarray], what: str) -> np.ndarray:
    """The mean over all ranks of `arrays` (one dtype), flattened and concatenated in
    order; without a process group, the concatenation (a world of one). `what` names
    the caller in the error raised under an MPI launcher with no process group."""
    if _allreduce_mean is not None:
        return _allreduce_mean(arrays)
    if any(var in os.environ for var in LAUNCHER_VARS):
        raise RuntimeError(
            f"{what}: this process was started by an MPI launcher, but fastop.distributed "
            f"has not been imported, so there is no process group to average over: "
            f"import fastop.distributed (and call init_parallel_env()) before running it")
    return np.concatenate([np.ravel(a) for a in arrays])
