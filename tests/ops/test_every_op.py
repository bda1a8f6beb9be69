"""Every registered op — fastop's own and every loaded plugin's — passes
``fastop.testing.opcheck`` on the samples its plugin serves through the
``fastop_op_samples`` hook (``fastop.plugins.op_samples()``): meta against each kernel,
the gradient against float64 finite differences, the double gradient where the gradient
is differentiable again, eager against static.

The op list is the registry's (the ops the loaded plugins registered), so a new op is
checked without touching this file, and an op without samples fails here: it is not
skipped. A backward kernel that is some op's ``grad_kernel`` is checked through that op
(its gradient, and its own rule by the double-gradient check)."""
import pytest

from fastop import plugins
from fastop.ops import registry
from fastop.testing import opcheck

BACKWARD_KERNELS = {op.grad_rule.kernel_op for op in registry
                    if op.grad_rule is not None and op.grad_rule.kernel_op}
OPS = sorted(name for plugin in plugins.list() for name in plugin.ops
             if name not in BACKWARD_KERNELS)
SAMPLES = plugins.op_samples()


def test_the_registry_has_fastops_own_ops_and_its_plugins():
    namespaces = {name.partition("::")[0] for name in OPS}
    assert {"fastop", "dist", "activations", "vision"} <= namespaces, sorted(namespaces)


@pytest.mark.parametrize("name", OPS)
def test_op_passes_opcheck_on_its_samples(name):
    op = registry.get(name)
    samples = SAMPLES.get(name)
    if not samples:
        pytest.fail(f"{name} (plugin {op.plugin}) has no samples: add them to its plugin's "
                    f"fastop_op_samples hook (fastop's own ops: the samples() of "
                    f"src/fastop/ops/builtin/<family>.py)")
    report = opcheck(op, samples)
    assert report["meta"] == report["eager_static"] == "ok", report
    if op.grad_rule is not None and op.differentiable_inputs:
        assert report["gradient"] == "ok", report
    assert all(v == "ok" or v.startswith("skipped: ") for v in report.values()), report
