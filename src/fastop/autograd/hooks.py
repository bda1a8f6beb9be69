"""Hooks on the eager autograd engine: callbacks run at the end of every backward pass.

A backward-end hook is a function of no arguments that the engine calls when a backward
pass started by :meth:`Tensor.backward` or :func:`fastop.autograd.backward` has finished
accumulating the leaves' ``.grad`` — on the thread that ran it, in registration order.
It is where work that needs *all* of a pass's gradients belongs: averaging them across
processes (:class:`fastop.DataParallel` does), clipping, logging their norms.

Not called: after :func:`fastop.grad` (it returns gradients instead of storing them),
after a backward pass that raised, or after a backward pass run *inside* another one
(from a PyLayer's ``backward``, as gradient checkpointing does) — only when the outermost
pass ends, so a hook sees each pass's gradients once, complete. An exception raised by a
hook propagates to the caller of ``backward`` (the gradients are already stored).

>>> import fastop
>>> seen = []
>>> handle = fastop.autograd.register_backward_end_hook(lambda: seen.append("done"))
>>> x = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
>>> (x * x).sum().backward()
>>> seen
['done']
>>> handle.remove()
>>> (x * x).sum().backward()
>>> seen
['done']
"""
from __future__ import annotations

import itertools
from typing import Callable

from fastop.autograd._backward import backward_end_hooks as _hooks

__all__ = ["register_backward_end_hook", "HookRemoveHelper"]

_keys = itertools.count(1)


class HookRemoveHelper:
    """What a ``register_*_hook`` call returns: :meth:`remove` unregisters the hook
    (PaddlePaddle's name for it)."""

    __slots__ = ("_hooks", "_key")

    def __init__(self, hooks: dict, key: int) -> None:
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        """Unregister the hook; removing it again does nothing."""
        self._hooks.pop(self._key, None)


def register_backward_end_hook(hook: Callable[[], object]) -> HookRemoveHelper:
    """Call ``hook()`` at the end of every outermost eager backward pass (see the module
    docstring for exactly when); returns a handle whose ``remove()`` unregisters it."""
    if not callable(hook):
        raise TypeError(f"register_backward_end_hook: hook must be callable (a function "
                        f"of no arguments), got {type(hook).__name__}")
    key = next(_keys)
    _hooks[key] = hook
    return HookRemoveHelper(_hooks, key)
