"""Data-parallel training over MPI (PaddlePaddle's ``paddle.distributed`` names).

Run the same script as several processes with an MPI launcher; each process is one rank
and trains on its share of the data::

    pip install "fastop[mpi]"          # mpi4py and MPICH, binary wheels
    python -m fastop.distributed.launch -n 2 train.py     # or: mpiexec -n 2 python -m mpi4py train.py

    # train.py
    import fastop, fastop.distributed as dist
    dist.init_parallel_env()
    model = fastop.DataParallel(MyModel())        # same start on every rank
    opt = fastop.optimizer.SGD(0.1, parameters=model.parameters())
    for x, y in my_share_of_the_batches(dist.get_rank(), dist.get_world_size()):
        loss = loss_fn(model(x), y)
        loss.backward()                           # gradients averaged over the ranks
        opt.step(); opt.clear_grad()

Static programs use :class:`DistributedOptimizer` instead:
``DistributedOptimizer(opt).minimize(loss)``.

Without a launcher, every call works as a world of one process (MPI is not imported).
A collective that waits more than ``FASTOP_DIST_TIMEOUT`` seconds (default 1800) raises
:class:`DistributedTimeoutError` naming it and the rank, and an uncaught exception on
any rank aborts the whole job after printing its traceback, so a failed job ends
instead of hanging.
"""
from fastop.distributed._world import (DistributedTimeoutError, init_parallel_env,
                                       is_initialized)
from fastop.distributed._collective import (ReduceOp, all_gather, all_reduce, barrier,
                                            broadcast, get_rank, get_world_size)
from fastop.distributed._data_parallel import DataParallel
from fastop.distributed._optimizer import DistributedOptimizer
from fastop.distributed._world import world as _process_group
from fastop.distributed._buckets import average_flat as _average_flat
from fastop._job import install as _install_process_group

__all__ = ["init_parallel_env", "is_initialized", "get_rank", "get_world_size", "barrier",
           "all_reduce", "broadcast", "all_gather", "ReduceOp", "ParallelEnv",
           "DataParallel", "DistributedOptimizer", "DistributedTimeoutError"]


def _size_and_rank() -> tuple[int, int]:
    """(world size, rank) once :func:`init_parallel_env` has run, else (1, 0): what the
    layers below ask through :mod:`fastop._job` (the data loader's default rank)."""
    if not is_initialized():
        return 1, 0
    group = _process_group()
    return group.size, group.rank


_install_process_group(_size_and_rank, _average_flat)


class ParallelEnv:
    """This process's place in the job (PaddlePaddle's ``paddle.distributed.ParallelEnv``):
    ``rank``, ``world_size`` (alias ``nranks``), ``local_rank`` (among the ranks on this
    machine; reading it calls :func:`init_parallel_env`), ``device_id`` (0: fastop runs
    on the CPU)."""

    @property
    def rank(self) -> int:
        return _process_group().rank

    @property
    def world_size(self) -> int:
        return _process_group().size

    nranks = world_size

    @property
    def local_rank(self) -> int:
        init_parallel_env()
        return _process_group().local_rank

    @property
    def device_id(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"ParallelEnv(rank={self.rank}, world_size={self.world_size})"
