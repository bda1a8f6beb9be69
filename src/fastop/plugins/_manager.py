"""Discover and load fastop plugins through pluggy and ``importlib.metadata`` entry points.

Each plugin's ``fastop_register_ops`` runs on its own, inside a transaction: if it fails
(import error, exception, a bad or duplicate definition) its ops are removed again and
one :class:`PluginLoadWarning` names the distribution, its version and the error. With
``FASTOP_STRICT_PLUGINS=1`` that warning is raised as :class:`PluginError` instead.
``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1`` skips entry-point discovery (built-ins still load).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from fastop import hookspecs
from fastop.ops import Registry, registry as default_registry

__all__ = ["PluginLoadWarning", "PluginError", "PluginInfo", "load_plugins", "load_builtin_plugin",
           "plugin_manager", "loaded_plugins"]

ENTRY_POINT_GROUP = "fastop"


class PluginLoadWarning(UserWarning):
    """A plugin could not be loaded and was skipped."""


class PluginError(RuntimeError):
    """A plugin could not be loaded (strict mode)."""


@dataclass(frozen=True)
class PluginInfo:
    name: str          # distribution name ("fastop" for the built-in plugin)
    version: str
    module: str
    ops: tuple[str, ...]


plugin_manager = pluggy.PluginManager("fastop")
plugin_manager.add_hookspecs(hookspecs)
_loaded: list[PluginInfo] = []


def loaded_plugins() -> list[PluginInfo]:
    """Plugins whose ops are registered, built-in first."""
    return list(_loaded)


def _strict() -> bool:
    return os.environ.get("FASTOP_STRICT_PLUGINS", "") not in ("", "0")


def _fail(dist: str, version: str, exc: BaseException) -> None:
    message = (f"fastop plugin {dist} {version} was not loaded: "
               f"{type(exc).__name__}: {exc}")
    if _strict():
        raise PluginError(message) from exc
    warnings.warn(message, PluginLoadWarning, stacklevel=3)


def register_plugin(module: ModuleType | Any, dist: str, version: str,
                    registry: Registry = default_registry) -> bool:
    """Register one plugin object and run its ``fastop_register_ops`` transactionally."""
    before = {op.name for op in registry}
    try:
        plugin_manager.register(module, name=f"{dist}:{getattr(module, '__name__', id(module))}")
    except Exception as exc:  # pluggy validation: unknown hook, bad signature
        _fail(dist, version, exc)
        return False
    impls = [impl for impl in plugin_manager.hook.fastop_register_ops.get_hookimpls()
             if impl.plugin is module]
    try:
        with registry.providing(dist, version):
            for impl in impls:
                impl.function(registry=registry)
    except Exception as exc:
        for name in {op.name for op in registry} - before:
            registry.remove(name)
        plugin_manager.unregister(module)
        _fail(dist, version, exc)
        return False
    _loaded.append(PluginInfo(dist, version, getattr(module, "__name__", repr(module)),
                              tuple(sorted({op.name for op in registry} - before))))
    return True


def load_builtin_plugin(registry: Registry = default_registry) -> None:
    """Register fastop's own ops, through the same hook as any plugin."""
    from fastop import __version__
    from fastop.plugins import builtin
    if not register_plugin(builtin, "fastop", __version__, registry):
        raise PluginError("fastop's built-in ops failed to register")  # pragma: no cover


def load_plugins(registry: Registry = default_registry) -> None:
    """Register every installed plugin's ops (unless FASTOP_DISABLE_PLUGIN_AUTOLOAD)."""
    if os.environ.get("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
        return
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else ep.value
        version = ep.dist.version if ep.dist is not None else ""
        try:
            module = ep.load()
        except Exception as exc:
            _fail(dist, version, exc)
            continue
        register_plugin(module, dist, version, registry)
