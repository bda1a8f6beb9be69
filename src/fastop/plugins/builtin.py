"""fastop's built-in plugin: registers fastop's own ops, and their samples for
:func:`fastop.testing.opcheck`, through the same hooks as any third-party plugin
(``fastop_register_ops``, ``fastop_op_samples``)."""
from fastop.hookspecs import hookimpl


@hookimpl
def fastop_register_ops(registry):
    # imported by its full name: fastop.ops.<name> means the op namespace <name>
    from fastop.ops.builtin import register_all
    register_all(registry)


@hookimpl
def fastop_op_samples():
    from fastop.ops.builtin import samples
    from fastop.static.parameters import samples as parameter_samples
    return {**samples(), **parameter_samples()}
