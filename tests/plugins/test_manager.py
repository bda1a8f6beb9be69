"""fastop.plugins._manager: registering plugins transactionally, validation of hook
implementations, strict mode, duplicates, entry-point discovery and its switches, and
``fastop.plugins.list()`` — on a fresh registry with fake plugins and distributions
(pluggy's ``testing/test_pluginmanager.py`` fakes them the same way)."""
import json
import os
import subprocess
import sys
import textwrap
import types
import zipfile

import pytest

import fastop
from fastop.plugins import (EntryPoint, PluginError, PluginInfo, PluginLoadWarning,
                            PluginOnDemandWarning, entry_points)

from .conftest import fake_distribution, op_plugin


@pytest.fixture(autouse=True)
def clean_switches(monkeypatch):
    for name in ("FASTOP_STRICT_PLUGINS", "FASTOP_DISABLE_PLUGIN_AUTOLOAD", "FASTOP_PLUGINS"):
        monkeypatch.delenv(name, raising=False)


def plugin_module(name="fake_mod", **hooks):
    """A module object whose attributes are the given (marked) hook functions."""
    module = types.ModuleType(name)
    for attr, fn in hooks.items():
        setattr(module, attr, fn)
    return module


def defining(*names, then=None):
    """A marked fastop_register_ops defining identity ops, then calling `then`."""
    @fastop.hookimpl
    def fastop_register_ops(registry):
        for name in names:
            registry.define(name, inputs=["x"], outputs=["y"], meta=lambda x: x,
                            kernels={"*": lambda x: x})
        if then is not None:
            then()
    return fastop_register_ops


def boom():
    raise RuntimeError("boom halfway")


# -- one plugin, transactionally ------------------------------------------------------------
def test_a_plugin_registers_its_ops_attributed_to_its_distribution(plugins):
    info = plugins.register(plugin_module(fastop_register_ops=defining("demo::a", "demo::b")),
                            "demo-dist", "2.1", entry_point="demo")
    assert info == PluginInfo("demo-dist", "2.1", "fake_mod", "demo", ("demo::a", "demo::b"))
    op = plugins.registry.get("demo::b")
    assert (op.plugin, op.version) == ("demo-dist", "2.1")
    assert plugins.list() == [info]


def test_a_plugin_failing_halfway_is_rolled_back_and_named(plugins):
    module = plugin_module(fastop_register_ops=defining("demo::a", "demo::b", then=boom))
    with pytest.warns(PluginLoadWarning, match=r"fastop plugin demo-dist 2\.1 was not loaded: "
                                               r"RuntimeError: boom halfway"):
        assert plugins.register(module, "demo-dist", "2.1") is None
    assert "demo::a" not in plugins.registry and "demo::b" not in plugins.registry
    assert not plugins.hooks.is_registered(module) and plugins.list() == []
    # nothing of it is left behind: another plugin may define the same names
    assert plugins.register(plugin_module("other", fastop_register_ops=defining("demo::a")),
                            "other-dist", "1")


@pytest.mark.parametrize("value", ["1", "true", "YES", "On"])
def test_strict_mode_raises_instead_of_warning(plugins, monkeypatch, value):
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", value)
    module = plugin_module(fastop_register_ops=defining("demo::a", then=boom))
    with pytest.raises(PluginError, match="demo-dist 2.1 was not loaded: RuntimeError: boom"):
        plugins.register(module, "demo-dist", "2.1")
    assert "demo::a" not in plugins.registry


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF", ""])
def test_strict_mode_off_values_warn(plugins, monkeypatch, value):
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", value)
    with pytest.warns(PluginLoadWarning):
        plugins.register(plugin_module(fastop_register_ops=defining(then=boom)), "d", "1")


def test_a_bad_switch_value_is_an_error_naming_the_variable(plugins, monkeypatch):
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", "maybe")
    with pytest.raises(ValueError, match="FASTOP_STRICT_PLUGINS='maybe'"):
        plugins.register(plugin_module(fastop_register_ops=defining(then=boom)), "d", "1")


