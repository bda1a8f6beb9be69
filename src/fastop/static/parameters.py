"""Parameters and global variables of static programs.

A parameter is a persistable Variable of the main program; the startup program holds a
variable of the same name and the ``static::initialize`` op that fills it. The op
carries its own seed, drawn from fastop's global generator while the program is built,
so ``fastop.seed(n)`` before building makes initialization reproducible.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fastop import initializer as _init
from fastop._core.storage import as_dtype
from fastop._random import next_seed
from fastop.ops import TensorMeta, registry
from fastop.static.framework import (Variable, default_main_program,
                                     default_startup_program, unique_name)

__all__ = ["create_parameter", "create_global_var"]


def _initialize(initializer: Callable, shape: list, dtype: Any, seed: int) -> np.ndarray:
    if isinstance(initializer, _init.Initializer):
        return initializer(shape, dtype, generator=np.random.default_rng(seed))
    return np.asarray(initializer(shape, dtype), dtype=dtype.numpy_dtype, order="C")


_INITIALIZE = registry.define(
    "static::initialize", inputs=(), outputs=("out",),
    attrs={"initializer": None, "shape": [], "dtype": as_dtype("float32"), "seed": 0},
    meta=lambda initializer, shape, dtype, seed: TensorMeta(shape, dtype),
    kernels={"*": _initialize}, differentiable=(),
    doc="Fill a persistable variable by calling `initializer(shape, dtype)` (an "
        "Initializer draws from a generator seeded with `seed`).")


def _startup_init(name: str, shape: list[int], dtype: Any, initializer: Callable) -> None:
    block = default_startup_program().global_block()
    var = block.create_var(name, dtype, shape, persistable=True, stop_gradient=True)
    block.append_op(_INITIALIZE, [], {"initializer": initializer, "shape": shape,
                                      "dtype": as_dtype(dtype), "seed": next_seed()},
                    outputs=var)


def _known_shape(shape: Sequence[int], what: str) -> list[int]:
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ValueError(f"{what}: needs a fully known shape, got {list(shape)}")
    return dims


def create_parameter(shape: Sequence[int], dtype: Any = "float32", name: str | None = None,
                     initializer: Callable | None = None, *, is_bias: bool = False,
                     trainable: bool = True) -> Variable:
    """A trainable persistable Variable initialized by the startup program.

    `initializer` is a :mod:`fastop.initializer` object (or any ``f(shape, dtype) ->
    array``); default XavierUniform, or zeros when `is_bias`.
    """
    shape = _known_shape(shape, "create_parameter")
    name = name or unique_name("create_parameter") + (".b_0" if is_bias else ".w_0")
    block = default_main_program().global_block()
    if block.has_var(name):
        raise ValueError(f"create_parameter: the program already has a variable '{name}'")
    if initializer is None:
        initializer = _init.Constant(0.0) if is_bias else _init.XavierUniform()
    param = block.create_var(name, dtype, shape, persistable=True,
                             stop_gradient=not trainable, is_parameter=True,
                             trainable=trainable)
    _startup_init(name, shape, dtype, initializer)
    return param


def create_global_var(shape: Sequence[int], value: float, dtype: Any,
                      persistable: bool = False, force_cpu: bool = False,
                      name: str | None = None) -> Variable:
    """A variable of the main program filled with `value` by the startup program
    (PaddlePaddle's ``create_global_var``). It lives in the scope whatever
    `persistable` says; `force_cpu` is accepted for compatibility (all is CPU)."""
    shape = _known_shape(shape, "create_global_var")
    name = name or unique_name("global_var")
    block = default_main_program().global_block()
    var = block.create_var(name, dtype, shape, persistable=True, stop_gradient=True)
    _startup_init(name, shape, dtype, _init.Constant(float(value)))
    return var


def samples() -> dict[str, list[Any]]:
    """Samples of ``static::initialize`` for :func:`fastop.testing.opcheck` (served by
    the built-in plugin's ``fastop_op_samples`` hook): an Initializer drawing from its
    seed, and a plain ``f(shape, dtype)``."""
    from fastop.ops.checking import Sample
    return {"static::initialize": [
        Sample(initializer=_init.Normal(0.0, 2.0), shape=[2, 3],
               dtype=as_dtype("float64"), seed=7),
        Sample(initializer=_init.Constant(0.5), shape=[4], dtype=as_dtype("float32"),
               seed=0),
    ]}
