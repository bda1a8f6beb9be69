"""Type stub of fastop.autograd._eager (eager dispatch)."""
from typing import Any

__all__ = ["eager_call"]

def eager_call(op: Any, *args: Any, **kwargs: Any) -> Any: ...
