"""The hook specifications of fastop's plugin system — all of them, in one module.

A plugin package declares an entry point in the group ``fastop`` that points at a module
of hook implementations marked with :data:`fastop.hookimpl`::

    # pyproject.toml of the plugin
    [project.entry-points.fastop]
    activations = "fastop_activations.plugin"

    # fastop_activations/plugin.py
    import fastop

    @fastop.hookimpl
    def fastop_register_ops(registry):
        op = registry.define("activations::swish", inputs=["x"], outputs=["y"])
        ...

The entry point's name (``activations``) declares the op namespace the module provides
(``activations::*``): ``import fastop`` records installed plugins without importing them,
and imports one when its namespace is first used (``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1``:
only when a lookup needs it, saying so). fastop's own ops are registered through the same hook by its built-in
plugins (``fastop.plugins.builtin``, and ``fastop.plugins.distributed`` for
``dist::allreduce_mean``). A hook implementation whose name is not one of these
hooks (``fastop_register_opz``), or that takes an argument its hook does not have, makes
the plugin fail to load. The plugin author's guide is ``docs/plugins.md``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from typing import Any

    from fastop.ops import Registry

hookspec = pluggy.HookspecMarker("fastop")
hookimpl = pluggy.HookimplMarker("fastop")

# -------------------------------------------------------------------------
# Ops
# -------------------------------------------------------------------------


@hookspec(historic=True)
def fastop_register_ops(registry: "Registry") -> None:
    """Define this plugin's ops in the registry.

    Called once per plugin, as it is registered (for an installed plugin, when its
    namespace is first used; by :func:`fastop.plugins.load_directory` for a directory). Every op defined
    here is attributed to the plugin's distribution and version, which
    ``python -m fastop ops`` and :func:`fastop.plugins.list` show. Names are namespaced
    (``"myplugin::op"``); a name another distribution already defines is an error naming
    both. If the hook raises, every op it defined is removed again and the plugin is
    skipped with a warning.

    :param registry: the op registry (:class:`fastop.ops.Registry`); use
        ``registry.define(...)`` and the returned OpDef's decorators.
    :return: nothing; all calls of this hook run.
    """


# -------------------------------------------------------------------------
# Testing
# -------------------------------------------------------------------------


@hookspec
def fastop_op_samples() -> "dict[str, list[Any]]":
    """Sample inputs for checking this plugin's ops with :func:`fastop.testing.opcheck`.

    fastop's test suite runs ``opcheck`` on every op of every installed plugin with the
    samples declared here, and fails for an op that has none (a backward kernel made by
    ``@op.grad_kernel`` is checked through its forward op). Called only by tests and
    tools, never at ``import fastop``: import what you need inside the function.

    :return: ``{op_name: [sample, ...]}``; a sample is a list of numpy arrays, one per
        input of the op (a list of arrays for a variadic input, None for an absent
        optional one), or a :class:`fastop.testing.Sample` that also carries
        attributes: ``Sample(x, w, stride=2)``. Use values away from points where the
        op is not differentiable (finite differences step 1e-6 around each element).
    """
