"""Optimizers (SGD, Momentum, Adam) with in-place Cython update kernels; eager
``step()``/``clear_grad()`` and static ``minimize(loss)``. Learning-rate schedules are in
the submodule ``fastop.optimizer.lr`` (imported on first use)."""
from fastop.optimizer.optimizer import SGD, Adam, Momentum, Optimizer

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "lr"]


def __getattr__(name: str):
    if name == "lr":
        from importlib import import_module
        return import_module("fastop.optimizer.lr")   # importing sets the attribute
    raise AttributeError(f"module 'fastop.optimizer' has no attribute {name!r}")
