"""Discover and load fastop plugins: pluggy hooks, found through entry points or in a
directory of op modules.

**Entry-point names declare namespaces.** ``[project.entry-points.fastop] activations =
"fastop_activations.plugin"`` says that the module provides the ops ``activations::*``.
``import fastop`` reads the installed distributions' entry points (no plugin module is
imported) and records them; a plugin's module is imported the first time its namespace
is used: ``fastop.ops.activations``, ``registry.get("activations::swish")`` or ``in``,
an op name in a Program (``load_program``), a definition in the namespace. A listing
(``fastop.plugins.list()``, ``python -m fastop ops``, iterating the registry,
``registry.namespaces()``) imports every plugin recorded. A lookup of a namespace that
no entry point declares (a typo, or a plugin whose ops are outside the namespace its
entry point names) imports every plugin not imported yet, once, before it fails: a
plugin written before namespaces were declared keeps working, with a
``DeprecationWarning`` naming the namespaces it should declare. So ``import fastop``
costs the same with one plugin installed or a hundred.

Each plugin is registered on its own, inside a transaction: pluggy validates its hook
implementations (an unknown hook name such as ``fastop_register_opz`` or an argument the
hook does not have is an error, as pluggy's ``check_pending`` and ``_verify_hook`` make
it), then its ``fastop_register_ops`` runs with the ops it defines attributed to its
distribution and version. If anything fails (import error, exception in the hook, a bad
or duplicate definition) the ops it defined are removed again, it is unregistered, and
one :class:`PluginLoadWarning` names the distribution, its version and the error; with
``FASTOP_STRICT_PLUGINS=1`` that is a :class:`PluginError` instead. An installed plugin
that failed is remembered (not tried again): ``fastop.plugins.list()`` lists it with its
``error``, and looking up its namespace raises an error saying why it failed.

Switches (booleans read by :func:`fastop._env.env_flag`):

* ``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1`` — installed plugins are not recorded at import
  (built-ins are registered); a use of a namespace that is not defined (``get``,
  ``namespace``, ``fastop.ops.<ns>``, ``load_program``) imports the installed
  distribution whose entry point declares it (only that one), with a
  :class:`PluginOnDemandWarning` naming it; ``in`` and listings report what is loaded;
* ``FASTOP_PLUGINS=a,b`` — import these entry points (by entry-point name or
  distribution name) at ``import fastop``, even when autoload is off; a name no
  installed distribution provides is reported like a broken plugin;
* ``FASTOP_STRICT_PLUGINS=1`` — a plugin that cannot be loaded is an error; every
  recorded plugin is imported at ``import fastop``, so that a broken one fails there
  (lazy loading would let one whose namespace a run does not use pass unnoticed).

Only modules named by an installed distribution's entry point of the group ``fastop``
are ever imported this way.

Entry points are found by :func:`entry_points`, which reads the installed distributions'
``entry_points.txt`` files itself instead of asking ``importlib.metadata``. Measured in
fresh processes on the project's venv (CPython 3.11, a loaded 2-core VM, medians of 11-15
interleaved runs, 2026-11-24): importing ``importlib.metadata`` alone (email, zipfile,
csv, pathlib) added 72 ms to a ``numpy + pluggy`` import when ``import numpy`` took
172 ms, and 100 ms when it took 341 ms — 0.3-0.4x numpy's whole import, against a budget
of 0.6x for all of fastop — and, imported, its ``entry_points(group="fastop")`` took
3.9 ms against 2.0 ms for this scan (35 distributions, 21 of them fastop plugins). At
import the scan reads one small file per distribution (``os.read``, 5 us against 15 us
for ``open().read()``); a plugin's METADATA (its display name and version) is read when
it is imported. pluggy's own ``load_setuptools_entrypoints`` uses
``importlib.metadata``, imports every plugin at once and stops at the first that fails
to import, where each must be isolated. So the scan follows ``importlib.metadata``'s
rules for plain directories on ``sys.path`` (which is where pip, editable installs
included, puts ``*.dist-info``), and hands over to ``importlib.metadata`` when something
it cannot read is present: a zip archive or ``.egg`` on the path, or a ``sys.meta_path``
finder with its own ``find_distributions``. A test compares the two.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import import_module
from types import ModuleType
from typing import Any, Callable, Iterator, NamedTuple

import pluggy

from fastop import hookspecs
from fastop._env import env_flag
from fastop._errors import LoadError, UntrustedCodeError, caller_outside_fastop
from fastop.ops import OpDef, Registry, registry as default_registry
from fastop.ops._registry import did_you_mean
from fastop.ops._sources import DirectorySource

__all__ = ["PluginLoadWarning", "PluginOnDemandWarning", "PluginError",
           "UntrustedOpModuleError", "PluginInfo", "EntryPoint", "PluginManager",
           "entry_points", "manager", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "fastop"


class PluginLoadWarning(UserWarning):
    """A plugin could not be loaded and was skipped."""


class PluginOnDemandWarning(UserWarning):
    """With ``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1``, an installed plugin was imported
    because a lookup needed the namespace its entry point declares."""


class PluginError(RuntimeError):
    """A plugin could not be loaded (strict mode), or a plugin request makes no sense."""


class UntrustedOpModuleError(UntrustedCodeError):
    """A saved Program needs an op module from a directory that the caller did not
    allow: importing it would run its code (pass ``allowed_modules=[module]`` or
    ``trust_code=True`` to the loader, or load the directory first)."""


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin distribution (or op module of a directory), as
    :func:`fastop.plugins.list` reports it: a distribution loaded through several
    modules (fastop's own, one per kernel family group) is one entry with all its ops.
    An installed plugin that failed to load is listed too, without ops, with its
    ``error`` (``"ImportError: ..."``)."""

    name: str                 # distribution name; "fastop" for the built-ins; a directory
    version: str
    module: str               # the module holding the hook implementations (the first)
    entry_point: str | None   # its entry point's name (None: built-in or a directory)
    ops: tuple[str, ...]      # the ops it registered, sorted
    directory: str | None = None   # the directory it was loaded from (load_directory)
    error: str | None = None       # why it failed to load; None when it is loaded


