"""The fastop-activations plugin package, tested installed, through its entry point
(``make test`` installs it; without it these tests fail, they are not skipped)."""
import numpy as np
import pytest

import fastop
from fastop._core.storage import from_numpy
from fastop.plugins import loaded_plugins

OPS = {
    "swish": (lambda x: x / (1 + np.exp(-x)), {}),
    "softplus": (lambda x: np.log1p(np.exp(x)), {}),
    "mish": (lambda x: x * np.tanh(np.log1p(np.exp(x))), {}),
    "gelu": (lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), {}),
    "leaky_relu": (lambda x: np.where(x > 0, x, 0.01 * x), {}),
}


def test_discovered_through_the_entry_point_and_attributed():
    infos = [p for p in loaded_plugins() if p.name == "fastop-activations"]
    assert infos, "plugins/fastop-activations is not installed (make test installs it)"
    (info,) = infos
    assert info.version == "0.1.0" and info.module == "fastop_activations.plugin"
    assert "activations::swish" in info.ops
    op = fastop.ops.activations.swish
    assert op.plugin == "fastop-activations" and op.version == "0.1.0"


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_matches_numpy(name, dtype):
    reference, attrs = OPS[name]
    x = np.linspace(-4, 4, 33).astype(dtype)
    op = fastop.ops.registry.get(f"activations::{name}")
    (y,) = op.invoke([from_numpy(x)], op.check_attrs(attrs))
    assert y.dtype == dtype
    np.testing.assert_allclose(np.asarray(y), reference(x.astype(np.float64)),
                               rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)


@pytest.mark.parametrize("name", sorted(OPS))
def test_backward_kernel_matches_finite_differences(name):
    op = fastop.ops.registry.get(f"activations::{name}")
    grad_op = fastop.ops.registry.get(f"activations::{name}_grad")
    attrs = op.check_attrs({})
    x = np.linspace(-3, 3, 25) + 0.013     # avoid leaky_relu's kink at 0
    dy = np.cos(x)
    (dx,) = grad_op.invoke([from_numpy(x), from_numpy(dy)], attrs)
    eps = 1e-6
    f = lambda v: np.asarray(op.invoke([from_numpy(v)], attrs)[0])
    numeric = (f(x + eps) - f(x - eps)) / (2 * eps) * dy
    np.testing.assert_allclose(np.asarray(dx), numeric, rtol=1e-6, atol=1e-8)


def test_wrong_dtype_names_the_op():
    op = fastop.ops.registry.get("activations::swish")
    with pytest.raises(TypeError, match="activations::swish: no kernel for dtype int64"):
        op.invoke([from_numpy(np.arange(3))], op.check_attrs({}))
