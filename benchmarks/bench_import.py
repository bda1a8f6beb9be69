"""Import time: ``import fastop`` vs ``import numpy`` (and ``import torch``), each in a
fresh Python process, wall time of the whole process (interpreter start included).

Target: ``import fastop`` ≤ 150 ms where ``import numpy`` takes ~85 ms; fastop needs
numpy, so "vs numpy" is below 1 by construction and should stay above ~0.55×.

Child processes run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed), as
an installed package has its ``.pyc`` files; the harness's warm-up run writes them in a
source checkout. The torch column is measured in full runs only (its import takes
seconds, more than the whole quick budget for this case).
"""
import os
import subprocess
import sys

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def importer(module: str):
    """A callable running ``python -c 'import <module>'`` in a fresh process."""
    cmd = [sys.executable, "-c", f"import {module}"]

    def run() -> None:
        subprocess.run(cmd, env=ENV, check=True)
    return run


def register(suite) -> None:
    suite.add("import", "import (fresh process)", fastop=importer("fastop"),
              numpy=importer("numpy"),
              torch=importer("torch") if suite.torch is not None and not suite.quick
              else None, target="≤ 150 ms, ≥ 0.57× numpy")
