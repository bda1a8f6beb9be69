"""Type stub of fastop.autograd._backward (the backward walk: backward and grad)."""
from typing import Any

__all__ = ["backward", "grad"]

backward_end_hooks: dict[int, Any]   # key -> fn() run after each outermost backward
leaf_grad_hooks: dict[int, "LeafGradHook"]   # id(leaf) -> its hook

class LeafGradHook:
    """A leaf's gradient buffer and ready callback (register_leaf_grad_hook)."""
    leaf: Any
    buffer: Any
    ready: Any
    def __init__(self, leaf: Any, buffer: Any, ready: Any) -> None: ...

def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool = False) -> None: ...
def grad(outputs: Any, inputs: Any, grad_outputs: Any = None,
         retain_graph: bool | None = None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused: bool = False,
         no_grad_vars: Any = None) -> list[Any]: ...
