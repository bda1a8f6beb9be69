"""The profiler's recorder: the flag the hooks check and the C buffer of one session's
events (read them with :mod:`fastop.profiler`)."""
from typing import Any

EVENT_KINDS: dict[str, int]

class Trace:
    """The events of one profiling session (from :func:`start` to :func:`stop`)."""
    @property
    def threads(self) -> list[tuple[int, int, str]]:
        """Per thread index: (ident, native id, name)."""
    @property
    def session(self) -> int: ...
    @property
    def started(self) -> int: ...
    @property
    def stopped(self) -> int: ...
    @property
    def record_shapes(self) -> bool: ...
    def __len__(self) -> int: ...
    def events(self, since: int = 0, until: int = ...
               ) -> list[tuple[int, Any, int, int, int, tuple | None]]:
        """``(kind, what, start_ns, end_ns, thread_index, inputs)`` per event that began
        at or after `since` and ended by `until`."""

def start(record_shapes: bool = True) -> Trace:
    """Record into a new :class:`Trace`, or join the session recording (they nest)."""
def stop() -> None:
    """The end of one start's recording; the last one ends the session."""
def is_active() -> bool: ...
def now() -> int:
    """The recorder's clock in nanoseconds (CLOCK_MONOTONIC)."""
def record_range(what: Any, kind: int, start: int) -> None:
    """Record an event of `kind` from `start` to now on the calling thread."""
