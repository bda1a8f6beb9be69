"""Mode dispatch: an OpDef call computes (eager) or appends an operator (static).

The eager and static layers sit above the registry, so they plug their dispatcher in
here (``set_dispatcher``) instead of the registry importing them.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["dispatch", "set_dispatcher", "current_mode", "set_mode"]

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
    """Run an op call in the current mode, through the dispatcher that mode installed."""
    fn = _dispatchers.get(_mode)
    if fn is None:
        raise RuntimeError(f"{op.name}: no dispatcher for {_mode} mode (import fastop "
                           f"installs both)")
    return fn(op, args, kwargs)
