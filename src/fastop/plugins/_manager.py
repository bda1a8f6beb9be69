"""Discover and load fastop plugins: pluggy hooks, found through entry points.

Each plugin's ``fastop_register_ops`` runs on its own, inside a transaction: if it fails
(import error, exception, a bad or duplicate definition) its ops are removed again and
one :class:`PluginLoadWarning` names the distribution, its version and the error. With
``FASTOP_STRICT_PLUGINS=1`` that warning is raised as :class:`PluginError` instead.
``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1`` skips entry-point discovery (built-ins still load).

Entry points are read straight from the installed distributions' ``entry_points.txt``
(:func:`entry_points`) instead of through ``importlib.metadata``, whose import alone
(email, zipfile, csv, pathlib) costs ~40 ms of every ``import fastop``.
"""
from __future__ import annotations

import os
import re
import sys
import warnings
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any, Iterator, NamedTuple

import pluggy

from fastop import hookspecs
from fastop.ops import Registry, registry as default_registry

__all__ = ["PluginLoadWarning", "PluginError", "PluginInfo", "EntryPoint", "entry_points",
           "load_plugins", "load_builtin_plugin", "plugin_manager", "loaded_plugins"]

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
    """Register fastop's own ops, through the same hook as any plugin: its kernel
    families (``fastop.plugins.builtin``) and data-parallel ops
    (``fastop.plugins.distributed``)."""
    from fastop import __version__
    from fastop.plugins import builtin, distributed
    for module in (builtin, distributed):
        if not register_plugin(module, "fastop", __version__, registry):
            raise PluginError(f"fastop's built-in ops ({module.__name__}) failed to "
                              f"register")  # pragma: no cover


class EntryPoint(NamedTuple):
    """One entry point of an installed distribution (``name = module:attr``)."""

    name: str
    value: str
    dist: str       # the distribution's name, as its metadata spells it
    version: str

    def load(self) -> Any:
        """Import the module and follow the attribute path, like importlib.metadata."""
        module, _, attrs = self.value.partition("[")[0].strip().partition(":")
        obj = import_module(module.strip())
        for attr in filter(None, attrs.strip().split(".")):
            obj = getattr(obj, attr)
        return obj


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _read_section(path: str, section: str) -> list[tuple[str, str]]:
    """``name = value`` pairs of one ``[section]`` of an entry_points.txt file."""
    pairs, current = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1].strip()
            elif current == section and "=" in line and not line.startswith(("#", ";")):
                name, _, value = line.partition("=")
                pairs.append((name.strip(), value.strip()))
    return pairs


def _name_and_version(meta_dir: str, fallback: str) -> tuple[str, str]:
    """``Name`` and ``Version`` from a distribution's METADATA (or PKG-INFO) headers."""
    headers: dict[str, str] = {}
    for filename in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(meta_dir, filename), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break
                    key, _, value = line.partition(":")
                    headers.setdefault(key.strip().lower(), value.strip())
            break
        except OSError:
            continue
    return headers.get("name", fallback), headers.get("version", "")


def entry_points(group: str = ENTRY_POINT_GROUP,
                 path: list[str] | None = None) -> Iterator[EntryPoint]:
    """Entry points of ``group`` declared by the distributions installed on ``path``.

    Follows importlib.metadata's rules: ``*.dist-info`` and ``*.egg-info`` directories
    on each ``sys.path`` entry, in path order; a distribution found twice counts once
    (the first). Zipped eggs are not searched.
    """
    seen: set[str] = set()
    for entry in sys.path if path is None else path:
        try:
            with os.scandir(entry or ".") as it:
                found = sorted(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:  # missing directory, zip file, ...
            continue
        for dirname in found:
            stem = dirname.rsplit(".", 1)[0].split("-")[0]
            key = _normalize(stem)
            if key in seen:
                continue
            seen.add(key)
            meta_dir = os.path.join(entry or ".", dirname)
            try:
                pairs = _read_section(os.path.join(meta_dir, "entry_points.txt"), group)
            except OSError:
                continue
            if pairs:
                dist, version = _name_and_version(meta_dir, stem)
                for name, value in pairs:
                    yield EntryPoint(name, value, dist, version)


def load_plugins(registry: Registry = default_registry) -> None:
    """Register every installed plugin's ops (unless FASTOP_DISABLE_PLUGIN_AUTOLOAD)."""
    if os.environ.get("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
        return
    for ep in entry_points(ENTRY_POINT_GROUP):
        try:
            module = ep.load()
        except Exception as exc:
            _fail(ep.dist, ep.version, exc)
            continue
        register_plugin(module, ep.dist, ep.version, registry)
