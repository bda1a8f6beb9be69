"""fastop.plugins.load_directory: op modules from a plain directory (OneFlow's
``custom_op_module``), attributed to the directory, isolated like installed plugins, and
loaded again by a saved Program in a fresh process."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastop
from fastop.ops._sources import DirectorySource
from fastop.plugins import PluginError, PluginLoadWarning, load_directory

pytestmark = pytest.mark.usefixtures("restore_global_plugins")

RELU = """
    import numpy as np
    import fastop

    __version__ = "0.4"


    @fastop.hookimpl
    def fastop_register_ops(registry):
        forward = registry.define("{ns}::user_relu", inputs=["x"], outputs=["y"],
                                  meta=lambda x: x)

        @forward.kernel("float32", "float64")
        def user_relu(x):
            return (x > 0) * x

        @forward.grad_kernel(needs=["y", "dy"])
        def user_relu_backward(y, dy):
            return (y > 0) * dy
"""


@pytest.fixture
def op_dir(tmp_path, monkeypatch):
    """A directory of op modules; module names unique to the test."""
    monkeypatch.delenv("FASTOP_STRICT_PLUGINS", raising=False)
    directory = tmp_path / "user_relu"
    directory.mkdir()
    before = set(sys.modules)
    yield directory
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(directory, name, source):
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


def unique(request):
    return "dir_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")


def test_ops_are_registered_and_attributed_to_the_directory(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns=ns))
    (info,) = load_directory(op_dir)
    real = os.path.realpath(op_dir)
    assert (info.name, info.version, info.module, info.entry_point, info.directory) == \
        (real, "0.4", f"{ns}_ops", None, real)
    assert info.ops == (f"{ns}::user_relu", f"{ns}::user_relu_grad")
    op = getattr(getattr(fastop.ops, ns), "user_relu")
    assert (op.plugin, op.version) == (real, "0.4")
    # the origin a saved Program records, carried on each op the module defined
    for name in info.ops:
        assert fastop.ops.registry.get(name).source == DirectorySource(real, f"{ns}_ops")
    x = fastop.to_tensor(np.array([-2.0, -1.0, 0.0, 1.0, 2.0]), stop_gradient=False)
    y = op(x)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), [0, 0, 0, 1, 2])
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0, 1, 1])
    assert info in fastop.plugins.list()


def test_loading_the_same_directory_again_is_a_no_op(op_dir, request, recwarn):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns=ns))
    first = load_directory(op_dir)
    version = fastop.ops.registry.version
    assert load_directory(str(op_dir) + os.sep) == first
    assert fastop.ops.registry.version == version and not recwarn.list


def test_version_is_empty_without_dunder_version_and_helpers_are_not_imported(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns=ns).replace('__version__ = "0.4"', ""))
    write(op_dir, "setup_script", "raise SystemExit('a script must not be imported')\n")
    (info,) = load_directory(op_dir)
    assert info.version == "" and "setup_script" not in sys.modules


def test_modules_of_the_directory_import_each_other(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_helpers", "def double(x):\n    return 2 * x\n")
    write(op_dir, f"{ns}_ops", f"""
        import fastop
        from {ns}_helpers import double

        @fastop.hookimpl
        def fastop_register_ops(registry):
            registry.define("{ns}::twice", inputs=["x"], outputs=["y"], meta=lambda x: x,
                            kernels={{"*": double}})
    """)
    load_directory(op_dir)
    out = getattr(fastop.ops, ns).twice(fastop.to_tensor(np.arange(3.0)))
    np.testing.assert_array_equal(out.numpy(), [0, 2, 4])


def test_a_broken_module_is_skipped_named_and_retried(op_dir, request, monkeypatch):
    ns = unique(request)
    write(op_dir, f"{ns}_good", RELU.format(ns=ns))
    write(op_dir, f"{ns}_bad", "import fastop\nfastop_register_ops = 1\n"
                               "raise ImportError('no such dependency')\n")
    with pytest.warns(PluginLoadWarning, match=rf"module {ns}_bad in directory "
                                               rf".*user_relu was not loaded: ImportError: "
                                               rf"no such dependency"):
        infos = load_directory(op_dir)
    assert [i.module for i in infos] == [f"{ns}_good"]
    write(op_dir, f"{ns}_bad", f"""
        import fastop

        @fastop.hookimpl
        def fastop_register_ops(registry):
            registry.define("{ns}::fixed", inputs=["x"], outputs=["y"], meta=lambda x: x)
    """)
    assert [i.module for i in load_directory(op_dir)] == [f"{ns}_bad", f"{ns}_good"]
    assert f"{ns}::fixed" in fastop.ops.registry


def test_a_hook_failing_halfway_leaves_nothing_and_strict_mode_raises(op_dir, request,
                                                                      monkeypatch):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", f"""
        import fastop

        @fastop.hookimpl
        def fastop_register_ops(registry):
            registry.define("{ns}::first", inputs=["x"], outputs=["y"], meta=lambda x: x)
            raise ValueError("second op is wrong")
    """)
    monkeypatch.setenv("FASTOP_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="second op is wrong"):
        load_directory(op_dir)
    assert f"{ns}::first" not in fastop.ops.registry


def test_a_clash_with_an_installed_plugin_names_both(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns="activations").replace("user_relu", "swish"))
    with pytest.warns(PluginLoadWarning, match=r"op 'activations::swish' is defined twice: "
                                               r"by fastop-activations 0\.1\.0 and by "
                                               r".*user_relu 0\.4"):
        assert load_directory(op_dir) == []
    assert fastop.ops.activations.swish.plugin == "fastop-activations"


def test_a_module_named_like_another_module_never_replaces_it(op_dir, request):
    """A directory module is imported under a private name: `import json` and
    `import colorsys` (not yet imported) stay the standard library's."""
    import json
    ns = unique(request)
    sys.modules.pop("colorsys", None)
    for name in ("json", "colorsys"):
        write(op_dir, name, f"import fastop\n\n@fastop.hookimpl\n"
                            f"def fastop_register_ops(registry):\n"
                            f"    registry.define('{ns}::{name}_op', inputs=['x'], "
                            f"outputs=['y'], meta=lambda x: x)\n")
    infos = load_directory(op_dir)
    assert sorted(i.module for i in infos) == ["colorsys", "json"]
    assert f"{ns}::colorsys_op" in fastop.ops.registry
    assert sys.modules["json"] is json
    import colorsys
    assert colorsys.__file__ != str(op_dir / "colorsys.py") and hasattr(colorsys, "rgb_to_hsv")
    private = [n for n, m in sys.modules.items()
               if getattr(m, "__file__", None) == os.path.join(os.path.realpath(op_dir),
                                                                 "colorsys.py")]
    assert len(private) == 1 and private[0].startswith("fastop_directory_ops.")
    assert private[0].endswith(".colorsys")


