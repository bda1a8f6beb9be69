"""Type stub of fastop._core.executor (the static executor's compiled plan and loop)."""
from typing import Any, Callable

from fastop._core.kernel import CKernel
from fastop._core.storage import DenseTensor

SLOT_KINDS: dict[str, int]

def _set_cost_rule(min_ns: int, every_op: bool = False) -> tuple[int, bool]: ...

class Schedule:
    n_ops: int
    regions: list[tuple[int, int]]
    heavy_ops: list[int]

class Plan:
    n_slots: int
    n_ops: int
    traced: bool
    stale: bool
    arena_bytes: int
    min_live_bytes: int
    current_op: int
    running: bool
    thread: int
    num_threads: int
    schedule: Schedule | None
    def __init__(self, names: list[str], kinds: list[int]) -> None: ...
    def add_ckernel(self, kernel: CKernel, dtype: int, ins: list[int], outs: list[int],
                    attrs: dict[str, Any], op: Any = None, ordered: bool = False) -> None: ...
    def add_python(self, fn: Callable[..., tuple], ins: list[int], outs: list[int],
                   op: Any = None, ordered: bool = False) -> None: ...
    def python_calls(self) -> list[Any]: ...
    def set_const(self, slot: int, value: DenseTensor) -> None: ...
    def set_io(self, feeds: list[tuple[str, int, Any]],
               persists: list[tuple[str, int, str | None, int, list[int]]], fetches: list[int]) -> None: ...
    def clone(self) -> Plan: ...
    def set_num_threads(self, n: int) -> None: ...
    def run(self, feeds: dict[str, Any], scope: dict[str, DenseTensor]) -> list[DenseTensor]: ...
    def try_run(self, feeds: dict[str, Any],
                scope: dict[str, DenseTensor]) -> list[DenseTensor] | None: ...
    def arena_layout(self) -> list[tuple[str, int, int, int, int]]: ...

class FastPath:
    pool: Any
    def __init__(self, pool: Any, fetch: list[Any] | tuple[Any, ...],
                 watched: tuple[Any, ...], held: tuple[Any, ...]) -> None: ...
    def run(self, fetch: list[Any] | tuple[Any, ...], feeds: dict[str, Any],
            scope: dict[str, DenseTensor]) -> list[DenseTensor] | None: ...
