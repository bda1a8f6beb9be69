"""BLAS for fastop: scipy-openblas32's sgemm/dgemm, loaded lazily with dlopen.

OpenBLAS runs single-threaded; large products are split into pieces that fastop's thread
pool (fastop._core.parallel) runs.
The Cython API (``cimport fastop._core.blas``) is ``gemm`` and ``gemm_batch_strided``
(row-major, GIL-free, fused over float/double) and ``ensure_loaded``.
"""
import numpy as np

def load() -> str:
    """Load the library now (idempotent); its path. Raises ImportError."""

def library_path() -> str | None:
    """Path of the loaded library, None while it is not loaded."""

def set_num_threads(n: int) -> None:
    """Threads a large product is split across (at most the number of processors)."""

def get_num_threads() -> int:
    """Threads a large product is split across (FASTOP_NUM_THREADS, OMP_NUM_THREADS or
    OPENBLAS_NUM_THREADS by default, else the number of processors)."""

def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
          beta: float = 0.0, trans_a: bool = False, trans_b: bool = False) -> None:
    """Test shim: c[0] = alpha·op(a[0])·op(b[0]) + beta·c[0] (C-contiguous 3-D arrays)."""

def _gemm_batch_strided(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
                        beta: float = 0.0) -> None:
    """Test shim: c[i] = alpha·a[i or 0]·b[i or 0] + beta·c[i]."""
