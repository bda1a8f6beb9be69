"""The fastop-activations plugin package, tested installed, through its entry point
(``make test`` installs it; without it these tests fail, they are not skipped)."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop._core.storage import from_numpy
from fastop.ops.checking import check_grad_rule
from fastop.plugins import loaded_plugins, op_samples
from fastop.testing import opcheck

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


# -- seed 003: OneFlow's Python-kernel user_relu, bound as REGISTER_USER_OP_GRAD binds it --

USER_RELU_X = np.array([-2.5, -1.0, -0.3, 0.4, 1.0, 2.5, -0.7, 3.1])


def test_user_relu_is_defined_as_the_seed_defines_it():
    forward = fastop.ops.activations.user_relu_forward
    backward = fastop.ops.activations.user_relu_backward
    assert [a.name for a in forward.inputs] == ["in"]       # a Python keyword, as a string
    assert [a.name for a in forward.outputs] == ["out"]
    assert [a.name for a in backward.inputs] == ["y", "dy"]
    assert [a.name for a in backward.outputs] == ["dx"]
    # the forward's gradient reads its output only (InputBind("y", output), "dy")
    assert forward.grad_rule.needs == ("out",) and forward.grad_rule.kernel_op is None
    assert backward.differentiable_inputs == ("dy",)
    # "in" reaches the op by keyword too
    x = fastop.to_tensor(USER_RELU_X)
    np.testing.assert_array_equal(forward(**{"in": x}).numpy(), np.maximum(USER_RELU_X, 0))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_user_relu_kernels_match_numpy(dtype):
    x = USER_RELU_X.astype(dtype)
    dy = np.linspace(-1, 1, x.size).astype(dtype)
    forward = fastop.ops.activations.user_relu_forward
    backward = fastop.ops.activations.user_relu_backward
    (y,) = forward.invoke([from_numpy(x)], {})
    (dx,) = backward.invoke([y, from_numpy(dy)], {})
    assert y.dtype == dtype and dx.dtype == dtype
    np.testing.assert_array_equal(np.asarray(y), (x > 0) * x)
    np.testing.assert_array_equal(np.asarray(dx), (x > 0) * dy)


def test_user_relu_gradients_match_finite_differences():
    # the forward's rule (through user_relu_backward), and user_relu_backward's own rule
    check_grad_rule("activations::user_relu_forward", [USER_RELU_X.copy()])
    dy = np.cos(USER_RELU_X)
    check_grad_rule("activations::user_relu_backward",
                    [np.maximum(USER_RELU_X, 0), dy], wrt=[1])


def test_user_relu_eager_backward_runs_the_backward_op():
    x = fastop.to_tensor(USER_RELU_X, stop_gradient=False)
    dy = np.sin(USER_RELU_X)
    y = fastop.ops.activations.user_relu_forward(x)
    (y * fastop.to_tensor(dy)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (USER_RELU_X > 0) * dy)
    # twice differentiable: d/d(dy) of sum(user_relu_backward(y, dy) * w) is (y > 0) * w
    dyt = fastop.to_tensor(dy, stop_gradient=False)
    dx = fastop.ops.activations.user_relu_backward(y.detach(), dyt)
    (g,) = fastop.grad([dx], [dyt], grad_outputs=[fastop.to_tensor(np.ones_like(dy))])
    np.testing.assert_array_equal(g.numpy(), (USER_RELU_X > 0).astype(float))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_user_relu_static_matches_eager(dtype):
    x_value = USER_RELU_X.astype(dtype).reshape(2, 4)
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, 4], dtype)
            x.stop_gradient = False
            out = fastop.ops.activations.user_relu_forward(x)
            ((_, dx),) = static.append_backward(out, parameter_list=[x])
        ops = main.global_block().ops
        # after the forward op and the ones filling d(out): the backward op, fed the
        # forward's output (not its input)
        assert ops[0].type == "activations::user_relu_forward"
        assert ops[-1].type == "activations::user_relu_backward"
        assert ops[-1].inputs[0] is out and ops[-1].outputs == [dx]
        got_out, got_dx = static.Executor().run(main, feed={"x": x_value},
                                                fetch_list=[out, dx])
    finally:
        fastop.disable_static()
    xe = fastop.to_tensor(x_value, stop_gradient=False)
    ye = fastop.ops.activations.user_relu_forward(xe)
    ye.sum().backward()
    np.testing.assert_array_equal(got_out, ye.numpy())
    np.testing.assert_array_equal(got_dx, xe.grad.numpy())


def test_user_relu_samples_stay_away_from_the_kink_and_pass_every_check():
    samples = op_samples()
    for x, in samples["activations::user_relu_forward"]:
        assert np.abs(x).min() >= 0.1        # finite differences step 1e-6 over x
    for y, dy in samples["activations::user_relu_backward"]:
        assert (y >= 0).all() and (y == 0).any() and y.shape == dy.shape   # relu outputs
    for name in ("activations::user_relu_forward", "activations::user_relu_backward"):
        assert set(opcheck(name, samples[name]).values()) == {"ok"}
