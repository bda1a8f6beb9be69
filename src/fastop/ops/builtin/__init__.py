"""fastop's built-in op definitions, one module per kernel family.

Each module has ``register(registry)`` defining its ops — each one explicit definition
with its literal name, its kernel, its named gradient rule — and ``samples()``, the
sample inputs :func:`fastop.testing.opcheck` checks them with. The built-in plugin
(``fastop.plugins.builtin``) calls :func:`register_all` through the
``fastop_register_ops`` hook, which then binds the ops into
:data:`fastop.ops.builtin._table.B` for the rules to call, and serves :func:`samples`
through the ``fastop_op_samples`` hook, exactly as a plugin package does.
"""
from importlib import import_module
from typing import Any

from fastop.ops.builtin._table import B

# Kernel families, in registration order (later ones may compose earlier ones' ops).
FAMILIES = ("elementwise", "reduce", "linalg", "softmax", "shape", "optimizer",
            "logic", "math", "search", "norm", "random", "activation", "embedding",
            "pointwise", "scatter")


def register_all(registry) -> None:
    for family in FAMILIES:
        module = import_module(f"fastop.ops.builtin.{family}")
        module.register(registry)
    B.bind(registry)


def samples() -> dict[str, list[Any]]:
    """Every family's ``samples()``, merged: ``{op_name: [sample, ...]}`` (tests and
    tools only; the arrays are made on each call)."""
    merged: dict[str, list[Any]] = {}
    for family in FAMILIES:
        module = import_module(f"fastop.ops.builtin.{family}")
        family_samples = getattr(module, "samples", None)
        if family_samples is not None:
            merged.update(family_samples())
    return merged
