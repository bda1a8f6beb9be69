"""The Makefile's install (behind ``make demo`` and ``make test``) says what it does: a line
per step, the build's own progress filtered out of pip's verbose log, and the end of that
log when a step fails. pip is replaced by a script printing lines of a real ``pip install
-v`` of fastop, so nothing is built or installed."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"
if not MAKEFILE.is_file():
    pytest.skip("no Makefile next to tests/", allow_module_level=True)
if shutil.which("make") is None or shutil.which("bash") is None:
    pytest.skip("needs make and bash", allow_module_level=True)

# lines of `pip install -v --no-build-isolation .` building fastop (pip 26, setuptools 80)
PIP_LOG = """\
Processing /work/fastop
  Running command Preparing metadata (pyproject.toml)
  Compiling src/fastop/_core/tensor.pyx because it changed.
  [1/2] Cythonizing src/fastop/_core/tensor.pyx
  [2/2] Cythonizing src/fastop/autograd/_graph.pyx
  running build_ext
  building 'fastop._core.tensor' extension
  gcc -pthread -O3 -c src/fastop/_core/tensor.c -o build/temp/tensor.o
  building 'fastop.autograd._graph' extension
  Created wheel for fastop: filename=fastop-0.1.0-cp311-cp311-linux_x86_64.whl
Successfully built fastop
Successfully installed fastop-0.1.0
"""


def run_install(tmp_path: Path, fail_on: str = "") -> subprocess.CompletedProcess:
    """``make install`` in a copy of the Makefile whose .venv already has a python, with
    a fake pip that prints PIP_LOG (and fails when its arguments contain `fail_on`)."""
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    for prerequisite in ("setup.py", "pyproject.toml"):   # empty: pip is a fake
        (tmp_path / prerequisite).touch()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "pip.log").write_text(PIP_LOG)
    pip = tmp_path / "fake-pip"
    pip.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        cat {tmp_path / "pip.log"}
        if [ -n "{fail_on}" ] && [[ "$*" == *"{fail_on}"* ]]; then
            echo "error: the compiler failed"; exit 1
        fi
        """))
    pip.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "--no-print-directory", "install", f"PIP={pip}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_install_shows_its_steps_and_the_builds_progress(tmp_path):
    proc = run_install(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    steps = [line.split("]")[0] for line in lines if line.startswith("==> [")]
    assert steps == ["==> [2/4", "==> [3/4", "==> [4/4"]   # .venv/bin/python existed
    assert lines.count("    cython [1/2] src/fastop/_core/tensor.pyx") == 2   # tools, fastop
    assert "    compile fastop.autograd._graph" in lines
    assert "    Successfully installed fastop-0.1.0" in lines
    assert not any("gcc" in line or "Running command" in line for line in lines)
    assert lines[-1].startswith("==> installed into .venv: activate it with "
                                "'. .venv/bin/activate'")
    assert (tmp_path / ".venv" / "install.log").read_text().count("gcc -pthread") == 2


def test_a_failed_step_shows_the_end_of_pips_log_and_fails(tmp_path):
    proc = run_install(tmp_path, fail_on="[dev,mpi]")
    assert proc.returncode != 0
    assert "==> failed: the last 40 lines of .venv/install.log:" in proc.stdout
    assert "error: the compiler failed" in proc.stdout
    assert "==> [4/4]" not in proc.stdout and not (tmp_path / ".venv" / ".installed").exists()
