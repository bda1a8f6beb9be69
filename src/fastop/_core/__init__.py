"""fastop's Cython numerical core: storage, kernels, BLAS, executor.

Nothing here imports a fastop module outside ``fastop._core``.
"""
