"""``saved_tensors_hooks``: choose how autograd keeps the tensors backward will need
(PaddlePaddle's ``paddle.autograd.saved_tensors_hooks``).

Inside the block, every tensor an op or a PyLayer saves for backward is handed to
``pack_hook`` and only its result is kept; backward calls ``unpack_hook`` on that
result to get a Tensor back. Use it to keep activations elsewhere (host memory, disk,
compressed) between the forward and the backward pass:

    >>> import fastop
    >>> x = fastop.ones([2, 2]); x.stop_gradient = False
    >>> with fastop.autograd.saved_tensors_hooks(lambda t: t.numpy().copy(),
    ...                                          fastop.to_tensor):
    ...     y = fastop.multiply(x, x)      # saves x as a numpy copy
    >>> y.sum().backward()
    >>> x.grad.numpy().tolist()
    [[2.0, 2.0], [2.0, 2.0]]

The hooks apply to the thread that entered the block (as grad mode does) and run
without recording. Values saved under hooks are not checked for in-place changes:
what ``pack_hook`` keeps is the hook's responsibility.
"""
from __future__ import annotations

from typing import Any, Callable

from fastop.autograd._graph import pop_saved_hooks, push_saved_hooks

__all__ = ["saved_tensors_hooks"]


class saved_tensors_hooks:
    """Context manager: saved tensors are packed by ``pack_hook(tensor) -> object``
    when recorded and unpacked by ``unpack_hook(object) -> Tensor`` in backward.
    Blocks nest; the innermost one's hooks apply."""

    def __init__(self, pack_hook: Callable[[Any], Any],
                 unpack_hook: Callable[[Any], Any]) -> None:
        for name, hook in (("pack_hook", pack_hook), ("unpack_hook", unpack_hook)):
            if not callable(hook):
                raise TypeError(f"saved_tensors_hooks: {name} must be callable, got "
                                f"{type(hook).__name__}")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> saved_tensors_hooks:
        push_saved_hooks(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        pop_saved_hooks()
        return False
