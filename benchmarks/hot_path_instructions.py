"""Instructions (valgrind's callgrind) of fastop's hot paths: an eager ``x + 1``, an
identity Python-kernel op call, an executor op, and ``import fastop``.

Timings on a shared 2-core machine move by more than the 2 % a change may cost; counted
instructions do not. Each path is counted as (N calls) minus (0 calls) in two processes,
with the garbage collector off in the counted loop and a fixed hash seed, so that two
runs of the same tree agree to the instruction. Compare two trees (before/after a
change) by pointing ``--src`` at each one's built ``src`` folder::

    python benchmarks/hot_path_instructions.py --src /path/to/before/src
    python benchmarks/hot_path_instructions.py --src src

Bytecode must be cached in both trees first (``python -m compileall -q src/fastop``), or
``import fastop`` counts compiling its sources. Needs valgrind.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

# path: (calls counted, the code; `n` is the number of calls)
PATHS = {
    "eager x + 1": (2000, """
x = fastop.to_tensor(np.ones(4, "float32"))
for _ in range(50):
    y = x + 1
gc.collect(); gc.disable()
for _ in range(n):
    y = x + 1
"""),
    "identity Python-op call": (2000, """
op = fastop.ops.registry.define("hotpath::identity", inputs=["x"], outputs=["y"])
op.meta(lambda x: x)
op.kernel()(lambda x: x)
x = fastop.to_tensor(np.ones(4, "float32"))
for _ in range(50):
    op(x)
gc.collect(); gc.disable()
for _ in range(n):
    op(x)
"""),
    "executor op (tanh)": (500, """
from fastop import static
fastop.enable_static()
main, startup = static.Program(), static.Program()
with static.program_guard(main, startup):
    a = static.data("a", [4], "float32")
    b = fastop.tanh(a)
exe = static.Executor(fastop.CPUPlace())
feed = {"a": np.ones(4, "float32")}
for _ in range(50):
    exe.run(main, feed=feed, fetch_list=[b])
gc.collect(); gc.disable()
for _ in range(n):
    exe.run(main, feed=feed, fetch_list=[b])
"""),
}


def count(code: str, src: str | None) -> int:
    """Instructions callgrind counts for one `python -c code` process."""
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    if src:
        env["PYTHONPATH"] = src
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return int(re.search(r"Collected : (\d+)", run.stderr).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="a built src folder to import fastop from "
                                      "(default: the installed fastop)")
    args = parser.parse_args()
    prelude = "import gc\nimport numpy as np\nimport fastop\nn = {}\n"
    print(f"{'import fastop (total)':28} {count(prelude.format(0), args.src):>13,}")
    for path, (calls, body) in PATHS.items():
        full = count(prelude.format(calls) + body, args.src)
        none = count(prelude.format(0) + body, args.src)
        print(f"{path:28} {(full - none) / calls:>13,.0f} per call")


if __name__ == "__main__":
    main()
