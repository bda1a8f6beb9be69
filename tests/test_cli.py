"""``python -m fastop``: --version, ``ops`` (listing and plugin attribution), ``bench``."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastop
from fastop import cli
from fastop.ops import registry


@pytest.fixture
def test_ops():
    """Two ops of a fake distribution, one with a Python backward kernel."""
    with registry.providing("fake-dist", "9.9") as reg:
        op = reg.define("clitest::scale", inputs=["x", "bias?"], outputs=["y"],
                        attrs={"factor": 2.0, "mode": str}, doc="Scale x.\nMore text.")
        op.meta(lambda x, bias, factor, mode: x)
        op.kernel("float32", "float64")(lambda x, bias, factor, mode: x * factor)
        op.grad_kernel(needs=["dy"])(lambda dy, factor, mode: dy * factor)
    yield op
    for name in ("clitest::scale", "clitest::scale_grad"):
        registry.remove(name)


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastop {fastop.__version__}"


def test_ops_json_describes_every_op(capsys, test_ops):
    code, out, _ = run_cli(capsys, "ops", "--json")
    assert code == 0
    data = json.loads(out)
    assert [op["name"] for op in data["ops"]] == [op.name for op in registry]
    assert data["plugins"][0]["name"] == "fastop"      # the built-in plugin first
    info = next(op for op in data["ops"] if op["name"] == "clitest::scale")
    assert info == {
        "name": "clitest::scale", "plugin": "fake-dist", "version": "9.9",
        "inputs": ["x", "bias?"], "outputs": ["y"],
        "attrs": [{"name": "factor", "type": "float", "default": 2.0},
                  {"name": "mode", "type": "str"}],
        "dtypes": ["float32", "float64"], "kernels": ["python"],
        "gradient": "kernel clitest::scale_grad", "doc": "Scale x."}
    grad = next(op for op in data["ops"] if op["name"] == "clitest::scale_grad")
    assert grad["gradient"] is None and grad["inputs"] == ["dy"]


def test_ops_text_groups_by_plugin(capsys, test_ops):
    code, out, _ = run_cli(capsys, "ops")
    assert code == 0
    assert out.startswith(f"fastop {fastop.__version__}: ")
    lines = out[out.index("fake-dist 9.9: 2 ops (defined outside a plugin)"):].splitlines()
    assert lines[1:5] == [
        "  clitest::scale(x, bias?, factor=2.0, mode) -> y",
        "      float32 float64; python kernel; gradient: kernel clitest::scale_grad — Scale x.",
        "  clitest::scale_grad(dy, factor=2.0, mode) -> dx, dbias",
        "      any dtype; python kernel; no gradient — Backward kernel of clitest::scale."]
    assert out.rstrip().endswith(f"{len(registry)} ops from "
                                 f"{len({o.plugin for o in registry})} distributions")


def test_ops_namespace_filter(capsys, test_ops):
    code, out, _ = run_cli(capsys, "ops", "--namespace", "clitest", "--json")
    assert code == 0
    assert [op["name"] for op in json.loads(out)["ops"]] == ["clitest::scale",
                                                             "clitest::scale_grad"]
    code, _, err = run_cli(capsys, "ops", "--namespace", "clitst")
    assert code == 2 and "did you mean 'clitest'" in err


def test_ops_marks_cython_kernels(capsys):
    code, out, _ = run_cli(capsys, "ops", "--json", "--namespace", "fastop")
    assert code == 0
    kinds = {op["name"]: op["kernels"] for op in json.loads(out)["ops"]}
    assert kinds["fastop::matmul"] == ["cython"]


def test_bench_usage_error_returns_2(capsys, tmp_path):
    code, _, err = run_cli(capsys, "bench", "--dir", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--threads", "1,x"])
    assert exit_info.value.code == 2
    assert "expected thread counts like '1,2', got '1,x'" in capsys.readouterr().err


def test_bench_names_the_package_it_misses(capsys, monkeypatch):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "matplotlib" else find_spec(name, *args))
    code, _, err = run_cli(capsys, "bench", "--quick", "--plot", "ratios.png")
    assert code == 2 and err.strip() == ("fastop bench: error: needs matplotlib: "
                                         "pip install matplotlib")


def test_bench_without_a_harness_says_where_it_looked(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fastop, "__file__", str(tmp_path / "site" / "fastop" / "__init__.py"))
    code, _, err = run_cli(capsys, "bench", "--dir", str(tmp_path))
    assert code == 2 and f"no harness.py in {tmp_path}, benchmarks" in err
    assert "pass --dir (its benchmarks/ directory)" in err


def test_ops_does_not_import_the_benchmark_harness():
    """``bench`` imports the harness (and pyperf, tqdm, matplotlib) only when it runs."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "fastop", "ops"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "fastop.cli" in imported
    assert not {"fastop_bench_harness", "pyperf", "tqdm", "matplotlib"} & imported


# -- plugin discovery, through the command line in a fresh process ----------------------
def fake_distribution(site, dist, version, module, source):
    """An installed distribution: a module plus its .dist-info with a fastop entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n"
                                   f"Version: {version}\n\nA fake plugin.\n")
    (info / "entry_points.txt").write_text(f"[console_scripts]\nx = y:z\n\n"
                                           f"[fastop]\nplug = {module}\n")


def run_module(site, *argv, **env):
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "fastop", *argv], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path, **env})


def test_ops_lists_installed_plugins_with_distribution_and_version(tmp_path):
    fake_distribution(tmp_path, "fake-plug", "1.2.3", "fake_plug_mod", """
        import fastop

        @fastop.hookimpl
        def fastop_register_ops(registry):
            op = registry.define("fakeplug::double", inputs=["x"], outputs=["y"])
            op.meta(lambda x: x)
            op.kernel()(lambda x: 2 * x)
    """)
    fake_distribution(tmp_path, "broken-plug", "0.0.1", "broken_plug_mod",
                      "raise ImportError('missing dependency')\n")
    proc = run_module(tmp_path, "ops", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    op = next(op for op in data["ops"] if op["name"] == "fakeplug::double")
    assert (op["plugin"], op["version"], op["dtypes"]) == ("fake-plug", "1.2.3", ["*"])
    assert {"name": "fake-plug", "version": "1.2.3", "module": "fake_plug_mod",
            "entry_point": "plug", "directory": None,
            "ops": ["fakeplug::double"]} in data["plugins"]
    assert "broken-plug 0.0.1 was not loaded: ImportError: missing dependency" in proc.stderr

    off = run_module(tmp_path, "ops", "--json", FASTOP_DISABLE_PLUGIN_AUTOLOAD="1")
    assert "fakeplug::double" not in [o["name"] for o in json.loads(off.stdout)["ops"]]


def test_ops_listing_into_a_closed_pipe_exits_quietly():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "fastop", "ops"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()   # the reader is gone before fastop writes (import takes longer)
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
