"""fastop's Cython numerical core: storage, kernels, BLAS, executor.

Nothing here imports a fastop module outside ``fastop._core``.
"""
import os as _os

# OpenMP threads that busy-wait between parallel regions steal the other core from BLAS
# and from other processes on a small machine (measured here: a 2-thread sum of 1e6
# floats took 3-19 ms spinning vs 0.18 ms passive). libgomp reads this once, when the
# first extension module loads it, so it must be set before any import below.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