def test_ctrl_c_in_a_hook_rolls_the_module_back_and_propagates(op_dir, request, recwarn):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", f"""
        import fastop
        interrupted = []

        @fastop.hookimpl
        def fastop_register_ops(registry):
            registry.define("{ns}::first", inputs=["x"], outputs=["y"], meta=lambda x: x)
            if not interrupted:
                interrupted.append(True)
                raise KeyboardInterrupt
            registry.define("{ns}::second", inputs=["x"], outputs=["y"], meta=lambda x: x)
    """)
    with pytest.raises(KeyboardInterrupt):
        load_directory(op_dir)
    assert f"{ns}::first" not in fastop.ops.registry
    assert not any(i.directory == os.path.realpath(op_dir) for i in fastop.plugins.list())
    (info,) = load_directory(op_dir)
    assert info.ops == (f"{ns}::first", f"{ns}::second") and not recwarn.list


def test_entries_that_are_not_regular_files_are_skipped_naming_them(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns=ns))
    (op_dir / "sub_ops.py").mkdir()
    (op_dir / "dangling_ops.py").symlink_to(op_dir / "nowhere.py")
    with pytest.warns(PluginLoadWarning) as caught:
        (info,) = load_directory(op_dir)
    assert info.module == f"{ns}_ops"
    messages = " | ".join(str(w.message) for w in caught)
    assert "sub_ops.py" in messages and "IsADirectoryError" in messages
    assert "dangling_ops.py" in messages and "FileNotFoundError" in messages


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_like_a_module_is_skipped_not_waited_on(op_dir, request):
    ns = unique(request)
    write(op_dir, f"{ns}_ops", RELU.format(ns=ns))
    os.mkfifo(op_dir / "x.py")
    script = textwrap.dedent(f"""
        import warnings, fastop
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            infos = fastop.plugins.load_directory({str(op_dir)!r})
        print([i.module for i in infos])
        print(" | ".join(str(w.message) for w in caught))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in sys.path if p)})
    assert proc.returncode == 0, proc.stderr
    modules, messages = proc.stdout.splitlines()
    assert modules == f"['{ns}_ops']"
    assert f"skipped {os.path.realpath(op_dir)}/x.py" in messages and "FIFO" in messages


