"""fastop's built-in ops by short name — ``B.multiply``, ``B.expand_as`` — bound once,
when the built-in plugin has registered them. Gradient rules and library code call ops
through it instead of looking names up per call; a rule reads like the math it states
(``B.multiply(dy, B.sign(x))``)."""
from __future__ import annotations

from typing import Any

__all__ = ["B"]


class BuiltinOps:
    """Attribute access to the ``fastop::`` ops of the registry they were bound from."""

    def bind(self, registry: Any) -> None:
        for op in registry.ops("fastop"):
            setattr(self, op.short_name, op)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"no built-in op 'fastop::{name}' is bound (the built-in "
                             f"plugin binds them when it registers fastop's ops)")


B = BuiltinOps()
