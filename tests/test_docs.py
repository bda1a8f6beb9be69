"""Every Python block in README.md and docs/*.md runs, and the output the docs show is the
output it prints, so the docs cannot rot.

The conventions:

- A block fenced ```python is a complete program and runs on its own, in a fresh
  interpreter with a temporary working directory (what a reader who pastes it gets),
  with the plugin packages of ``plugins/`` loaded and no others
  (``FASTOP_DISABLE_PLUGIN_AUTOLOAD=1``, ``FASTOP_PLUGINS``: the test suite's
  compatibility plugins, installed next to them by ``make``, are not what the docs
  describe). A block fenced ```python autoload runs as a user's script does, every
  installed plugin recorded at ``import fastop`` (for what shows how plugins load). A
  block not meant to run (a fragment, a file of a package) is fenced
  ```python norun: still highlighted as Python, never run. Other fences (```sh,
  ```toml, ```text) never run.
- What a block prints is shown in a ```text output fence right after it (prose between
  is fine, no other fence): its stdout, compared line by line (trailing spaces ignored;
  hexadecimal addresses ``0x...`` match any address).
- An output that varies from run to run (timings, the rows a time-sorted table keeps) is
  shown in a ```text output abridged fence: every number matches any number, runs of
  spaces match one space, runs of ``-`` match any run of ``-``, and each line shown must
  be a line of the real output (in any order); a line ``...`` stands for lines left out.
- A ``print(...)`` line carries no comment: what it prints belongs in the output fence,
  where it is compared, not in a comment, where it is not.
"""
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import fastop

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.S | re.M)
if not DOCS[0].is_file():
    pytest.skip("no README.md next to tests/", allow_module_level=True)
# the plugin packages of plugins/, which the docs describe, by distribution name
CHECKOUT_PLUGINS = sorted(re.search(r'^name = "([^"]+)"', path.read_text(), re.M).group(1)
                          for path in (REPO / "plugins").glob("*/pyproject.toml"))


class Block(NamedTuple):
    where: str          # file:line
    language: str       # "python", "text", ...
    info: str           # the rest of the info string: "norun", "output", "output abridged"
    code: str
    shown: "Block | None" = None   # for a python block: the output fence after it


def fenced_blocks() -> list[Block]:
    """Every fenced block of the docs, in order; a runnable python block carries the
    output fence that follows it."""
    blocks = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            block = Block(f"{path.relative_to(REPO)}:{line}", match.group(1),
                          match.group(2).strip(), match.group(3))
            previous = blocks[-1] if blocks and blocks[-1].where.split(":")[0] == \
                block.where.split(":")[0] else None
            if block.info.startswith("output") and previous is not None and \
                    previous.language == "python" and previous.info in RUN_INFOS:
                blocks[-1] = previous._replace(shown=block)
            blocks.append(block)
    return blocks


RUN_INFOS = ("", "autoload")     # the info strings of a python block that runs
BLOCKS = fenced_blocks()
RUNNABLE = [b for b in BLOCKS if b.language == "python" and b.info in RUN_INFOS]
OUTPUTS = [b for b in BLOCKS if b.info.startswith("output")]


def test_blocks_are_found_and_marked_with_the_convention_only():
    assert len(RUNNABLE) >= 5   # README's example, the three ways of docs/python-ops.md
    assert {b.info for b in BLOCKS if b.language == "python"} <= {*RUN_INFOS, "norun"}
    assert {b.info for b in OUTPUTS} <= {"output", "output abridged"}
    assert all(b.language == "text" for b in OUTPUTS)
    assert len(OUTPUTS) >= 10


def test_every_output_fence_follows_a_runnable_block():
    shown = {b.shown.where for b in RUNNABLE if b.shown}
    assert [b.where for b in OUTPUTS if b.where not in shown] == []


