"""``python -m fastop``: --version, ``ops`` (listing and plugin attribution), ``bench``,
``profile``."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
    code, out, _ = run_cli(capsys, "ops", "--json", "--namespace", "activations")
    data = json.loads(out)               # the plugins listed are that namespace's only
    assert data["namespace"] == "activations"
    assert {op["name"].split("::")[0] for op in data["ops"]} == {"activations"}
    assert [p["name"] for p in data["plugins"]] == ["fastop-activations"]
    assert sorted(data["plugins"][0]["ops"]) == [op["name"] for op in data["ops"]]
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
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site" / "fastop" / "cli.py"))
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
            "ops": ["fakeplug::double"], "error": None} in data["plugins"]
    assert {"name": "broken-plug", "version": "0.0.1", "module": "broken_plug_mod",
            "entry_point": "plug", "directory": None, "ops": [],
            "error": "ImportError: missing dependency"} in data["plugins"]
    assert "broken-plug 0.0.1 was not loaded: ImportError: missing dependency" in proc.stderr
    text = run_module(tmp_path, "ops")
    assert "broken-plug 0.0.1: failed to load (ImportError: missing dependency)" in \
        text.stdout.splitlines()

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


# -- profile ---------------------------------------------------------------------------
PROFILED_SCRIPT = """
import sys
import fastop
print("argv", sys.argv[1:])
x = fastop.ones([3])
for _ in range(int(sys.argv[1])):
    x = fastop.tanh(x)
sys.exit(int(sys.argv[2]))
"""


def run_profile(*argv, cwd, umask=None):
    """``python -m fastop profile ARGV`` in `cwd` (where the trace goes by default)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    return subprocess.run([sys.executable, "-m", "fastop", "profile", *argv],
                          capture_output=True, text=True, env=env, timeout=300, cwd=cwd,
                          preexec_fn=None if umask is None else lambda: os.umask(umask))


