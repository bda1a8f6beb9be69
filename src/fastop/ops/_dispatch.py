"""Mode dispatch: an OpDef call computes (eager) or appends an operator (static).

The eager and static layers sit above the registry, so they plug their dispatcher in
here (``set_dispatcher``) instead of the registry importing them. Until the eager layer
installs its own, eager calls run the kernel on DenseTensors (:func:`invoke_dense`).
"""
from __future__ import annotations

from typing import Any, Callable

from fastop._core.storage import DenseTensor, as_dtype, from_numpy

import numpy as np

__all__ = ["dispatch", "set_dispatcher", "current_mode", "set_mode", "invoke_dense"]

Dispatcher = Callable[[Any, tuple, dict], Any]
_dispatchers: dict[str, Dispatcher] = {}
_mode = "eager"


def current_mode() -> str:
    """'eager' (the default) or 'static'."""
    return _mode


def set_mode(mode: str) -> None:
    global _mode
    if mode not in ("eager", "static"):
        raise ValueError(f"mode must be 'eager' or 'static', got {mode!r}")
    _mode = mode


def set_dispatcher(mode: str, fn: Dispatcher) -> None:
    """Install the function that runs an op call in `mode`."""
    _dispatchers[mode] = fn


def dispatch(op: Any, args: tuple, kwargs: dict) -> Any:
    fn = _dispatchers.get(_mode)
    if fn is None:
        if _mode == "static":
            raise RuntimeError(f"{op.name}: static mode is not available")
        return invoke_dense(op, args, kwargs)
    return fn(op, args, kwargs)


def _to_dense(op: Any, name: str, value: Any, dtype: Any) -> Any:
    if value is None or isinstance(value, DenseTensor):
        return value
    if isinstance(value, (list, tuple)):
        return [_to_dense(op, name, v, dtype) for v in value]
    if isinstance(value, (bool, int, float)):
        return from_numpy(np.asarray(value, dtype=as_dtype(dtype).numpy_dtype))
    try:
        return from_numpy(np.ascontiguousarray(value))
    except TypeError as exc:
        raise TypeError(f"{op.name}: input '{name}' must be a tensor or array, got "
                        f"{type(value).__name__}") from exc


def invoke_dense(op: Any, args: tuple, kwargs: dict) -> Any:
    """Bind a call, run the op's kernel on DenseTensors, return one or several outputs."""
    inputs, attrs = op.bind(args, kwargs)
    ref = next((x for x in inputs if isinstance(x, DenseTensor)), None)
    dtype = ref.dtype if ref is not None else "float32"
    dense = [_to_dense(op, spec.name, x, dtype) for spec, x in zip(op.inputs, inputs)]
    outs = op.invoke(dense, attrs)
    return outs[0] if len(outs) == 1 else outs