def test_print_lines_carry_no_comment():
    """What a print shows goes into the output fence (compared), not a comment."""
    commented = [f"{b.where}: {line.strip()}" for b in RUNNABLE for line in b.code.splitlines()
                 if re.match(r"\s*print\(", line) and re.search(r"\)\s*#", line)]
    assert commented == []


def exact_lines(text: str) -> list[str]:
    """The lines an ``output`` fence is compared by."""
    return [re.sub(r"0x[0-9a-fA-F]+", "0x…", line).rstrip() for line in
            text.rstrip("\n").splitlines()]


def abridged_line(line: str) -> str:
    """A line as an ``output abridged`` fence compares it: numbers, runs of spaces and
    runs of dashes made alike."""
    line = re.sub(r"0x[0-9a-fA-F]+", "0x…", line)
    line = re.sub(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", "#", line)
    line = re.sub(r"-{3,}", "---", line)
    return re.sub(r"\s+", " ", line).strip()


def compare_output(shown: Block, printed: str) -> None:
    """Fail, showing both, unless `printed` is what the output fence `shown` shows."""
    if shown.info == "output":
        assert exact_lines(printed) == exact_lines(shown.code), \
            f"{shown.where} shows:\n{shown.code}\nthe block printed:\n{printed}"
        return
    real = {abridged_line(line) for line in printed.splitlines()}
    missing = [line for line in shown.code.splitlines()
               if line.strip() not in ("...", "…") and abridged_line(line) not in real]
    assert missing == [], (f"{shown.where} shows lines the block did not print (numbers "
                           f"aside):\n" + "\n".join(missing) + f"\nit printed:\n{printed}")


def run_block(block: Block, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fastop.__file__)))
    for name in ("FASTOP_DISABLE_PLUGIN_AUTOLOAD", "FASTOP_PLUGINS", "FASTOP_STRICT_PLUGINS"):
        env.pop(name, None)
    if block.info != "autoload":
        env.update(FASTOP_DISABLE_PLUGIN_AUTOLOAD="1", FASTOP_PLUGINS=",".join(CHECKOUT_PLUGINS))
    return subprocess.run([sys.executable, "-c", block.code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_block_runs_and_prints_what_the_docs_show(block, tmp_path):
    proc = run_block(block, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    if block.shown is not None:
        compare_output(block.shown, proc.stdout)


# -- the comparison itself: a wrong output fails -----------------------------------------------
def fence(info: str, text: str) -> Block:
    return Block("doc.md:1", "text", info, text)


def test_an_output_fence_fails_on_any_difference_but_addresses():
    compare_output(fence("output", "x at 0x7f00 is 3\n"), "x at 0x55aa is 3  \n")
    with pytest.raises(AssertionError, match="doc.md:1 shows"):
        compare_output(fence("output", "12 ops\n"), "13 ops\n")
    with pytest.raises(AssertionError):
        compare_output(fence("output", "a\nb\n"), "a\n")   # a line missing


def test_an_abridged_fence_allows_other_numbers_and_left_out_lines_only():
    printed = "took 8.740 ms, 600 events\n-----\nmatmul    60   4.759\nswish   20  0.655\n"
    compare_output(fence("output abridged", "took 1.2 ms, 5 events\n---------\n"
                                            "swish 20 9.9\n...\n"), printed)
    with pytest.raises(AssertionError, match="relu 20 0.1"):
        compare_output(fence("output abridged", "relu 20 0.1\n"), printed)
    with pytest.raises(AssertionError):
        compare_output(fence("output abridged", "took 8.740 s, 600 events\n"), printed)


# -- the README's layout names every file of docs/ ------------------------------------------------
def test_readme_layout_names_every_docs_file():
    readme = DOCS[0].read_text(encoding="utf-8")
    layout = readme[readme.index("## Repository layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    named = set(re.findall(r"[\w.-]+\.\w+", layout))
    assert sorted(p.name for p in (REPO / "docs").iterdir()
                  if p.is_file() and p.name not in named) == []