def test_bad_directories_are_errors(op_dir, tmp_path):
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        load_directory(tmp_path / "missing")
    write(op_dir, "helpers", "x = 1\n")
    with pytest.raises(PluginError, match="no module in .* implements fastop_register_ops"):
        load_directory(op_dir)


# -- saved Programs load the directory again -----------------------------------------------------
def save_program(op, model_path):
    fastop.enable_static()
    try:
        main, startup = fastop.static.Program(), fastop.static.Program()
        with fastop.static.program_guard(main, startup):
            x = fastop.static.data("x", [None, 3], "float32")
            y = op(x) * 2.0
        with pytest.warns(UserWarning, match=r"allowed_modules=\['\w+_ops'\]"):
            fastop.static.save(main, str(model_path))
    finally:
        fastop.disable_static()
    return y.name


RUN_SAVED = """
import sys, numpy as np, fastop
if sys.argv[3] != "-":
    fastop.plugins.load_directory(sys.argv[3])
fastop.enable_static()
program = fastop.static.load_program(sys.argv[1], allowed_modules=sys.argv[4:])
out, = fastop.static.Executor(fastop.CPUPlace()).run(
    program, feed={"x": np.array([[-1.0, 0.5, 2.0]], "float32")}, fetch_list=[sys.argv[2]])
print(out.tolist())
"""


def run_saved(model_path, fetch, preload=None, allowed_modules=()):
    """Load and run the saved program in a fresh process (after load_directory of
    `preload`, if given; with `allowed_modules`)."""
    return subprocess.run([sys.executable, "-c", RUN_SAVED, str(model_path), fetch,
                           str(preload or "-"), *allowed_modules],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in sys.path if p)})


# importing the module leaves a mark: refused loads must import nothing
MARKING = RELU + """
    with open(__file__ + ".imported", "a") as mark:
        mark.write("imported\\n")
"""


def saved_with_directory_op(op_dir, ns, tmp_path):
    """A program saved with {ns}::user_relu from `op_dir`; (model path, fetch name)."""
    write(op_dir, f"{ns}_ops", MARKING.format(ns=ns))
    load_directory(op_dir)
    (op_dir / f"{ns}_ops.py.imported").unlink()
    return tmp_path / "model", save_program(getattr(fastop.ops, ns).user_relu,
                                            tmp_path / "model")


