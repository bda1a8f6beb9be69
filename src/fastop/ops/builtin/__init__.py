"""fastop's built-in op definitions, one module per kernel family.

Each module has ``register(registry)`` defining its ops, with their gradient rules as
named functions beside them; the built-in plugin (``fastop.plugins.builtin``) calls
:func:`register_all` through the ``fastop_register_ops`` hook, which then binds the ops
into :data:`fastop.ops.builtin._table.B` for the rules to call.
"""
from importlib import import_module

from fastop.ops.builtin._table import B

# Kernel families, in registration order (later ones may compose earlier ones' ops).
FAMILIES = ("elementwise", "reduce", "linalg", "softmax", "shape", "optimizer",
            "logic", "math", "search", "norm", "random", "activation", "embedding")


def register_all(registry) -> None:
    for family in FAMILIES:
        module = import_module(f"fastop.ops.builtin.{family}")
        module.register(registry)
    B.bind(registry)
