"""Type stub of fastop.autograd._graph (graph nodes and the backward walk)."""
from typing import Any, Callable, Sequence

__all__ = ["backward", "grad", "Node", "push_saved_hooks", "pop_saved_hooks"]

backward_end_hooks: dict[int, Any]   # key -> fn() run after each outermost backward

class Node: ...

def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool = False) -> None: ...
def grad(outputs: Any, inputs: Any, grad_outputs: Any = None,
         retain_graph: bool | None = None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused: bool = False,
         no_grad_vars: Any = None) -> list[Any]: ...
def push_saved_hooks(pack_hook: Callable[[Any], Any],
                     unpack_hook: Callable[[Any], Any]) -> None: ...
def pop_saved_hooks() -> None: ...
