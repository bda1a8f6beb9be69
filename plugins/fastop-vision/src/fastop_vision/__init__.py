"""fastop-vision: convolution and pooling for fastop as numpy kernels (a fastop plugin).

The ops live in the ``vision`` namespace (``fastop.ops.vision.conv2d``); this package
adds Paddle's functional forms (:func:`conv2d`, :func:`max_pool2d`, :func:`avg_pool2d`)
and layers (:class:`Conv2D`, :class:`MaxPool2D`, :class:`AvgPool2D`). They are imported
on first use: fastop imports this package while loading plugins, before the ops they
bind exist.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

__all__ = ["conv2d", "max_pool2d", "avg_pool2d", "Conv2D", "MaxPool2D", "AvgPool2D",
           "functional"]

_HOME = {"conv2d": "functional", "max_pool2d": "functional", "avg_pool2d": "functional",
         "Conv2D": "layers", "MaxPool2D": "layers", "AvgPool2D": "layers"}


def __getattr__(name: str) -> Any:
    if name == "functional":
        value = import_module("fastop_vision.functional")
    elif name in _HOME:
        value = getattr(import_module(f"fastop_vision.{_HOME[name]}"), name)
    else:
        raise AttributeError(f"module 'fastop_vision' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
