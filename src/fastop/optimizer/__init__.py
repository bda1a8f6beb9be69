"""Optimizers (SGD, Momentum, Adam, AdamW; Adagrad and Adamax composed of elementwise
ops) with in-place Cython update kernels (weight
decay and gradient clipping fused in); eager ``step()``/``clear_grad()`` and static
``minimize(loss)``. Learning-rate schedules are in the submodule
``fastop.optimizer.lr`` (imported on first use); ``learning_rate=`` takes one."""
from fastop.optimizer.optimizer import (SGD, Adagrad, Adam, Adamax, AdamW, Momentum,
                                        Optimizer)

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "AdamW", "Adagrad", "Adamax", "lr"]


def __getattr__(name: str):
    if name == "lr":
        from importlib import import_module
        return import_module("fastop.optimizer.lr")   # importing sets the attribute
    raise AttributeError(f"module 'fastop.optimizer' has no attribute {name!r}")
