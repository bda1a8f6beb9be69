"""Static mode (being built): Program, Executor, py_func, append_backward."""
from fastop.ops._dispatch import current_mode, set_mode

__all__ = ["CPUPlace", "enable_static", "disable_static", "in_dynamic_mode"]


class CPUPlace:
    """The CPU device (the only one fastop runs on)."""

    def __repr__(self) -> str:
        return "Place(cpu)"


def enable_static() -> None:
    set_mode("static")


def disable_static() -> None:
    set_mode("eager")


def in_dynamic_mode() -> bool:
    return current_mode() == "eager"
