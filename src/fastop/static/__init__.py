"""Static mode: build a Program of operators, then run it with an Executor.

>>> import numpy as np, fastop
>>> fastop.enable_static()
>>> x = fastop.static.data("x", [None, 2], "float32")
>>> y = x * 2.0 + 1.0
>>> exe = fastop.static.Executor(fastop.CPUPlace())
>>> exe.run(feed={"x": np.ones((1, 2), "float32")}, fetch_list=[y])
[array([[3., 3.]], dtype=float32)]
>>> fastop.disable_static()

Pieces: the IR (:mod:`.framework`), ``py_func`` (:mod:`.py_func`), parameters
(:mod:`.parameters`), ``fc`` (:mod:`.nn`), gradients (:mod:`.backward`), the executor
front end and scopes (:mod:`.executor`, loop in ``fastop._core.executor``), and
saving/loading (:mod:`.io`).
"""
from typing import Any

from fastop.ops._dispatch import current_mode, set_mode
from fastop.static.framework import (Block, Operator, Program, Variable, data,
                                     default_main_program, default_startup_program,
                                     program_guard)
from fastop.static.py_func import py_func, set_strict
from fastop.static.parameters import create_global_var, create_parameter
from fastop.static.backward import append_backward, gradients
from fastop.static.executor import Executor, Scope, global_scope, scope_guard
from fastop.static import nn
from fastop.static.framework import add_variable_methods as _add_variable_methods
from fastop.tensor._common import TENSOR_METHODS as _TENSOR_METHODS
from fastop.tensor.manipulation import cast as _cast

# Variables have the methods eager Tensors have as tensor functions, and astype/cast
# (C methods of Tensor)
_add_variable_methods({**_TENSOR_METHODS, "astype": _cast, "cast": _cast})

# Saving and loading, imported on first use (1-2 ms of `import fastop` that a script
# which never saves a Program does not need): name -> its module
_LAZY = {"save": "fastop.static.io", "load": "fastop.static.io",
         "load_program": "fastop.static.io"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'fastop.static' has no attribute {name!r}")
    from importlib import import_module
    value = globals()[name] = getattr(import_module(_LAZY[name]), name)
    return value


def __dir__():
    return sorted({*globals(), *_LAZY})

__all__ = ["CPUPlace", "enable_static", "disable_static", "in_dynamic_mode", "Program",
           "Block", "Variable", "Operator", "data", "default_main_program",
           "default_startup_program", "program_guard", "py_func", "set_strict",
           "append_backward", "gradients", "Executor", "Scope", "global_scope",
           "scope_guard", "create_parameter", "create_global_var", "save", "load",
           "load_program", "nn"]


class CPUPlace:
    """The CPU device (the only one fastop runs on)."""

    def __repr__(self) -> str:
        return "Place(cpu)"


def enable_static() -> None:
    """Make op calls append operators to the default main program."""
    set_mode("static")


def disable_static(place: Any = None) -> None:
    """Back to eager mode (the default). `place` (PaddlePaddle's argument): None,
    ``"cpu"`` or a CPUPlace; a GPU place is a ValueError (fastop runs on the CPU)."""
    if place is not None:
        from fastop.device import as_place
        as_place(place, "disable_static")
    set_mode("eager")


def in_dynamic_mode() -> bool:
    return current_mode() == "eager"
