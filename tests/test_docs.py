"""Every Python block in README.md and docs/*.md runs, so the docs cannot rot.

The convention: a block fenced ```python is a complete program and runs on its own, in a
fresh interpreter with a temporary working directory (what a reader who pastes it gets).
A block that is not meant to run (a fragment, a file of a package, a sketch of output) is
fenced ```python norun: still highlighted as Python, never run. Other fences (```sh,
```toml, ```text) never run.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastop

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```\s*$", re.S | re.M)
if not DOCS[0].is_file():
    pytest.skip("no README.md next to tests/", allow_module_level=True)


def python_blocks():
    """(where, info string, code) of every ```python block, where = file:line."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield f"{path.relative_to(REPO)}:{line}", match.group(1).strip(), match.group(2)


BLOCKS = list(python_blocks())
RUNNABLE = [(where, code) for where, info, code in BLOCKS if info != "norun"]


def test_blocks_are_found_and_marked_with_the_convention_only():
    assert len(RUNNABLE) >= 5   # README's example, the three ways of docs/python-ops.md
    assert {info for _, info, _ in BLOCKS} <= {"", "norun"}


@pytest.mark.parametrize("code", [code for _, code in RUNNABLE],
                         ids=[where for where, _ in RUNNABLE])
def test_block_runs(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
