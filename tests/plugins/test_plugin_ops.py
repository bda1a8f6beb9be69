"""Every plugin package in ``plugins/`` is installed and loaded, and declares samples of
both float dtypes for each of its ops (its ``fastop_op_samples`` hook), which
``tests/ops/test_every_op.py`` runs ``fastop.testing.opcheck`` with, as for every
registered op. The packages must be installed and loaded (``make test`` installs them): a
missing one fails here, it is not skipped."""
import re
from pathlib import Path

import numpy as np
import pytest

from fastop import plugins
from fastop.ops import registry
from fastop.testing import Sample

PACKAGES = Path(__file__).resolve().parents[2] / "plugins"


def _distribution_name(pyproject: Path) -> str:
    # the [project] name line; a regex, not tomllib, which Python 3.10 lacks
    return re.search(r'(?m)^name\s*=\s*"([^"]+)"', pyproject.read_text()).group(1)


DISTRIBUTIONS = sorted(_distribution_name(p) for p in PACKAGES.glob("*/pyproject.toml"))
LOADED = {p.name: p for p in plugins.list() if p.entry_point is not None}
BACKWARD_KERNELS = {op.grad_rule.kernel_op for op in registry
                    if op.grad_rule is not None and op.grad_rule.kernel_op}
OPS = sorted(name for dist in DISTRIBUTIONS if dist in LOADED for name in LOADED[dist].ops
             if name not in BACKWARD_KERNELS)
NONE_LOADED = "<no plugin op is loaded>"     # a failing case, not an empty (skipped) set


def test_the_repository_has_plugin_packages():
    assert DISTRIBUTIONS, f"no plugin package found under {PACKAGES}"


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_plugin_package_is_installed_and_loaded(dist):
    assert dist in LOADED, (f"plugin package {dist} (plugins/) is not loaded: install it "
                            f"(make test does) and check import fastop's warnings")
    assert LOADED[dist].ops, f"{dist} registered no ops"


def _samples(name):
    if name == NONE_LOADED:
        pytest.fail("no op of the plugin packages in plugins/ is loaded: install them "
                    "(make test does)")
    samples = plugins.op_samples().get(name)
    if not samples:
        pytest.fail(f"{name} ({registry.get(name).plugin}) declares no samples: add them "
                    f"to the plugin's fastop_op_samples hook (docs/plugins.md)")
    return samples


@pytest.mark.parametrize("name", OPS or [NONE_LOADED])
def test_plugin_op_samples_cover_both_float_dtypes(name):
    """A float32 sample checks the float32 kernel against the meta function (and the
    float64 one); a float64 sample is what finite differences need."""
    dtypes = {_float_dtype(s.inputs if isinstance(s, Sample) else s)
              for s in _samples(name)}
    assert dtypes >= {"float32", "float64"}, f"{name}: samples in {sorted(dtypes)}"


def _float_dtype(inputs):
    """The dtype of a sample's first floating array (inside a variadic input's list too;
    past absent optional inputs and integer ones): the float kernel it checks."""
    for x in inputs:
        for a in x if isinstance(x, (list, tuple)) else [x]:
            if a is not None and np.asarray(a).dtype.kind == "f":
                return np.asarray(a).dtype.name
    return None