# ----------------------------------------------------------------------------- entry points

class EntryPoint(NamedTuple):
    """One entry point of an installed distribution (``name = module:attr``)."""

    name: str
    value: str
    dist: str       # the distribution's name, as its metadata spells it
    version: str

    @property
    def module(self) -> str:
        return self.value.partition("[")[0].partition(":")[0].strip()

    def load(self) -> Any:
        """Import the module and follow the attribute path, like importlib.metadata."""
        obj = import_module(self.module)
        attrs = self.value.partition("[")[0].partition(":")[2]
        for attr in filter(None, attrs.strip().split(".")):
            obj = getattr(obj, attr)
        return obj


_SEPARATORS = re.compile(r"[-_.]+")


def _normalize(name: str) -> str:
    """A distribution name as importlib.metadata compares them (PEP 503, with '_')."""
    return _SEPARATORS.sub("_", name).lower()


# Files are read with os.read: a text-mode open cost twice as much as a binary one here
# (73 against 38 us per small file), and os.read a third of a binary open (5.5 against
# 15 us); the scan reads one entry_points.txt per installed distribution.

def _read_bytes(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 1 << 16)]
        while len(chunks[-1]) == 1 << 16:     # a short read of a file is its end
            chunks.append(os.read(fd, 1 << 16))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _section(data: bytes, section: str) -> list[tuple[str, str]]:
    """``name = value`` pairs of one ``[section]`` of an entry_points.txt file."""
    pairs, current = [], None
    for line in data.decode("utf-8").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line.strip("[]")
        elif current == section and line and not line.startswith("#"):
            name, _, value = line.partition("=")
            pairs.append((name.strip(), value.strip()))
    return pairs


def _name_and_version(meta_dir: str, fallback: str) -> tuple[str, str]:
    """``Name`` and ``Version`` from a distribution's METADATA (or PKG-INFO) headers,
    which the core metadata spec puts first (a description may follow for pages)."""
    headers: dict[str, str] = {}
    for filename in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(meta_dir, filename), "rb") as f:
                head = f.read(8192).decode("utf-8", errors="replace")
        except OSError:
            continue
        for line in head.split("\n\n", 1)[0].splitlines():
            key, _, value = line.partition(":")
            headers.setdefault(key.strip().lower(), value.strip())
        break
    return headers.get("name", fallback), headers.get("version", "")