def test_two_distributions_defining_one_op_is_an_error_naming_both(plugins):
    plugins.register(plugin_module("one", fastop_register_ops=defining("demo::a")),
                     "first-dist", "1.0")
    with pytest.warns(PluginLoadWarning, match=r"second-dist 2\.0 was not loaded: "
                                               r"DuplicateOpError: op 'demo::a' is defined "
                                               r"twice: by first-dist 1\.0 and by "
                                               r"second-dist 2\.0"):
        plugins.register(plugin_module("two", fastop_register_ops=defining("demo::b",
                                                                           "demo::a")),
                         "second-dist", "2.0")
    assert plugins.registry.get("demo::a").plugin == "first-dist"
    assert "demo::b" not in plugins.registry


# -- hook implementations are validated ------------------------------------------------------
def test_a_misspelled_hook_is_a_broken_plugin_not_a_silent_no_op(plugins):
    @fastop.hookimpl
    def fastop_register_opz(registry):
        pass
    module = plugin_module(fastop_register_ops=defining("demo::a"),
                           fastop_register_opz=fastop_register_opz)
    with pytest.warns(PluginLoadWarning, match=r"unknown hook 'fastop_register_opz'.*"
                                               r"did you mean 'fastop_register_ops'"):
        assert plugins.register(module, "typo-dist", "1") is None
    assert "demo::a" not in plugins.registry       # its valid hook's ops are rolled back
    plugins.hooks.check_pending()                  # and nothing of it stays pending


def test_a_hook_taking_an_unknown_argument_is_refused(plugins):
    @fastop.hookimpl
    def fastop_register_ops(registry, device):
        pass
    with pytest.warns(PluginLoadWarning, match=r"Argument\(s\) \{'device'\} are declared "
                                               r"in the hookimpl"):
        plugins.register(plugin_module(fastop_register_ops=fastop_register_ops), "d", "1")


def test_a_module_without_marked_hooks_is_reported(plugins):
    def fastop_register_ops(registry):    # @fastop.hookimpl forgotten
        registry.define("demo::a", inputs=["x"], outputs=["y"])
    with pytest.warns(PluginLoadWarning, match="implements no fastop hook: mark the hook "
                                               "functions with @fastop.hookimpl"):
        plugins.register(plugin_module(fastop_register_ops=fastop_register_ops), "d", "1")


def test_the_same_module_is_not_registered_twice(plugins):
    module = plugin_module(fastop_register_ops=defining("demo::a"))
    plugins.register(module, "d", "1", entry_point="one")
    with pytest.warns(PluginLoadWarning, match="already loaded, as plugin d:one"):
        assert plugins.register(module, "d", "1", entry_point="two") is None
    assert plugins.registry.get("demo::a").plugin == "d"      # the first one stays


def test_a_distribution_loaded_through_several_modules_is_one_entry(plugins):
    first = plugin_module("fake_first", fastop_register_ops=defining("demo::b"))
    second = plugin_module("fake_second", fastop_register_ops=defining("demo::a"))
    other = plugin_module("fake_other", fastop_register_ops=defining("other::c"))
    plugins.register(first, "d", "1")
    merged = plugins.register(second, "d", "1")
    plugins.register(other, "e", "2")
    assert plugins.list() == [PluginInfo("d", "1", "fake_first", None, ("demo::a", "demo::b")),
                              PluginInfo("e", "2", "fake_other", None, ("other::c",))]
    assert merged == plugins.list()[0]


def test_fastops_own_ops_are_one_fastop_entry():
    infos = [p for p in fastop.plugins.list() if p.name == "fastop"]
    assert len(infos) == 1
    assert {"fastop::tanh", "dist::allreduce_mean"} <= set(infos[0].ops)


# -- entry points and the switches ------------------------------------------------------------
def test_entry_points_are_loaded_with_their_distribution(plugins, install, op_source, site):
    module = install("fake-alpha", "0.3", op_source("alpha", "a"), entry_point="alpha")
    plugins.load_entry_points(path=[str(site)])
    assert plugins.list() == [PluginInfo("fake-alpha", "0.3", module, "alpha",
                                         ("alpha::a",))]


def test_an_entry_point_that_fails_to_import_is_named_and_listed(plugins, install, site):
    module = install("broken-dist", "0.1", "raise ImportError('missing dependency')\n",
                     entry_point="broken")
    plugins.load_entry_points(path=[str(site)])          # recorded, not imported
    with pytest.warns(PluginLoadWarning, match="fastop plugin broken-dist 0.1 was not "
                                               "loaded: ImportError: missing dependency"):
        infos = plugins.list()
    assert infos == [PluginInfo("broken-dist", "0.1", module, "broken", (),
                                error="ImportError: missing dependency")]


