"""Plugins: the pluggy manager, entry-point discovery, op modules loaded from a
directory, and the built-in plugin that registers fastop's own ops.

``import fastop`` registers the built-ins, then records every installed distribution
with a ``fastop`` entry point without importing it: an entry point's name declares the
op namespace it provides, and its module is imported when that namespace is first used
(see :mod:`fastop.plugins._manager`, also for the switches
``FASTOP_DISABLE_PLUGIN_AUTOLOAD``, ``FASTOP_PLUGINS`` and ``FASTOP_STRICT_PLUGINS``).
The plugin author's guide is ``docs/plugins.md``.
"""
from __future__ import annotations

import os

from fastop._version import __version__
from fastop.plugins._manager import (ENTRY_POINT_GROUP, EntryPoint, PluginError, PluginInfo,
                                     PluginLoadWarning, PluginManager, PluginOnDemandWarning,
                                     UntrustedOpModuleError, entry_points, manager)
from fastop.ops._sources import set_directory_loader

__all__ = ["PluginLoadWarning", "PluginOnDemandWarning", "PluginError", "UntrustedOpModuleError", "PluginInfo", "PluginManager", "EntryPoint",
           "ENTRY_POINT_GROUP", "entry_points", "manager", "load_plugins",
           "load_builtin_plugin", "load_directory", "list", "loaded_plugins", "op_samples"]


set_directory_loader(manager)   # saved Programs load their directory ops through it


def load_builtin_plugin() -> None:
    """Register fastop's own ops (``import fastop`` does, before anything else)."""
    manager.load_builtin(__version__)


def load_plugins() -> None:
    """Record the installed plugins the switches allow, to import each when its
    namespace is first used (``import fastop`` does; ``FASTOP_PLUGINS`` ones are
    imported now)."""
    manager.load_entry_points()


def load_directory(path: str | os.PathLike[str]) -> list[PluginInfo]:
    """Load the op modules of a directory that is not an installed package (the role of
    OneFlow's ``custom_op_module``); returns the plugins loaded.

    Every ``*.py`` file of the directory that implements ``fastop_register_ops`` is
    imported under a private name, ``fastop_directory_ops.d<hash>.<module>`` (never a
    name another module owns; the directory is appended to ``sys.path`` for the modules
    to import their helpers) and registered like an installed plugin: its ops are
    attributed to the directory (its real path) and the module's ``__version__`` (empty
    when it has none), and a module that fails is skipped with one
    :class:`PluginLoadWarning` (an error with ``FASTOP_STRICT_PLUGINS=1``), leaving
    nothing of it registered (a Ctrl-C while it loads also leaves nothing of it, and
    propagates). An op name that another plugin already defines is such a failure,
    naming both. Loading a directory again is a no-op (a module that failed is tried
    again). A static Program saved with one of these ops records the directory and
    module; loading the Program imports the module again only when the caller allows it
    (``static.load_program``'s ``allowed_modules=[module]`` or ``trust_code=True``), or
    finds the op already registered by a load_directory call.

    An entry that is not a regular file (a subdirectory ``x.py``, a dangling symlink, a
    FIFO) is skipped with a PluginLoadWarning naming it. Raises NotADirectoryError, or
    PluginError when no module there implements the hook.
    """
    return manager.load_directory(path)


def loaded_plugins() -> list[PluginInfo]:
    """Every plugin, one entry per distribution — its ``name``, ``version``, ``module``,
    ``entry_point``, all its ``ops`` (and ``directory`` for an op module from
    load_directory) — in load order, fastop's own ops first, as the one ``fastop``
    entry. The installed plugins not imported yet are imported first; one that failed
    to load is listed without ops, with its ``error``."""
    return manager.list()


list = loaded_plugins   # noqa: A001  (``fastop.plugins.list()``, SPEC §1)


def op_samples() -> dict[str, list]:
    """Sample inputs the plugins declare for their ops (the ``fastop_op_samples`` hook;
    every installed plugin is imported first), by op name: what
    :func:`fastop.testing.opcheck` runs."""
    return manager.op_samples()
