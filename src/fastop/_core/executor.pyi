"""Type stub of fastop._core.executor (the static executor's compiled plan and loop)."""
from typing import Any, Callable

from fastop._core.kernel import CKernel
from fastop._core.storage import DenseTensor

SLOT_KINDS: dict[str, int]

class Plan:
    n_slots: int
    n_ops: int
    traced: bool
    stale: bool
    arena_bytes: int
    min_live_bytes: int
    current_op: int
    def __init__(self, names: list[str], kinds: list[int]) -> None: ...
    def add_ckernel(self, kernel: CKernel, dtype: int, ins: list[int], outs: list[int],
                    attrs: dict[str, Any], op: Any = None) -> None: ...
    def add_python(self, fn: Callable[..., tuple], ins: list[int], outs: list[int],
                   op: Any = None) -> None: ...
    def python_calls(self) -> list[Any]: ...
    def set_const(self, slot: int, value: DenseTensor) -> None: ...
    def set_io(self, feeds: list[tuple[str, int, Any]],
               persists: list[tuple[str, int, str | None]], fetches: list[int]) -> None: ...
    def run(self, feeds: dict[str, Any], scope: dict[str, DenseTensor]) -> list[DenseTensor]: ...
    def try_run(self, feeds: dict[str, Any],
                scope: dict[str, DenseTensor]) -> list[DenseTensor] | None: ...
