"""Optimizers (SGD, Momentum, Adam) with in-place Cython update kernels; eager
``step()``/``clear_grad()`` and static ``minimize(loss)``."""
from fastop.optimizer.optimizer import SGD, Adam, Momentum, Optimizer

__all__ = ["Optimizer", "SGD", "Momentum", "Adam"]
