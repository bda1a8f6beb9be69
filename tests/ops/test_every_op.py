"""Every registered op — fastop's own and every loaded plugin's — passes
``fastop.testing.opcheck`` on the samples its plugin serves through the
``fastop_op_samples`` hook (``fastop.plugins.op_samples()``): meta against each kernel,
the gradient against float64 finite differences, the double gradient where the gradient
is differentiable again, eager against static.

The op list is the registry's (the ops of the loaded plugins and of fastop), so a new op is
checked without touching this file, and an op without samples fails here: it is not
skipped. A backward kernel that is some op's ``grad_kernel`` is checked through that op
(its gradient, and its own rule by the double-gradient check).

The forward values opcheck does not judge are compared with the numpy twins of the
kernels (``tests/reference/<family>.py``): every op with a twin of its name, on the same
samples."""
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import fastop
from fastop import plugins
from fastop.ops import registry
from fastop.ops._registry import REQUIRED
from fastop.testing import Sample, assert_close, opcheck

from .. import reference

BACKWARD_KERNELS = {op.grad_rule.kernel_op for op in registry
                    if op.grad_rule is not None and op.grad_rule.kernel_op}
PLUGINS = {plugin.name for plugin in plugins.list()}
# the loaded plugins' ops and fastop's own, wherever defined (static::initialize comes
# from fastop.static); not ops a test module defines for itself
OPS = sorted(op.name for op in registry if op.name not in BACKWARD_KERNELS
             and (op.plugin in PLUGINS or op.plugin.startswith("fastop.")))
SAMPLES = plugins.op_samples()
TWIN_TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def _twins() -> dict:
    """``{op name: numpy twin}``: each public function of tests/reference/<family>.py
    named like a built-in op."""
    twins = {}
    for info in pkgutil.iter_modules(reference.__path__):
        module = importlib.import_module(f"{reference.__name__}.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            # backward kernels are checked through their forward op's gradient
            if fn.__module__ == module.__name__ and f"fastop::{name}" in OPS:
                twins[f"fastop::{name}"] = fn
    return twins


TWINS = _twins()


def _samples_of(name):
    samples = SAMPLES.get(name)
    if not samples:
        pytest.fail(f"{name} (plugin {registry.get(name).plugin}) has no samples: add them "
                    f"to its plugin's fastop_op_samples hook (fastop's own ops: the "
                    f"samples() of src/fastop/ops/builtin/<family>.py)")
    return samples


def test_the_registry_has_fastops_own_ops_and_its_plugins():
    namespaces = {name.partition("::")[0] for name in OPS}
    assert {"fastop", "dist", "activations", "vision"} <= namespaces, sorted(namespaces)


@pytest.mark.parametrize("name", OPS)
def test_op_passes_opcheck_on_its_samples(name):
    op = registry.get(name)
    report = opcheck(op, _samples_of(name))
    assert report["meta"] == report["eager_static"] == "ok", report
    if op.grad_rule is not None and op.differentiable_inputs:
        assert report["gradient"] == "ok", report
    assert all(v == "ok" or v.startswith("skipped: ") for v in report.values()), report


def test_the_twins_are_found():
    assert {"fastop::tanh", "fastop::matmul", "fastop::layer_norm", "fastop::gelu"} <= set(TWINS)


def _twin_attrs(op, twin, attrs):
    """The sample's attributes, and the op's defaults of the others the twin takes (a
    dtype by its name)."""
    given = {name: spec.default for name, spec in op.attrs.items()
             if spec.default is not REQUIRED}
    given.update(attrs)
    takes = inspect.signature(twin).parameters
    return {k: getattr(v, "name", v) if hasattr(v, "numpy_dtype") else v
            for k, v in given.items() if k in attrs or k in takes}


def _tensor(value):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [fastop.to_tensor(np.asarray(v)) for v in value]
    return fastop.to_tensor(np.asarray(value))


@pytest.mark.parametrize("name", sorted(TWINS))
def test_op_matches_its_numpy_twin_on_its_samples(name):
    op, twin = registry.get(name), TWINS[name]
    for index, sample in enumerate(_samples_of(name)):
        inputs, attrs = (sample.inputs, sample.attrs) if isinstance(sample, Sample) \
            else (list(sample), {})
        got = op(*map(_tensor, inputs), **attrs)
        got = got if isinstance(got, (tuple, list)) else (got,)
        want = twin(*inputs, **_twin_attrs(op, twin, attrs))
        want = want if isinstance(want, (tuple, list)) else (want,)
        assert len(got) == len(want), f"{name} sample {index}: {len(got)} output(s), " \
                                      f"the twin gives {len(want)}"
        for spec, g, w in zip(op.outputs, got, want):
            g = g.numpy()
            tol = TWIN_TOL.get(g.dtype.name, dict(rtol=0, atol=0))
            assert_close(g, np.asarray(w), **tol,
                         msg=f"{name} sample {index} output '{spec.name}' against its twin")