def test_a_saved_program_records_the_module_and_refuses_to_import_it_unasked(op_dir, request,
                                                                             tmp_path):
    ns = unique(request)
    model, fetch = saved_with_directory_op(op_dir, ns, tmp_path)
    record = json.loads((tmp_path / "model.program.json").read_text())["ops"][0]
    assert record["source"] == {"directory": os.path.realpath(op_dir),
                                "module": f"{ns}_ops"}
    proc = run_saved(model, fetch)
    assert proc.returncode != 0
    real = os.path.realpath(op_dir)
    assert (f"fastop.plugins._manager.UntrustedOpModuleError: static.load_program: cannot "
            f"read '{model}.program.json': op #0: the program needs op "
            f"'{ns}::user_relu' from module '{ns}_ops' in directory '{real}': loading it "
            f"imports {os.path.join(real, ns + '_ops.py')}, which runs its code. If you "
            f"trust it, pass allowed_modules=['{ns}_ops'] (or trust_code=True to allow any "
            f"module), or load the directory first with "
            f"fastop.plugins.load_directory({real!r})") in proc.stderr
    assert not (op_dir / f"{ns}_ops.py.imported").exists()
    proc = run_saved(model, fetch, allowed_modules=[f"{ns}_ops"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[0.0, 1.0, 4.0]]
    assert (op_dir / f"{ns}_ops.py.imported").read_text() == "imported\n"   # once


def test_a_saved_program_runs_in_a_fresh_process_that_loaded_the_directory(op_dir, request,
                                                                            tmp_path):
    ns = unique(request)
    model, fetch = saved_with_directory_op(op_dir, ns, tmp_path)
    proc = run_saved(model, fetch, op_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[0.0, 1.0, 4.0]]
    assert (op_dir / f"{ns}_ops.py.imported").read_text() == "imported\n"   # once


def test_the_recorded_module_is_imported_only_when_the_allow_list_accepts_it(op_dir, request):
    """What load_program does with a recorded source, under its allowed_modules."""
    ns = unique(request)
    write(op_dir, f"{ns}_ops", MARKING.format(ns=ns))
    source = {"directory": str(op_dir), "module": f"{ns}_ops"}
    manager = fastop.plugins.manager
    for allows in (None, lambda module: module == "numpy", lambda module: False):
        with pytest.raises(fastop.plugins.UntrustedOpModuleError,
                           match=rf"pass allowed_modules=\['{ns}_ops'\] \(or trust_code=True"):
            manager.load_directory_source(f"{ns}::user_relu", source, allows)
    assert not (op_dir / f"{ns}_ops.py.imported").exists()
    assert f"{ns}_ops" not in sys.modules and f"{ns}::user_relu" not in fastop.ops.registry
    asked = []
    op = manager.load_directory_source(f"{ns}::user_relu", source,
                                       lambda module: asked.append(module) or True)
    assert asked == [f"{ns}_ops"] and op is fastop.ops.registry.get(f"{ns}::user_relu")
    np.testing.assert_array_equal(op(fastop.to_tensor(np.array([-1.0, 2.0]))).numpy(), [0, 2])
    with pytest.raises(ValueError, match=rf"the program needs op '{ns}::other' from module "
                                         rf"'{ns}_ops' .* but the module does not define it"):
        manager.load_directory_source(f"{ns}::other", source, lambda module: True)


def test_a_saved_program_whose_module_is_gone_or_broken_names_it(op_dir, request, tmp_path):
    ns = unique(request)
    model, fetch = saved_with_directory_op(op_dir, ns, tmp_path)
    (op_dir / f"{ns}_ops.py").rename(op_dir / "renamed.py")
    proc = run_saved(model, fetch)
    assert proc.returncode != 0
    assert f"the program needs op '{ns}::user_relu' from module '{ns}_ops' in directory " \
           f"'{os.path.realpath(op_dir)}', but that module is not there" in proc.stderr
    write(op_dir, f"{ns}_broken", "raise ImportError('broken on purpose')\n"
                                  "fastop_register_ops = None\n")
    source = {"directory": str(op_dir), "module": f"{ns}_broken"}
    with pytest.raises(ValueError, match=rf"from module '{ns}_broken' in directory .* could "
                                         rf"not be loaded: .*broken on purpose"):
        fastop.plugins.manager.load_directory_source(f"{ns}::lost", source,
                                                     lambda module: True)