def test_profile_runs_the_script_and_prints_the_time_per_op(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(PROFILED_SCRIPT)
    trace = tmp_path / "trace.json"
    proc = run_profile(str(script), "7", "3", "--out", str(trace), "--sort", "calls",
                       cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr            # the script's exit code
    out = proc.stdout
    assert out.startswith("argv ['7', '3']\n")         # the script's own argv
    row = next(line for line in out.splitlines() if line.startswith("fastop::tanh"))
    assert row.split()[1] == "7"
    assert "fastop profiler: " in out and f"trace written to {trace}" in proc.stderr
    names = [e["name"] for e in json.loads(trace.read_text())["traceEvents"]]
    assert names.count("fastop::tanh") == 7


def test_profile_options_before_the_script_and_arguments_after_a_double_dash(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(PROFILED_SCRIPT.replace("sys.exit(int(sys.argv[2]))", ""))
    proc = run_profile("--group", "plugin", str(script), "2", "--", "--out", "x",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("argv ['2', '--out', 'x']\n")
    assert "\nPlugin " in proc.stdout and not (tmp_path / "x").exists()


def test_profile_splits_its_options_from_the_scripts():
    split = cli._split_profile_argv
    assert split(["--epochs", "3", "--out", "t.json", "--rows=5", "-q"]) == \
        (["--out", "t.json", "--rows=5"], ["--epochs", "3", "-q"])
    assert split(["a", "--", "--out", "b"]) == ([], ["a", "--out", "b"])
    assert split(["--steps", "5:20", "x", "--no-trace", "--sample-ms=2", "-v"]) == \
        (["--steps", "5:20", "--no-trace", "--sample-ms=2"], ["x", "-v"])


def test_profile_reports_a_failing_script_and_still_summarizes(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import fastop\nfastop.tanh(fastop.ones([2]))\nraise KeyError('boom')\n")
    proc = run_profile(str(script), cwd=tmp_path)
    assert proc.returncode == 1
    assert "KeyError: 'boom'" in proc.stderr and "fastop::tanh" in proc.stdout


def test_profile_out_in_a_missing_directory_is_one_line_naming_it(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(PROFILED_SCRIPT)
    out = tmp_path / "missing" / "dir" / "t.json"
    proc = run_profile("--out", str(out), str(script), "1", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"fastop profile: error: --out {str(out)!r}: directory "
                           f"{str(out.parent)!r} does not exist\n")
    assert "argv" not in proc.stdout                    # the script did not run for nothing


def test_profile_usage_errors(capsys, tmp_path):
    code, _, err = run_cli(capsys, "profile", str(tmp_path / "missing.py"))
    assert code == 2 and "no such script" in err
    with pytest.raises(SystemExit) as info:
        cli.main(["profile", str(tmp_path / "missing.py"), "--sort", "fastest"])
    assert info.value.code == 2
    assert "invalid choice: 'fastest'" in capsys.readouterr().err


def test_profile_on_the_cnn_example_names_the_vision_plugin(tmp_path):
    pytest.importorskip("fastop_vision")
    pytest.importorskip("sklearn")
    example = Path(__file__).resolve().parents[1] / "examples" / "train_digits_cnn.py"
    if not example.is_file():
        pytest.skip("no examples/ next to tests/")
    proc = run_profile(str(example), "--epochs", "1", "--quiet", "--group", "plugin",
                       "--out", str(tmp_path / "cnn.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] in (["fastop-vision"], ["fastop"])}
    assert float(rows["fastop-vision"][-1]) > 90          # its kernels are numpy code
    assert (tmp_path / "cnn.json").stat().st_size > 0


def test_profile_does_not_import_the_benchmark_harness(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import fastop\nfastop.tanh(fastop.ones([2]))\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "fastop", "profile",
                           str(script)], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "fastop.profiler" in imported
    assert not {"fastop_bench_harness", "pyperf", "tqdm", "matplotlib"} & imported


# -- profile: the whole script (issue 26) -------------------------------------------------
SLOW_IMPORT = """
import time
start = time.perf_counter()
while time.perf_counter() - start < 0.4:     # a slow import, like sklearn's
    pass
"""

WHOLE_SCRIPT = """
import time
import fastop
import slow_dep


def prepare_batch():
    start = time.perf_counter()
    total = 0
    while time.perf_counter() - start < 0.4:  # the script's own Python loop
        total += 1
    return total


x = fastop.ones([8, 8])
prepare_batch()
for _ in range(3):
    x = fastop.tanh(x @ x)
"""


def test_profile_names_the_time_outside_ops_and_samples_where_it_went(tmp_path):
    (tmp_path / "slow_dep.py").write_text(SLOW_IMPORT)
    (tmp_path / "train.py").write_text(WHOLE_SCRIPT)
    proc = run_profile("train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    row = next(line for line in out.splitlines() if line.startswith("outside fastop ops"))
    assert float(row.split()[-2]) > 90                    # Self %: nearly all the run
    assert "outside fastop ops" in out.splitlines()[1]    # the headline says so too
    assert "the Python between the ops" in out
    section = out[out.index("Where the "):]
    rows = {line.split()[0] if not line.startswith("import ") else " ".join(
        line.split()[:2]): line.split() for line in section.splitlines()[4:]
        if line and not line.startswith("-")}
    for function in ("import slow_dep", "prepare_batch"):   # each about half of it
        assert 20 < float(rows[function][-2]) < 80, section
        assert rows[function][-1].startswith(("slow_dep.py:", "train.py:"))
    assert float(rows["train.py"][-2]) == 100.0           # the script is the root
    trace = json.loads((tmp_path / "train.trace.json").read_text())
    sampled = [e for e in trace["traceEvents"] if e.get("cat") == "python (sampled)"]
    names = {e["name"] for e in sampled}
    assert {"train.py", "import slow_dep", "prepare_batch"} <= names
    assert not names & {"run_path", "_run_script", "cmd_profile"}   # the launcher left out
    track = next(e for e in trace["traceEvents"] if e["name"] == "thread_name"
                 and e["tid"] == sampled[0]["tid"])
    assert track["args"]["name"] == "MainThread: Python stack (sampled every 5 ms)"
    root = next(e for e in sampled if e["name"] == "train.py")
    for e in sampled:                                     # nested in the script's span
        assert root["ts"] <= e["ts"] and e["ts"] + e["dur"] <= root["ts"] + root["dur"] + 1e-3


def test_profile_names_the_trace_after_the_script_with_the_users_umask(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(PROFILED_SCRIPT.replace("sys.exit(int(sys.argv[2]))", ""))
    run = tmp_path / "run"
    run.mkdir()
    proc = run_profile(str(script), "2", cwd=run, umask=0o027)
    assert proc.returncode == 0, proc.stderr
    trace = run / "work.trace.json"
    assert f"trace written to work.trace.json" in proc.stderr
    assert os.stat(trace).st_mode & 0o777 == 0o640       # 0o666 less the umask, not 0600
    assert os.listdir(run) == ["work.trace.json"]         # no temporary left
    meta = json.loads(trace.read_text())["traceEvents"][0]
    assert meta["args"]["name"] == "fastop (work.py)"     # not fastop's __main__.py
    proc = run_profile("--out", str(tmp_path), str(script), "1", cwd=run, umask=0o002)
    assert os.stat(tmp_path / "work.trace.json").st_mode & 0o777 == 0o664  # a directory
    proc = run_profile("--no-trace", str(script), "1", cwd=tmp_path / "run")
    assert proc.returncode == 0 and "trace written" not in proc.stderr


STEPPED_SCRIPT = """
import numpy as np
import fastop
from fastop import nn
layer = nn.Linear(4, 2)
opt = fastop.optimizer.SGD(0.1, parameters=layer.parameters())
x = fastop.to_tensor(np.ones((3, 4), "float32"))
for _ in range(10):
    layer(x).sum().backward()
    opt.step()
    opt.clear_grad()
"""


def test_profile_steps_selects_the_steady_state_steps(tmp_path):
    (tmp_path / "fit.py").write_text(STEPPED_SCRIPT)
    proc = run_profile("fit.py", "--steps", "3:6", "--no-trace", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line and not line.startswith((" ", "-"))}
    assert rows["ProfileStep"][1] == "3"                  # steps 3, 4 and 5
    assert rows["fastop::sgd_update"][1] == "6"           # 2 parameters each step
    assert rows["fastop::fc"][1] == "3"
    assert ("fastop profile: 10 steps (one ends at each Optimizer.step() and "
            "Executor.run()); --steps 3:6 recorded steps 3 to 5") in proc.stderr
    proc = run_profile("fit.py", "--steps", "8:", "--no-trace", cwd=tmp_path)
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line and not line.startswith((" ", "-"))}
    assert rows["fastop::sgd_update"][1] == "4"           # steps 8, 9 and the end
    assert "--steps 8: recorded steps 8 to 9" in proc.stderr
    with pytest.raises(SystemExit):
        cli.main(["profile", "fit.py", "--steps", "6:3"])