class _Found(NamedTuple):
    """An entry point the scan found, its distribution's METADATA not read yet: what
    ``import fastop`` records, for :meth:`entry_point` when the plugin is imported."""

    name: str
    value: str
    meta_dir: str
    stem: str           # the .dist-info directory's name up to the version, lower case

    @property
    def key(self) -> str:
        """The distribution's normalized name (as the metadata directory spells it)."""
        return _normalize(self.stem)

    def entry_point(self) -> EntryPoint:
        return EntryPoint(self.name, self.value, *_name_and_version(self.meta_dir, self.stem))


class _NeedsImportlibMetadata(Exception):
    """The scan met a place only importlib.metadata can read (a zip, an egg)."""


def _other_distribution_finders() -> bool:
    """Whether a sys.meta_path finder besides the path finder provides distributions
    (importlib.metadata asks every finder's ``find_distributions``)."""
    from importlib.machinery import PathFinder
    return any(getattr(finder, "find_distributions", None) is not None
               and finder is not PathFinder for finder in sys.meta_path)


def _scan(group: str, paths: list[str]) -> list[_Found]:
    # ``import fastop`` runs this once per installed distribution: paths are joined and
    # names normalized only where needed (os.path.join and the regex were 40 % of it)
    found: list[_Found] = []
    seen: set[str] = set()
    marker = f"[{group}]".encode()
    for entry in paths:
        if entry.lower().endswith(".egg"):
            raise _NeedsImportlibMetadata(entry)
        try:
            children = os.listdir(entry or ".")
        except NotADirectoryError:          # a zip archive on sys.path
            raise _NeedsImportlibMetadata(entry) from None
        except OSError:                     # missing or unreadable: importlib skips it too
            continue
        base = os.path.join(entry or ".", "")
        for child in children:              # listdir order, as importlib.metadata's
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            stem = low.rpartition(".")[0].partition("-")[0]
            key = _normalize(stem) if "." in stem or "__" in stem else stem
            if key in seen:                 # the first one found wins
                continue
            seen.add(key)
            meta_dir = base + child
            try:
                data = _read_bytes(meta_dir + os.sep + "entry_points.txt")
            except OSError:
                continue
            if marker in data:              # most distributions: not a fastop plugin
                found.extend(_Found(name, value, meta_dir, stem)
                             for name, value in _section(data, group))
    return found


def _importlib_entry_points(group: str, path: list[str] | None) -> list[EntryPoint]:
    import importlib.metadata as metadata
    dists = metadata.distributions() if path is None else metadata.distributions(path=path)
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in dists:
        name = dist.metadata["Name"] or ""
        if _normalize(name) in seen:
            continue
        seen.add(_normalize(name))
        found.extend(EntryPoint(ep.name, ep.value, name, dist.version or "")
                     for ep in dist.entry_points if ep.group == group)
    return found


def _discover(group: str, path: list[str] | None) -> list[EntryPoint | _Found]:
    """The entry points of `group` on `path` (default ``sys.path``), in
    importlib.metadata's order; those the scan found have not read their METADATA."""
    if path is None and _other_distribution_finders():
        return list(_importlib_entry_points(group, None))
    try:
        return list(_scan(group, list(sys.path if path is None else path)))
    except _NeedsImportlibMetadata:
        return list(_importlib_entry_points(group, path))


def _resolved(found: EntryPoint | _Found) -> EntryPoint:
    return found.entry_point() if isinstance(found, _Found) else found


def _dist_key(found: EntryPoint | _Found) -> str:
    return found.key if isinstance(found, _Found) else _normalize(found.dist)


def entry_points(group: str = ENTRY_POINT_GROUP,
                 path: list[str] | None = None) -> list[EntryPoint]:
    """Entry points of ``group`` declared by the distributions installed on ``path``
    (default ``sys.path``): the same ones ``importlib.metadata.entry_points(group=...)``
    finds, in its order (see the module docstring for why this does not call it)."""
    return [_resolved(found) for found in _discover(group, path)]


# ----------------------------------------------------------------------------- the manager

def _requested(spec: str) -> list[str]:
    return [name.strip() for name in spec.split(",") if name.strip()]


