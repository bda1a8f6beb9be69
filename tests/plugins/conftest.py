"""Fixtures of the plugin tests: fake installed distributions (a module plus its
``.dist-info`` with a ``fastop`` entry point, as pluggy's own tests fake them), a plugin
manager on a fresh registry, and a guard that restores fastop's global plugin state."""
import itertools
import sys
import textwrap

import pytest

from fastop.ops import Registry, registry
from fastop.plugins import PluginManager, manager as global_manager

_unique = itertools.count()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path to install fake distributions into; their modules are
    forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def install(site):
    """``install(dist, version, source, entry_point=None)``: a fake distribution in
    `site`; returns its module's name."""
    return lambda *args, **kwargs: fake_distribution(site, *args, **kwargs)


@pytest.fixture
def op_source():
    """``op_source(namespace, *names, fail_after=None)``: see :func:`op_plugin`."""
    return op_plugin


def fake_distribution(site, dist, version="1.0", source="", *, entry_point=None,
                      module=None, metadata_name=None):
    """Install distribution `dist` into `site`: a module with `source` and a
    ``fastop`` entry point naming it. Returns the module's (unique) name."""
    module = module or f"fake_plugin_{next(_unique)}"
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {metadata_name or dist}\n"
                                   f"Version: {version}\n\nA fake plugin.\n")
    (info / "entry_points.txt").write_text(
        f"[console_scripts]\nnot-fastop = x:y\n\n[fastop]\n"
        f"{entry_point or dist.replace('-', '_')} = {module}\n")
    return module


def op_plugin(namespace, *names, fail_after=None):
    """Source of a plugin module defining ``namespace::name`` identity ops (then raising
    if `fail_after` is a message)."""
    body = "".join(f"    registry.define('{namespace}::{n}', inputs=['x'], outputs=['y'], "
                   f"meta=lambda x: x, kernels={{'*': lambda x: x}})\n" for n in names)
    if fail_after:
        body += f"    raise RuntimeError({fail_after!r})\n"
    return f"import fastop\n\n@fastop.hookimpl\ndef fastop_register_ops(registry):\n{body}"


@pytest.fixture
def plugins():
    """A plugin manager on a fresh, empty registry."""
    return PluginManager(Registry())


@pytest.fixture
def restore_global_plugins():
    """Let a test load plugins into fastop's own registry and manager: afterwards its
    ops are removed, its plugins unregistered and the manager's lists restored (listing
    the registry first imports the installed plugins not imported yet)."""
    ops = {op.name for op in registry}
    loaded = list(global_manager._loaded)
    failures = dict(global_manager._failures)
    failed = list(global_manager._failed)
    from_directory = dict(global_manager._from_directory)
    hooked = {id(p) for p in global_manager.hooks.get_plugins()}
    path = list(sys.path)
    yield global_manager
    for name in {op.name for op in registry} - ops:
        registry.remove(name)
    for plugin in global_manager.hooks.get_plugins():
        if id(plugin) not in hooked:
            global_manager.hooks.unregister(plugin)
    global_manager._loaded[:] = loaded
    global_manager._failures.clear()
    global_manager._failures.update(failures)
    global_manager._failed[:] = failed
    global_manager._from_directory.clear()
    global_manager._from_directory.update(from_directory)
    sys.path[:] = path
