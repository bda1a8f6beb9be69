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

``import fastop`` discovers installed plugins; ``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1`` turns
discovery off. fastop's own ops are registered through the same hook by its built-in
plugins (``fastop.plugins.builtin``, and ``fastop.plugins.distributed`` for
``dist::allreduce_mean``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from fastop.ops import Registry

hookspec = pluggy.HookspecMarker("fastop")
hookimpl = pluggy.HookimplMarker("fastop")

# -------------------------------------------------------------------------
# Ops
# -------------------------------------------------------------------------


@hookspec
def fastop_register_ops(registry: "Registry") -> None:
    """Define this plugin's ops in the registry.

    Called once per plugin when fastop discovers it (at ``import fastop``). Every op
    defined here is attributed to the plugin's distribution and version, which
    ``python -m fastop ops`` shows. Names are namespaced (``"myplugin::op"``); a name
    another distribution already defines is an error naming both.

    :param registry: the op registry (:class:`fastop.ops.Registry`); use
        ``registry.define(...)`` and the returned OpDef's decorators.
    :return: nothing; all calls of this hook run.
    """