class PluginManager:
    """Loads plugins into one op registry, each in its own transaction, and imports the
    installed ones when the registry first needs their namespace (it is the registry's
    :class:`~fastop.ops._registry.PluginLoader`).

    ``fastop.plugins.manager`` is the one ``import fastop`` uses; tests make their own
    with a fresh :class:`~fastop.ops.Registry`. ``hooks`` is the pluggy manager (the
    hook specifications of :mod:`fastop.hookspecs`).
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.hooks = pluggy.PluginManager("fastop")
        self.hooks.add_hookspecs(hookspecs)
        # fastop_register_ops is historic: pluggy calls it for each plugin as it is
        # registered, so every plugin's ops are defined inside its own transaction
        self.hooks.hook.fastop_register_ops.call_historic(kwargs={"registry": registry})
        self._loaded: list[PluginInfo] = []
        self._from_directory: dict[tuple[str, str], PluginInfo] = {}
        # installed entry points recorded at import and not imported yet, in discovery
        # order (autoload on); each is imported when its namespace is first needed
        self._waiting: list[EntryPoint | _Found] = []
        # autoload off: a lookup miss imports the installed entry point declaring the
        # namespace (``_asked``: the namespaces already looked for; ``_installed``: the
        # last scan, with the path it read)
        self._on_demand = False
        self._path: list[str] | None = None
        self._asked: set[str] = set()
        self._installed: tuple[tuple[str, ...], list[EntryPoint | _Found]] | None = None
        # "dist:entry point" -> (its entry point's name, the error message, the
        # exception) of an installed plugin that failed to load
        self._failures: dict[str, tuple[str, str, BaseException]] = {}
        # every plugin that failed to load, by any route (entry point, register(), a
        # directory): "<plugin> (<error>)" and the exception, for lookups of a namespace
        # no failed entry point declares
        self._failed: list[tuple[str, BaseException]] = []
        # one import of plugins at a time; ``_loading``: how many are in progress, so that
        # another thread's lookup waits for them instead of missing their ops
        self._lock = threading.RLock()
        self._loading = 0
        registry.attach_loader(self)

    # -- reporting -------------------------------------------------------------------
    def list(self) -> list[PluginInfo]:
        """Every plugin, in load order (the built-ins first): each plugin recorded at
        import is imported first; those that failed are listed with their ``error``."""
        self.load_all()
        return list(self._loaded)

    def _fail(self, what: str, exc: BaseException, strict: bool | None = None) -> None:
        message = f"fastop plugin {what} was not loaded: {type(exc).__name__}: {exc}"
        self._failed.append((f"{what} ({type(exc).__name__}: {exc})", exc))
        if env_flag("FASTOP_STRICT_PLUGINS") if strict is None else strict:
            raise PluginError(message) from exc
        warnings.warn(message, PluginLoadWarning, stacklevel=caller_outside_fastop())

    # -- one plugin --------------------------------------------------------------------
    def register(self, plugin: ModuleType | Any, dist: str, version: str, *,
                 entry_point: str | None = None, directory: str | None = None,
                 strict: bool | None = None, module: str | None = None) -> PluginInfo | None:
        """Register one plugin object (a module of hook implementations) and define its
        ops, attributed to ``dist`` and ``version``; on failure nothing of it remains
        and it is reported (warning, or PluginError when strict). Returns its info, or
        None when it failed. `module` names the plugin's module in reports (default: its
        ``__name__``). A KeyboardInterrupt or SystemExit while it loads rolls it back
        too, then propagates."""
        try:
            return self._register(plugin, dist, version, entry_point, directory, module)
        except Exception as exc:
            what = f"{dist} {version}".strip() if directory is None else \
                f"module {module or getattr(plugin, '__name__', repr(plugin))} in " \
                f"directory {directory}"
            self._fail(what, exc, strict)
            return None

    def _register(self, plugin: ModuleType | Any, dist: str, version: str,
                  entry_point: str | None, directory: str | None,
                  module: str | None) -> PluginInfo:
        """:meth:`register`, raising what made the plugin fail (after rolling it back)."""
        module = module or getattr(plugin, "__name__", repr(plugin))
        if self.hooks.is_registered(plugin):
            raise PluginError(f"its module {module} is already loaded, as plugin "
                              f"{self.hooks.get_name(plugin)}")
        providing = self.registry.providing(dist, version)
        try:
            with providing:
                self.hooks.register(plugin, name=f"{dist}:{entry_point or module}")
            self._validate(plugin)
        except BaseException:
            for op in providing.ops():
                self.registry.remove(op)
            if self.hooks.is_registered(plugin):
                self.hooks.unregister(plugin)
            raise
        info = PluginInfo(dist, version, module, entry_point, tuple(sorted(providing.ops())),
                          directory)
        return self._add_loaded(info)

    def _add_loaded(self, info: PluginInfo) -> PluginInfo:
        """Record a loaded plugin: one entry per distribution, so a distribution's
        further modules (fastop's built-ins and distributed ops; a second entry point)
        add their ops to its first entry. Returns the distribution's entry."""
        for k, known in enumerate(self._loaded):
            if known.directory is None and info.directory is None and \
                    known.error is None and known.name == info.name:
                self._loaded[k] = replace(known, ops=tuple(sorted({*known.ops, *info.ops})))
                return self._loaded[k]
        self._loaded.append(info)
        return info

    def _validate(self, plugin: Any) -> None:
        """Hook implementations of a registered plugin name fastop hooks (pluggy's
        ``check_pending``); a plugin with none is a mistake too (an unmarked function)."""
        if not self.hooks.get_hookcallers(plugin):
            raise pluggy.PluginValidationError(
                plugin, "it implements no fastop hook: mark the hook functions with "
                        "@fastop.hookimpl (hooks: " + ", ".join(self._hook_names()) + ")")
        try:
            self.hooks.check_pending()
        except pluggy.PluginValidationError as exc:
            unknown = [caller.name for caller in self.hooks.get_hookcallers(plugin) or ()
                       if not caller.has_spec()]
            hint = did_you_mean(unknown[0], self._hook_names()) if unknown else ""
            raise pluggy.PluginValidationError(
                plugin, f"{exc}; fastop's hooks are {', '.join(self._hook_names())}{hint}"
            ) from None

    def _hook_names(self) -> list[str]:
        return sorted(name for name in vars(self.hooks.hook)
                      if not name.startswith("_") and getattr(self.hooks.hook, name).has_spec())

    # -- built-ins and installed plugins ------------------------------------------------
    def load_builtin(self, version: str) -> None:
        """Register fastop's own ops, through the same hook as any plugin: its kernel
        families (``fastop.plugins.builtin``) and data-parallel ops
        (``fastop.plugins.distributed``)."""
        from fastop.plugins import builtin, distributed
        for module in (builtin, distributed):
            self.register(module, "fastop", version, strict=True)

    def load_entry_points(self, path: list[str] | None = None) -> None:
        """Record the installed plugins, and import those ``FASTOP_PLUGINS`` names, as
        the switches say (see the module docstring). `path`: where to look (default
        ``sys.path``)."""
        autoload = not env_flag("FASTOP_DISABLE_PLUGIN_AUTOLOAD")
        strict = env_flag("FASTOP_STRICT_PLUGINS")
        requested = _requested(os.environ.get("FASTOP_PLUGINS", ""))
        self._path = path
        self._on_demand = not autoload
        if not autoload and not requested:
            return
        found = _discover(ENTRY_POINT_GROUP, path)
        if not requested:
            self._waiting.extend(found)
            if strict:      # every plugin is checked now: a broken one fails the import
                self.load_all()
            return
        wanted = {_normalize(n) for n in requested}
        named = [f for f in found if {_normalize(f.name), _dist_key(f)} & wanted]
        if autoload:
            self._waiting.extend(f for f in found if f not in named)
        for f in named:
            self.load_entry_point(_resolved(f), strict)
        if strict:
            self.load_all()
        known = {_normalize(n) for f in found for n in (f.name, _dist_key(f))}
        for name in requested:
            if _normalize(name) not in known:
                choices = sorted({f.name for f in found} |
                                 {_resolved(f).dist for f in found})
                self._fail(name, LookupError(
                    f"FASTOP_PLUGINS names {name!r}, but no installed distribution has a "
                    f"'{ENTRY_POINT_GROUP}' entry point or distribution of that name "
                    f"(installed: {', '.join(choices) or 'none'})"
                    f"{did_you_mean(name, choices)}"), strict)

    def load_entry_point(self, ep: EntryPoint,
                         strict: bool | None = None) -> PluginInfo | None:
        """Import one entry point and register it (once); returns its info, or None
        when it was loaded before or failed (a failure is remembered: listed, and named
        by lookups of the namespace it declares)."""
        if self._tried(ep):
            return None
        key = f"{ep.dist}:{ep.name}"
        try:
            info = self._register(ep.load(), ep.dist, ep.version, ep.name, None, None)
        except Exception as exc:
            what = f"{ep.dist} {ep.version}".strip()
            error = f"{type(exc).__name__}: {exc}"
            self._failures[key] = (ep.name, f"its plugin {what} (entry point '{ep.name}' = "
                                            f"{ep.value!r}) failed to load: {error}", exc)
            self._loaded.append(PluginInfo(ep.dist, ep.version, ep.module, ep.name, (),
                                           error=error))
            self._fail(what, exc, strict)
            return None
        self._check_namespaces(ep, info)
        return info

    def _tried(self, ep: EntryPoint) -> bool:
        """Whether the entry point was imported before (loaded, or failed)."""
        key = f"{ep.dist}:{ep.name}"
        return self.hooks.has_plugin(key) or key in self._failures

    def _check_namespaces(self, ep: EntryPoint, info: PluginInfo) -> None:
        """Warn (DeprecationWarning) about a plugin whose ops are outside the namespace
        its entry point declares: a lookup finds them only after importing every
        recorded plugin."""
        outside = sorted({op.partition("::")[0] for op in info.ops} - {ep.name})
        if not outside:
            return
        declared = f"declares the op namespace '{ep.name}'" if ep.name.isidentifier() \
            else "declares no op namespace (it is not an identifier)"
        warnings.warn(
            f"fastop plugin {ep.dist} {ep.version}: its entry point '{ep.name}' {declared}, "
            f"but it defines ops in {', '.join(map(repr, outside))}. fastop imports a plugin "
            f"when the namespace its entry point names is first used; ops outside it are "
            f"found only by importing every plugin when a lookup misses, which a future "
            f"release will stop doing. Name one entry point per namespace after it: "
            f"[project.entry-points.fastop] {outside[0]} = \"{ep.module}\"",
            DeprecationWarning, stacklevel=caller_outside_fastop())

    # -- on first use (the registry's PluginLoader) -------------------------------------
    def _settle(self) -> None:
        """Wait until another thread's plugin imports are done (this thread's own, when
        a plugin's hook looks up another namespace, go on: the lock is reentrant)."""
        if self._loading:
            with self._lock:
                pass

    @contextmanager
    def _importing(self) -> Iterator[None]:
        """Hold the lock and count an import in progress in ``_loading`` (set before
        entries leave ``_waiting``, so that another thread's lookup waits for them)."""
        with self._lock:
            self._loading += 1
            try:
                yield
            finally:
                self._loading -= 1

    def load_pending(self, namespace: str) -> bool:
        """Import the recorded plugins whose entry point declares `namespace`; whether
        there were any."""
        self._settle()
        if not self._waiting:
            return False
        with self._importing():
            mine = [f for f in self._waiting if f.name == namespace]
            self._waiting = [f for f in self._waiting if f.name != namespace]
            for found in mine:
                self.load_entry_point(_resolved(found))
        return bool(mine)

    def load_for_lookup(self, namespace: str, on_demand: bool = True) -> bool:
        """A lookup in `namespace` missed: import the recorded plugins declaring it;
        with none, every recorded plugin (one may define it outside the namespace it
        declares); with autoload off and `on_demand`, the installed plugin declaring
        it. Whether anything was imported."""
        if self.load_pending(namespace):
            return True
        if self._on_demand:
            return on_demand and self._load_on_demand(namespace)
        return self.load_all()

    def load_all(self) -> bool:
        """Import every recorded plugin not imported yet (one at a time, so that one
        whose hook uses another's namespace imports it then); whether there were any."""
        self._settle()
        if not self._waiting:
            return False
        with self._importing():
            while self._waiting:
                self.load_entry_point(_resolved(self._waiting.pop(0)))
        return True

    def declares(self, namespace: str) -> bool:
        """Whether a recorded plugin not imported yet declares `namespace`."""
        return any(f.name == namespace for f in self._waiting)

    def failure(self, namespace: str) -> tuple[str, BaseException] | None:
        """Why the installed plugin declaring `namespace` failed to load, and its error;
        else, when other plugins failed (one registered by hand or from a directory may
        have been the one to define it), which did and why."""
        declared = next(((message, exc) for name, message, exc in self._failures.values()
                         if name == namespace), None)
        if declared is not None or not self._failed:
            return declared
        count = "a plugin" if len(self._failed) == 1 else f"{len(self._failed)} plugins"
        return (f"{count} failed to load, which may be where it comes from: "
                + "; ".join(what for what, _ in self._failed), self._failed[-1][1])

    def _load_on_demand(self, namespace: str) -> bool:
        """Autoload off: import the installed distribution(s) whose entry point declares
        `namespace`, once, saying so (:class:`PluginOnDemandWarning`)."""
        self._settle()
        if namespace in self._asked or not namespace.isidentifier():
            return False
        loaded = False
        with self._importing():
            if namespace in self._asked:
                return False
            self._asked.add(namespace)
            for found in self._installed_entry_points():
                ep = _resolved(found) if found.name == namespace else None
                if ep is None or self._tried(ep):
                    continue
                warnings.warn(
                    f"fastop is importing plugin {ep.dist} {ep.version} (entry point "
                    f"'{ep.name}' = {ep.value!r}) for op namespace '{namespace}': "
                    f"FASTOP_DISABLE_PLUGIN_AUTOLOAD is set, so an installed plugin is "
                    f"imported when its namespace is needed".replace("  ", " "),
                    PluginOnDemandWarning, stacklevel=caller_outside_fastop())
                loaded = self.load_entry_point(ep) is not None or loaded
        return loaded

    def _installed_entry_points(self) -> list[EntryPoint | _Found]:
        """The installed entry points, scanned again only when the path changed."""
        where = tuple(sys.path if self._path is None else self._path)
        if self._installed is None or self._installed[0] != where:
            self._installed = (where, _discover(ENTRY_POINT_GROUP, self._path))
        return self._installed[1]

    # -- a directory of op modules ------------------------------------------------------
    def load_directory(self, path: str | os.PathLike[str]) -> list[PluginInfo]:
        """Import the modules of a directory that implement ``fastop_register_ops`` and
        register each as a plugin (OneFlow's ``custom_op_module``): see
        :func:`fastop.plugins.load_directory`."""
        directory = _op_directory(path)
        names = _op_modules(directory, caller_outside_fastop())
        if not names:
            raise PluginError(f"load_directory: no module in {directory} implements "
                              f"fastop_register_ops (a '*.py' file with a function "
                              f"marked @fastop.hookimpl)")
        infos = [self._load_module(directory, name) for name in names]
        return [info for info in infos if info is not None]

    def _load_module(self, directory: str, name: str,
                     strict: bool | None = None) -> PluginInfo | None:
        """Load ``directory/name.py`` as a plugin, once (a module that failed is tried
        again by the next call)."""
        info = self._from_directory.get((directory, name))
        if info is not None:
            return info
        try:
            module = _import_file(directory, name)
        except Exception as exc:
            self._fail(f"module {name} in directory {directory}", exc, strict)
            return None
        info = self.register(module, directory, str(getattr(module, "__version__", "")),
                             directory=directory, strict=strict, module=name)
        if info is not None:
            self._from_directory[directory, name] = info
            origin = DirectorySource(directory, name)
            for op_name in info.ops:        # what a saved Program records for the op
                self.registry.get(op_name).source = origin
        return info

    def check_directory_source(self, op_name: str, source: dict[str, str],
                               allows: Callable[[str], bool] | None = None) -> str:
        """What :meth:`load_directory_source` checks before it imports anything: the
        recorded module is there and ``allows`` accepts its name. Returns the module's
        path; raises ValueError (not there) or :class:`UntrustedOpModuleError`."""
        directory, module = str(source.get("directory", "")), str(source.get("module", ""))
        what = f"op '{op_name}' from module '{module}' in directory '{directory}'"
        path = os.path.join(directory, module + ".py")
        if not module.isidentifier() or not os.path.isfile(path):
            raise ValueError(f"the program needs {what}, but that module is not there")
        if allows is None or not allows(module):
            raise UntrustedOpModuleError(
                f"the program needs {what}: loading it imports {path}, which runs its "
                f"code. If you trust it, pass allowed_modules=['{module}'] (or "
                f"trust_code=True to allow any module), or load the directory first with "
                f"fastop.plugins.load_directory({directory!r})")
        return path

    def load_directory_source(self, op_name: str, source: dict[str, str],
                              allows: Callable[[str], bool] | None = None) -> OpDef:
        """Load the directory module a saved Program recorded for ``op_name`` and return
        the op; a ValueError naming the module when that does not give it.

        Importing the module runs its code, so it is imported only when ``allows`` (the
        loader's allow-list: ``static.load_program``'s ``allowed_modules`` and
        ``trust_code``) accepts the module's name; None accepts none. Refused, it raises
        :class:`UntrustedOpModuleError` naming the directory, the module and the
        arguments that allow it, and imports nothing."""
        self.check_directory_source(op_name, source, allows)
        directory, module = str(source["directory"]), str(source["module"])
        what = f"op '{op_name}' from module '{module}' in directory '{directory}'"
        try:
            self._load_module(_op_directory(directory), module, strict=True)
        except PluginError as exc:
            raise ValueError(f"the program needs {what}, which could not be loaded: "
                             f"{exc}") from exc
        if op_name not in self.registry:
            raise ValueError(f"the program needs {what}, but the module does not define it")
        return self.registry.get(op_name)

    # -- samples for opcheck --------------------------------------------------------------
    def op_samples(self) -> dict[str, list[Any]]:
        """Every plugin's ``fastop_op_samples()`` (each recorded one imported first),
        merged by op name."""
        self.load_all()
        merged: dict[str, list[Any]] = {}
        for samples in self.hooks.hook.fastop_op_samples():
            for op, given in samples.items():
                merged.setdefault(op, []).extend(given)
        return merged


def _op_directory(path: str | os.PathLike[str]) -> str:
    """The real path of a directory of op modules."""
    directory = os.path.realpath(os.fspath(path))
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"load_directory: {os.fspath(path)!r} is not a directory")
    return directory


