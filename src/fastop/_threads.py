"""One switch for the threads fastop's kernels use: its own loops and the BLAS products,
all run on fastop's thread pool (fastop._core.parallel)."""
from fastop._core import kernel as _kernel

__all__ = ["set_num_threads", "get_num_threads"]


def set_num_threads(n: int) -> None:
    """Use `n` threads in fastop's kernels (elementwise, reductions) and in BLAS."""
    _kernel.set_num_threads(n)
    from fastop._core import blas
    blas.set_num_threads(n)


def get_num_threads() -> int:
    return _kernel._get_num_threads()
