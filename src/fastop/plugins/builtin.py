"""fastop's built-in plugin: registers fastop's own ops through the same hook as any
third-party plugin (``fastop_register_ops``)."""
from fastop.hookspecs import hookimpl


@hookimpl
def fastop_register_ops(registry):
    # imported by its full name: fastop.ops.<name> means the op namespace <name>
    from fastop.ops.builtin import register_all
    register_all(registry)
