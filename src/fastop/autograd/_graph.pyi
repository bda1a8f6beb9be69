"""Type stub of fastop.autograd._graph (registry ops' nodes and saved-tensor hooks)."""
from typing import Any, Callable

from fastop.autograd._node import Node

__all__ = ["OpNode", "push_saved_hooks", "pop_saved_hooks"]

class OpNode(Node): ...

def push_saved_hooks(pack_hook: Callable[[Any], Any],
                     unpack_hook: Callable[[Any], Any]) -> None: ...
def pop_saved_hooks() -> None: ...
