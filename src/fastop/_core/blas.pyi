"""BLAS for fastop: scipy-openblas32's sgemm/dgemm, loaded lazily with dlopen.

The Cython API (``cimport fastop._core.blas``) is ``gemm`` and ``gemm_batch_strided``
(row-major, GIL-free, fused over float/double) and ``ensure_loaded``.
"""
import numpy as np

def load() -> str:
    """Load the library now (idempotent); its path. Raises ImportError."""

def library_path() -> str | None:
    """Path of the loaded library, None while it is not loaded."""

def set_num_threads(n: int) -> None:
    """Threads OpenBLAS uses; applied at load when the library is not loaded yet."""

def get_num_threads() -> int:
    """Threads OpenBLAS uses (loads the library unless a count was set before)."""

def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
          beta: float = 0.0, trans_a: bool = False, trans_b: bool = False) -> None:
    """Test shim: c[0] = alpha·op(a[0])·op(b[0]) + beta·c[0] (C-contiguous 3-D arrays)."""

def _gemm_batch_strided(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
                        beta: float = 0.0) -> None:
    """Test shim: c[i] = alpha·a[i or 0]·b[i or 0] + beta·c[i]."""
