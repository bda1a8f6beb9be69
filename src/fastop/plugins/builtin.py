"""fastop's built-in plugin: registers fastop's own ops through the same hook as any
third-party plugin (``fastop_register_ops``)."""
from fastop.hookspecs import hookimpl


@hookimpl
def fastop_register_ops(registry):
    from fastop.ops import builtin
    builtin.register_all(registry)