def test_autoload_off_loads_nothing(plugins, install, op_source, site, monkeypatch):
    install("fake-alpha", "1", op_source("alpha", "a"))
    monkeypatch.setenv("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "yes")
    plugins.load_entry_points(path=[str(site)])
    assert plugins.list() == []


@pytest.mark.parametrize("requested", ["beta", "fake-beta", "FAKE_BETA", " beta , "])
def test_fastop_plugins_loads_named_ones_with_autoload_off(plugins, install, op_source, site,
                                                          monkeypatch, requested):
    install("fake-alpha", "1", op_source("alpha", "a"), entry_point="alpha")
    install("fake-beta", "1", op_source("beta", "b"), entry_point="beta")
    monkeypatch.setenv("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("FASTOP_PLUGINS", requested)
    plugins.load_entry_points(path=[str(site)])
    assert [p.name for p in plugins.list()] == ["fake-beta"]


def test_fastop_plugins_names_one_it_cannot_find(plugins, install, op_source, site,
                                                 monkeypatch):
    install("fake-alpha", "1", op_source("alpha", "a"), entry_point="alpha")
    monkeypatch.setenv("FASTOP_PLUGINS", "alpha,alhpa")
    with pytest.warns(PluginLoadWarning, match=r"FASTOP_PLUGINS names 'alhpa', but no "
                                               r"installed distribution.*installed: alpha, "
                                               r"fake-alpha.*did you mean 'alpha'"):
        plugins.load_entry_points(path=[str(site)])
    assert [p.name for p in plugins.list()] == ["fake-alpha"]   # autoload on: loaded once
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="FASTOP_PLUGINS names 'alhpa'"):
        plugins.load_entry_points(path=[str(site)])


def test_one_broken_plugin_does_not_stop_the_others(plugins, install, op_source, site):
    install("fake-alpha", "1", op_source("alpha", "a", fail_after="alpha broke"),
            entry_point="alpha")
    install("fake-beta", "1", op_source("beta", "b"), entry_point="beta")
    plugins.load_entry_points(path=[str(site)])
    with pytest.warns(PluginLoadWarning, match="alpha broke"):
        infos = plugins.list()
    assert sorted((p.name, p.error) for p in infos) == [
        ("fake-alpha", "RuntimeError: alpha broke"), ("fake-beta", None)]
    assert "alpha::a" not in plugins.registry and "beta::b" in plugins.registry


def test_list_reports_the_builtins_first_then_installed_plugins():
    infos = fastop.plugins.list()
    assert (infos[0].name, infos[0].module, infos[0].entry_point) == \
        ("fastop", "fastop.plugins.builtin", None)
    assert "fastop::tanh" in infos[0].ops and infos[0].version == fastop.__version__
    activations = next(p for p in infos if p.name == "fastop-activations")
    assert (activations.module, activations.entry_point) == ("fastop_activations.plugin",
                                                             "activations")
    assert fastop.plugins.list is fastop.plugins.loaded_plugins


# -- imported when their namespace is first used ---------------------------------------------
def imported(*modules):
    return [m for m in modules if m in sys.modules]


def test_recorded_plugins_are_imported_when_their_namespace_is_first_used(plugins, install,
                                                                          op_source, site):
    alpha = install("fake-alpha", "1", op_source("alpha", "a"), entry_point="alpha")
    beta = install("fake-beta", "2", op_source("beta", "b"), entry_point="beta")
    gamma = install("fake-gamma", "3", op_source("gamma", "c"), entry_point="gamma")
    plugins.load_entry_points(path=[str(site)])
    assert imported(alpha, beta, gamma) == []
    assert plugins.registry.namespace("alpha").a.plugin == "fake-alpha"    # fastop.ops.alpha
    assert imported(alpha, beta, gamma) == [alpha]
    assert "beta::b" in plugins.registry and imported(beta, gamma) == [beta]
    assert plugins.registry.get("gamma::c").version == "3"
    assert [(p.name, p.ops) for p in plugins.list()] == [
        ("fake-alpha", ("alpha::a",)), ("fake-beta", ("beta::b",)), ("fake-gamma", ("gamma::c",))]


@pytest.mark.parametrize("listing", [list, len, lambda r: r.namespaces(), lambda r: r.ops()])
def test_a_listing_imports_every_recorded_plugin(plugins, install, op_source, site, listing):
    modules = [install(f"fake-{ns}", "1", op_source(ns, "op"), entry_point=ns)
               for ns in ("alpha", "beta")]
    plugins.load_entry_points(path=[str(site)])
    listing(plugins.registry)
    assert imported(*modules) == modules
    assert {"alpha::op", "beta::op"} <= {op.name for op in plugins.registry}


def test_threads_looking_up_one_namespace_import_its_plugin_once(plugins, install, site):
    import threading
    install("fake-slow", "1", "import time\nimport fastop\n\n@fastop.hookimpl\n"
            "def fastop_register_ops(registry):\n"
            "    time.sleep(0.05)       # the others look it up meanwhile\n"
            "    registry.define('slow::a', inputs=['x'], outputs=['y'], meta=lambda x: x)\n",
            entry_point="slow")
    plugins.load_entry_points(path=[str(site)])
    found, start = [], threading.Barrier(4)

    def look_up():
        start.wait()
        found.append(plugins.registry.get("slow::a"))
    threads = [threading.Thread(target=look_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4 and len({id(op) for op in found}) == 1
    assert [(p.name, p.ops, p.error) for p in plugins.list()] == [("fake-slow", ("slow::a",),
                                                                   None)]


def test_defining_an_op_of_a_declared_namespace_imports_its_plugin_first(plugins, install,
                                                                        op_source, site):
    install("fake-alpha", "1.5", op_source("alpha", "a"), entry_point="alpha")
    plugins.load_entry_points(path=[str(site)])
    with pytest.raises(fastop.ops.DuplicateOpError, match="by fake-alpha 1.5 and by"):
        plugins.registry.define("alpha::a", inputs=["x"], outputs=["y"])


def test_a_plugin_whose_hook_uses_another_namespace_imports_it_with_its_own_ops(
        plugins, install, op_source, site):
    install("fake-alpha", "1", op_source("alpha", "a"), entry_point="alpha")
    install("fake-beta", "1", "import fastop\n\n@fastop.hookimpl\n"
            "def fastop_register_ops(registry):\n"
            "    registry.define('beta::b', inputs=['x'], outputs=['y'], meta=lambda x: x,\n"
            "                    kernels={'*': registry.get('alpha::a').kernels['*']})\n",
            entry_point="beta")
    plugins.load_entry_points(path=[str(site)])
    plugins.registry.get("beta::b")
    assert [(p.name, p.ops) for p in plugins.list()] == [("fake-alpha", ("alpha::a",)),
                                                         ("fake-beta", ("beta::b",))]


def test_ops_outside_the_declared_namespace_are_found_with_a_deprecation_warning(
        plugins, install, op_source, site):
    alpha = install("fake-alpha", "1", op_source("alpha", "a"), entry_point="alpha")
    odd = install("fake-odd", "0.2", op_source("elsewhere", "e"), entry_point="odd")
    plugins.load_entry_points(path=[str(site)])
    with pytest.warns(DeprecationWarning, match=r"fake-odd 0\.2: its entry point 'odd' "
                                                r"declares the op namespace 'odd', but it "
                                                r"defines ops in 'elsewhere'.*"
                                                r"elsewhere = \"fake_plugin_\d+\""):
        op = plugins.registry.get("elsewhere::e")    # a miss imports every recorded plugin
    assert op.plugin == "fake-odd" and imported(alpha, odd) == [alpha, odd]


def test_an_entry_point_name_that_is_no_identifier_is_loaded_by_a_miss(plugins, install,
                                                                      op_source, site):
    install("fake-dashed", "1", op_source("dashed", "d"), entry_point="dashed-ops")
    plugins.load_entry_points(path=[str(site)])
    with pytest.warns(DeprecationWarning, match="'dashed-ops' declares no op namespace"):
        assert "dashed::d" in plugins.registry


def test_a_plugin_failing_on_first_use_is_named_remembered_and_listed(plugins, install, site,
                                                                      tmp_path):
    counter = tmp_path / "imports.txt"
    module = install("broken-dist", "0.1", f"open({str(counter)!r}, 'a').write('x')\n"
                                           "import not_installed_dependency_xyz\n",
                     entry_point="broken")
    plugins.load_entry_points(path=[str(site)])
    assert not counter.exists()
    message = (r"no op namespace 'broken': its plugin broken-dist 0\.1 \(entry point "
               rf"'broken' = '{module}'\) failed to load: ModuleNotFoundError: No module "
               r"named 'not_installed_dependency_xyz'")
    with pytest.warns(PluginLoadWarning, match="broken-dist 0.1 was not loaded"), \
            pytest.raises(fastop.ops.UnknownOpError, match=message) as first:
        plugins.registry.namespace("broken")
    assert isinstance(first.value.__cause__, ModuleNotFoundError)
    with pytest.raises(fastop.ops.UnknownOpError, match=message):   # remembered, not retried
        plugins.registry.namespace("broken")
    with pytest.raises(fastop.ops.UnknownOpError, match=r"unknown op 'broken::x': its plugin "
                                                        r"broken-dist 0\.1"):
        plugins.registry.get("broken::x")
    assert counter.read_text() == "x"
    (info,) = plugins.list()
    assert (info.name, info.entry_point, info.ops, info.error) == (
        "broken-dist", "broken", (), "ModuleNotFoundError: No module named "
                                     "'not_installed_dependency_xyz'")


def test_distributions_declaring_one_namespace_are_imported_together(plugins, install,
                                                                    op_source, site):
    install("fake-one", "1", op_source("shared", "a"), entry_point="shared")
    install("fake-two", "1", "raise ImportError('two broke')\n", entry_point="shared")
    install("fake-three", "1", op_source("shared", "c"), entry_point="shared")
    plugins.load_entry_points(path=[str(site)])
    with pytest.warns(PluginLoadWarning, match="fake-two 1 was not loaded: ImportError: "
                                               "two broke"):
        namespace = plugins.registry.namespace("shared")
    assert (namespace.a.plugin, namespace.c.plugin) == ("fake-one", "fake-three")
    assert sorted((p.name, p.error) for p in plugins.list()) == [
        ("fake-one", None), ("fake-three", None), ("fake-two", "ImportError: two broke")]


def test_strict_mode_imports_every_plugin_at_once_and_a_failure_is_an_error(
        plugins, install, op_source, site, monkeypatch):
    install("fake-alpha", "1", op_source("alpha", "a", fail_after="alpha broke"),
            entry_point="alpha")
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="fake-alpha 1 was not loaded: RuntimeError: "
                                          "alpha broke"):
        plugins.load_entry_points(path=[str(site)])
    assert "alpha::a" not in plugins.registry
    with pytest.raises(fastop.ops.UnknownOpError, match="its plugin fake-alpha 1 .* failed "
                                                        "to load: RuntimeError: alpha broke"):
        plugins.registry.get("alpha::a")


def test_strict_mode_imports_the_good_plugins_at_once(plugins, install, op_source, site,
                                                      monkeypatch):
    modules = [install(f"fake-{ns}", "1", op_source(ns, "a"), entry_point=ns)
               for ns in ("alpha", "beta")]
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", "1")
    plugins.load_entry_points(path=[str(site)])
    assert imported(*modules) == modules


def test_autoload_off_imports_just_the_distribution_declaring_the_namespace(
        plugins, install, op_source, site, monkeypatch):
    alpha = install("fake-alpha", "1.2", op_source("alpha", "a"), entry_point="alpha")
    beta = install("fake-beta", "1", op_source("beta", "b"), entry_point="beta")
    monkeypatch.setenv("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.load_entry_points(path=[str(site)])
    assert plugins.list() == [] and imported(alpha, beta) == []
    with pytest.warns(PluginOnDemandWarning, match=r"importing plugin fake-alpha 1\.2 "
                                                   rf"\(entry point 'alpha' = '{alpha}'\) for "
                                                   r"op namespace 'alpha': FASTOP_DISABLE_PLU"):
        assert plugins.registry.get("alpha::a").plugin == "fake-alpha"
    assert imported(alpha, beta) == [alpha]
    assert [p.name for p in plugins.list()] == ["fake-alpha"]      # a listing imports none
    assert "beta::b" not in plugins.registry                       # nor does `in`
    with pytest.raises(fastop.ops.UnknownOpError, match="no op namespace 'gamma'"):
        plugins.registry.namespace("gamma")
    assert imported(beta) == []


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_only_entry_points_of_the_fastop_group_are_ever_imported(plugins, install, op_source,
                                                                 site, monkeypatch, autoload):
    for name in ("ghost", "ghost_cli"):          # modules named like the looked-up namespace
        (site / f"{name}.py").write_text("raise AssertionError('imported')\n")
    other = site / "ghost_tools-1.0.dist-info"   # an entry point of another group
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-tools\nVersion: 1.0\n")
    (other / "entry_points.txt").write_text("[console_scripts]\nghost = ghost_cli:main\n\n"
                                            "[fastop.extra]\nghost = ghost\n")
    monkeypatch.setenv("FASTOP_DISABLE_PLUGIN_AUTOLOAD", autoload)
    plugins.load_entry_points(path=[str(site)])
    with pytest.raises(fastop.ops.UnknownOpError, match="no op namespace 'ghost'"):
        plugins.registry.namespace("ghost")
    assert "ghost::x" not in plugins.registry
    assert imported("ghost", "ghost_cli") == []


def fake_plugins(where, count, broken=()):
    """`count` installed plugin distributions ``lazy-plugin-<i>`` in `where` (entry point
    ``lazyns<i>``, module ``lazy_plugin_mod_<i>`` defining ``lazyns<i>::ident``), as
    pip installs them; those in `broken` fail to import."""
    for i in range(count):
        fake_distribution(where, f"lazy-plugin-{i}", "1.0",
                          "raise ImportError('lazy plugin broken')\n" if i in broken else
                          op_plugin(f"lazyns{i}", "ident"),
                          entry_point=f"lazyns{i}", module=f"lazy_plugin_mod_{i}")


def run_fresh(code, site, **env):
    """Run `code` in a fresh interpreter with `site` on the path; its stdout as JSON."""
    path = os.pathsep.join([str(site)] + [p for p in sys.path if p])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": path, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_import_fastop_imports_no_installed_plugin(tmp_path):
    fake_plugins(tmp_path, 5, broken={4})
    result, _ = run_fresh("""
        import json, sys, warnings
        import numpy as np
        import fastop
        def plugin_modules():
            return sorted(m for m in sys.modules if m.startswith(("lazy_plugin_mod_",
                                                                  "fastop_activations")))
        at_import = plugin_modules()
        y = fastop.ops.lazyns2.ident(fastop.to_tensor(np.ones(3, "float32")))
        after_use = plugin_modules()
        swish = fastop.ops.activations.swish
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fastop.ops.lazyns4
            except AttributeError as exc:
                error = str(exc)
        listed = {p.name: [list(p.ops), p.error] for p in fastop.plugins.list()}
        print(json.dumps({"at_import": at_import, "after_use": after_use,
                          "sum": float(y.numpy().sum()), "error": error,
                          "warned": [str(w.message) for w in caught], "listed": listed,
                          "all_after_list": plugin_modules()}))
    """, tmp_path, FASTOP_DISABLE_PLUGIN_AUTOLOAD="0")
    assert result["at_import"] == [] and result["sum"] == 3.0
    assert result["after_use"] == ["lazy_plugin_mod_2"]
    assert result["error"] == ("module 'fastop.ops' has no op namespace 'lazyns4': its plugin "
                               "lazy-plugin-4 1.0 (entry point 'lazyns4' = "
                               "'lazy_plugin_mod_4') failed to load: ImportError: lazy plugin "
                               "broken")
    assert any("lazy-plugin-4 1.0 was not loaded" in w for w in result["warned"])
    assert result["listed"]["lazy-plugin-4"] == [[], "ImportError: lazy plugin broken"]
    assert result["listed"]["lazy-plugin-0"] == [["lazyns0::ident"], None]
    assert {f"lazy_plugin_mod_{i}" for i in range(4)} <= set(result["all_after_list"])


@pytest.mark.parametrize("autoload_off", ["1", "0"])
def test_load_program_imports_the_plugin_the_program_needs(tmp_path, autoload_off):
    site, saved = tmp_path / "site", tmp_path / "prog"
    site.mkdir()
    fake_plugins(site, 3)
    run_fresh(f"""
        import json, fastop
        fastop.enable_static()
        main, startup = fastop.static.Program(), fastop.static.Program()
        with fastop.static.program_guard(main, startup):
            x = fastop.static.data(name="x", shape=[None, 2], dtype="float32")
            y = fastop.ops.lazyns1.ident(x)
        fastop.static.save(main, {str(saved)!r})
        print(json.dumps(y.name))
    """, site)
    result, stderr = run_fresh(f"""
        import json, sys
        import numpy as np
        import fastop
        fastop.enable_static()
        prog = fastop.static.load_program({str(saved)!r})
        out = [op.type for op in prog.global_block().ops]
        print(json.dumps({{"ops": out, "imported": sorted(
            m for m in sys.modules if m.startswith("lazy_plugin_mod_"))}}))
    """, site, FASTOP_DISABLE_PLUGIN_AUTOLOAD=autoload_off)
    assert result["imported"] == ["lazy_plugin_mod_1"]
    assert ("PluginOnDemandWarning: fastop is importing plugin lazy-plugin-1 1.0" in stderr) \
        == (autoload_off == "1")


def test_load_program_names_the_plugin_that_failed_to_load(tmp_path):
    site, saved = tmp_path / "site", tmp_path / "prog"
    site.mkdir()
    fake_plugins(site, 2)
    run_fresh(f"""
        import json, fastop
        fastop.enable_static()
        main, startup = fastop.static.Program(), fastop.static.Program()
        with fastop.static.program_guard(main, startup):
            x = fastop.static.data(name="x", shape=[2], dtype="float32")
            fastop.ops.lazyns0.ident(x)
        fastop.static.save(main, {str(saved)!r})
        print(json.dumps(None))
    """, site)
    (site / "lazy_plugin_mod_0.py").write_text("import a_dependency_not_installed_xyz\n")
    result, _ = run_fresh(f"""
        import json, fastop
        try:
            fastop.static.load_program({str(saved)!r})
        except Exception as exc:
            print(json.dumps([type(exc).__name__, str(exc)]))
    """, site)
    assert result[0] == "LoadError"
    assert result[1].endswith(
        "op #0: the program needs op 'lazyns0::ident', provided by lazy-plugin-0 1.0: its "
        "plugin lazy-plugin-0 1.0 (entry point 'lazyns0' = 'lazy_plugin_mod_0') failed to "
        "load: ModuleNotFoundError: No module named 'a_dependency_not_installed_xyz'")


# -- discovery equals importlib.metadata ----------------------------------------------------
def discovered(path):
    return sorted((e.name, e.value, e.dist, e.version) for e in entry_points("fastop", path))


def reference(path=None):
    from importlib.metadata import distributions
    seen, found = set(), []
    for dist in distributions() if path is None else distributions(path=path):
        key = dist.metadata["Name"].lower().replace("-", "_")
        if key not in seen:
            seen.add(key)
            found += [(e.name, e.value, dist.metadata["Name"], dist.version)
                      for e in dist.entry_points if e.group == "fastop"]
    return sorted(found)


def test_discovery_matches_importlib_metadata_on_the_test_environment():
    from importlib.metadata import entry_points as metadata_entry_points
    assert discovered(None) == reference()
    assert {e.dist.name for e in metadata_entry_points(group="fastop")} == \
        {e.dist for e in entry_points("fastop")}


def test_discovery_reads_zip_archives_through_importlib_metadata(tmp_path):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_plugin-1.5.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: zipped-plugin\nVersion: 1.5\n")
        z.writestr("zipped_plugin-1.5.dist-info/entry_points.txt",
                   "[fastop]\nzipped = zipped_mod\n")
    (tmp_path / "plain").mkdir()
    path = [str(tmp_path / "plain"), str(archive)]
    assert discovered(path) == reference(path) == [("zipped", "zipped_mod", "zipped-plugin",
                                                    "1.5")]


def test_the_first_of_two_installs_of_a_distribution_wins(tmp_path):
    for where, version in (("a", "1.0"), ("b", "2.0")):
        (tmp_path / where).mkdir()
        fake = tmp_path / where / f"Dup_Dist-{version}.dist-info"
        fake.mkdir()
        (fake / "METADATA").write_text(f"Name: dup-dist\nVersion: {version}\n")
        (fake / "entry_points.txt").write_text(f"[fastop]\ndup = dup_{where}\n")
    path = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert discovered(path) == reference(path) == [("dup", "dup_a", "dup-dist", "1.0")]


def test_an_editable_install_is_discovered_and_loaded(tmp_path):
    """pip's editable install (a .pth plus .dist-info in site-packages), in a fresh
    process: found by both discoveries, and its ops are registered."""
    project = tmp_path / "editable_plugin"
    (project / "src" / "editable_ops").mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "fastop-editable-demo"
        version = "0.7"
        [project.entry-points.fastop]
        editable = "editable_ops.plugin"
        [tool.setuptools.packages.find]
        where = ["src"]
    """))
    (project / "src" / "editable_ops" / "__init__.py").write_text("")
    (project / "src" / "editable_ops" / "plugin.py").write_text(
        "import fastop\n\n@fastop.hookimpl\ndef fastop_register_ops(registry):\n"
        "    registry.define('editable::ident', inputs=['x'], outputs=['y'],"
        " meta=lambda x: x, kernels={'*': lambda x: x})\n")
    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--prefix", str(prefix),
                    "--editable", str(project)], check=True, capture_output=True,
                   timeout=300)
    site_packages = next(prefix.glob("lib/python*/site-packages"))
    probe = textwrap.dedent(f"""
        import json, site
        site.addsitedir({str(site_packages)!r})
        import fastop
        from importlib.metadata import entry_points
        print(json.dumps({{
            "ours": sorted([e.name, e.value, e.dist, e.version]
                           for e in fastop.plugins.entry_points()),
            "importlib": sorted([e.name, e.value, e.dist.name, e.dist.version]
                                for e in entry_points(group="fastop")),
            "loaded": [p.name for p in fastop.plugins.list()],
            "registered": "editable::ident" in fastop.ops.registry}}))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in sys.path if p)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ours"] == result["importlib"]
    assert ["editable", "editable_ops.plugin", "fastop-editable-demo", "0.7"] in result["ours"]
    assert "fastop-editable-demo" in result["loaded"] and result["registered"]


def test_entry_point_load_follows_attribute_path():
    import numpy as np
    assert EntryPoint("x", "numpy.linalg:norm", "numpy", "1").load() is np.linalg.norm
    assert EntryPoint("x", "numpy [extra]", "numpy", "1").load() is np


def test_the_missing_namespace_of_a_plugin_that_failed_says_so_and_why(plugins):
    """Issue 26: once a plugin failed to load, looking up its namespace says that it
    failed and why, not only that the namespace does not exist."""
    registry = plugins.registry
    with pytest.raises(AttributeError) as plain:
        registry.namespace("mine")
    assert "failed" not in str(plain.value)           # no plugin failed yet: no note
    with pytest.warns(PluginLoadWarning):
        plugins.register(plugin_module(fastop_register_ops=defining("mine::a", then=boom)),
                         "fastop-mine", "0.3")
    with pytest.raises(AttributeError, match=r"no op namespace 'mine': a plugin "
                                             r"failed to load, which may be where it comes "
                                             r"from: fastop-mine 0\.3 \(RuntimeError: boom "
                                             r"halfway\)"):
        registry.namespace("mine")
    with pytest.raises(fastop.ops.UnknownOpError, match=r"unknown op 'mine::a'.*fastop-mine "
                                                       r"0\.3 \(RuntimeError: boom halfway\)"):
        registry.get("mine::a")


def test_fastop_ops_names_the_failed_plugin_of_a_missing_namespace(tmp_path,
                                                                    restore_global_plugins):
    (tmp_path / "mine_ops.py").write_text("import fastop\nfastop_register_ops = 1\n"
                                          "import no_such_module_for_fastop_tests\n")
    with pytest.warns(PluginLoadWarning):
        fastop.plugins.load_directory(tmp_path)
    sys.modules.pop("mine_ops", None)
    with pytest.raises(AttributeError, match=r"module 'fastop.ops' has no op namespace "
                                             r"'mine': a plugin failed to "
                                             r"load.*module mine_ops in directory .*"
                                             r"ModuleNotFoundError: No module named "
                                             r"'no_such_module_for_fastop_tests'"):
        fastop.ops.mine
