"""fastop's built-in plugin: registers fastop's own ops through the same hook as any
third-party plugin (``fastop_register_ops``)."""
from fastop.hookspecs import hookimpl


@hookimpl
def fastop_register_ops(registry):
    # (not `from fastop.ops import builtin`: that first asks fastop.ops for an op
    # namespace named "builtin", whose miss computes a did-you-mean hint)
    from fastop.ops.builtin import register_all
    register_all(registry)