# The largest op module read when looking for fastop_register_ops (bytes).
MAX_MODULE_BYTES = 1 << 24

# The package under which directory op modules are imported (see _private_name).
DIRECTORY_PACKAGE = "fastop_directory_ops"


def _op_modules(directory: str, stacklevel: int) -> list[str]:
    """The ``*.py`` modules of a directory whose source mentions fastop_register_ops
    (others — helpers, scripts — are not imported: importing runs code). An entry that
    is no regular file (a subdirectory, a dangling symlink, a FIFO) or cannot be read
    is skipped with a :class:`PluginLoadWarning` naming it."""
    from fastop._files import read_bounded     # here: `import fastop` does not load it
    names = []
    for filename in sorted(os.listdir(directory)):
        stem = filename[:-3]
        if not (filename.endswith(".py") and stem.isidentifier() and stem != "__init__"):
            continue
        path = os.path.join(directory, filename)
        try:
            source = read_bounded(path, "load_directory", MAX_MODULE_BYTES)
        except (OSError, LoadError) as exc:
            warnings.warn(f"load_directory: skipped {path}: it cannot be read as a module "
                          f"({type(exc).__name__}: {exc})", PluginLoadWarning,
                          stacklevel=stacklevel)
            continue
        if b"fastop_register_ops" in source:
            names.append(stem)
    return names


def _private_name(directory: str, name: str) -> str:
    """The name ``directory/name.py`` is imported under: ``fastop_directory_ops.<hash of
    the directory>.<name>``, which no other module owns (a ``colorsys.py`` imported as
    ``colorsys`` would be what every ``import colorsys`` in the process returns)."""
    import hashlib
    digest = hashlib.sha256(directory.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{DIRECTORY_PACKAGE}.d{digest}.{name}"


def _import_file(directory: str, name: str) -> ModuleType:
    """Import ``directory/name.py`` under its private name (:func:`_private_name`), with
    the directory appended to sys.path: its modules import each other (helpers) by
    name, where no earlier entry of sys.path provides that name."""
    from importlib.util import module_from_spec, spec_from_file_location
    if directory not in sys.path:
        sys.path.append(directory)
    filename = os.path.join(directory, name + ".py")
    private = _private_name(directory, name)
    existing = sys.modules.get(private)
    if existing is not None:
        return existing
    spec = spec_from_file_location(private, filename)
    module = module_from_spec(spec)
    sys.modules[private] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private]
        raise
    return module


manager = PluginManager(default_registry)
