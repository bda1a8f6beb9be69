"""Hooks on the eager autograd engine: callbacks run at the end of every backward pass,
and per-leaf hooks (a gradient buffer, a "gradient ready" callback).

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

A leaf grad hook (:func:`register_leaf_grad_hook`) is per leaf tensor: its gradient is
written into a fixed buffer, and a callback runs as soon as that gradient is final in
the pass, while the rest of backward still runs — :class:`fastop.DataParallel` starts
averaging a bucket of gradients there.
"""
from __future__ import annotations

import itertools
from typing import Callable

from fastop._tensor import Tensor
from fastop.autograd._backward import LeafGradHook
from fastop.autograd._backward import backward_end_hooks as _hooks
from fastop.autograd._backward import leaf_grad_hooks as _leaf_hooks

__all__ = ["register_backward_end_hook", "register_leaf_grad_hook", "HookRemoveHelper",
           "LeafGradHookHandle"]

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


class LeafGradHookHandle:
    """What :func:`register_leaf_grad_hook` returns: :meth:`remove` unregisters the hook
    (if a later registration for the same leaf has not replaced it)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: LeafGradHook) -> None:
        self._entry = entry

    def remove(self) -> None:
        """Unregister the hook; removing it again does nothing."""
        key = id(self._entry.leaf)
        if _leaf_hooks.get(key) is self._entry:
            del _leaf_hooks[key]


def register_leaf_grad_hook(leaf: Tensor, ready: Callable[[Tensor], object] | None = None,
                            *, buffer: Tensor | None = None) -> LeafGradHookHandle:
    """Hook a leaf tensor (one that needs a gradient, such as a parameter) into backward.

    ``buffer`` (a tensor of the leaf's shape and dtype that owns contiguous memory): each
    backward pass writes the leaf's gradient there instead of into a new tensor —
    adding in place when ``leaf.grad`` is the buffer, else storing ``.grad`` (zeros
    after ``clear_grad()``, nothing after ``clear_grad(set_to_zero=False)``) plus the
    new gradient — and ``leaf.grad`` becomes the buffer. (Not with ``create_graph``:
    then ``.grad`` is a new tensor with its graph.)

    ``ready(leaf)`` is called in each outermost backward pass whose nodes feed the leaf,
    once the last of them has run, so its gradient of the pass is final; it runs on the
    backward thread, while the rest of the pass is still to run (not in ``fastop.grad``
    nor in a pass run inside another one).

    One hook per leaf: registering another for the same leaf replaces it. Returns a
    handle whose ``remove()`` unregisters it.

    >>> import fastop
    >>> w = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
    >>> buf = fastop.zeros([2])
    >>> handle = register_leaf_grad_hook(w, lambda t: print("ready", t.grad.numpy()),
    ...                                  buffer=buf)
    >>> (w * w).sum().backward()
    ready [2. 4.]
    >>> w.grad is buf
    True
    >>> handle.remove()
    """
    if not isinstance(leaf, Tensor) or not leaf.is_leaf:
        raise TypeError(f"register_leaf_grad_hook: 'leaf' must be a leaf Tensor (made by "
                        f"the user, not by an op), got "
                        f"{type(leaf).__name__ if not isinstance(leaf, Tensor) else 'a non-leaf Tensor'}")
    if ready is not None and not callable(ready):
        raise TypeError(f"register_leaf_grad_hook: 'ready' must be callable (a function of "
                        f"the leaf) or None, got {type(ready).__name__}")
    if buffer is not None:
        if not isinstance(buffer, Tensor):
            raise TypeError(f"register_leaf_grad_hook: 'buffer' must be a Tensor or None, "
                            f"got {type(buffer).__name__}")
        if buffer.shape != leaf.shape or buffer.dtype != leaf.dtype \
                or not buffer.is_contiguous() or buffer.readonly:
            raise ValueError(f"register_leaf_grad_hook: 'buffer' must be a writable "
                             f"contiguous tensor of the leaf's shape {leaf.shape} and dtype "
                             f"{leaf.dtype.name}, got {buffer.dtype.name}{buffer.shape}"
                             f"{'' if buffer.is_contiguous() else ', not contiguous'}"
                             f"{', read-only' if buffer.readonly else ''}")
    entry = LeafGradHook(leaf, buffer, ready)
    _leaf_hooks[id(leaf)] = entry
    return LeafGradHookHandle(entry)
