"""Optimizer update kernels vs numpy reference updates (eager path and CKernels)."""
import numpy as np
import pytest

from fastop._core.storage import from_numpy
from fastop.ops import registry
from fastop._core import optim

TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-12, atol=1e-14)}
DTYPES = ["float32", "float64"]
SHAPES = [(7,), (33, 5), (3, 4, 5)]


def ref_sgd(p, g, lr, wd):
    return p - lr * (g + wd * p)


def ref_momentum(p, g, v, lr, mu, nesterov, wd):
    g = g + wd * p
    v = mu * v + g
    return (p - lr * (g + mu * v) if nesterov else p - lr * v), v


def ref_adam(p, g, m, v, lr, b1, b2, eps, wd, b1p, b2p):
    g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    return p - lr_t * m / (np.sqrt(v) + eps * np.sqrt(1 - b2p)), m, v


def arrays(shape, dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_sgd_step(dtype, shape, wd):
    p, g = arrays(shape, dtype, 2)
    want = ref_sgd(p.astype("float64"), g, 0.1, wd)
    optim.sgd_step(from_numpy(p), from_numpy(g), 0.1, wd)
    np.testing.assert_allclose(p, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nesterov", [False, True], ids=["heavy-ball", "nesterov"])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_momentum_step_three_times(dtype, nesterov, wd):
    p, v = arrays((13, 3), dtype, 2)
    want_p, want_v = p.astype("float64"), v.astype("float64")
    for step in range(3):
        (g,) = arrays((13, 3), dtype, 1, seed=step + 1)
        want_p, want_v = ref_momentum(want_p, g, want_v, 0.05, 0.9, nesterov, wd)
        optim.momentum_step(from_numpy(p), from_numpy(g), from_numpy(v), 0.05, 0.9,
                               nesterov, wd)
    np.testing.assert_allclose(p, want_p, **TOL[dtype])
    np.testing.assert_allclose(v, want_v, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_adam_step_three_times(dtype, wd):
    (p,) = arrays((17, 4), dtype, 1)
    m, v = np.zeros_like(p), np.zeros_like(p)
    want = [p.astype("float64"), m.astype("float64"), v.astype("float64")]
    b1, b2 = 0.9, 0.999
    for t in range(1, 4):
        (g,) = arrays((17, 4), dtype, 1, seed=t)
        want = ref_adam(*want[:1], g, *want[1:], 1e-2, b1, b2, 1e-8, wd, b1 ** t, b2 ** t)
        optim.adam_step(from_numpy(p), from_numpy(g), from_numpy(m), from_numpy(v),
                           1e-2, b1, b2, 1e-8, wd, b1 ** t, b2 ** t)
    for got, exp in zip((p, m, v), want):
        np.testing.assert_allclose(got, exp, **TOL[dtype])


def test_threaded_update_matches_serial():
    from fastop._core import kernel
    p1, g = arrays((300_000,), "float32", 2)
    p2 = p1.copy()
    kernel.set_num_threads(1)
    optim.sgd_step(from_numpy(p1), from_numpy(g), 0.1, 0.01)
    kernel.set_num_threads(2)
    try:
        optim.sgd_step(from_numpy(p2), from_numpy(g), 0.1, 0.01)
    finally:
        kernel.set_num_threads(1)
    np.testing.assert_array_equal(p1, p2)


def test_noncontiguous_grad_is_read_correctly():
    p, g = arrays((6, 4), "float64", 2)
    gt = np.ascontiguousarray(g.T)           # (4, 6) buffer; its .T is strided (6, 4)
    want = ref_sgd(p, g, 0.5, 0.0)
    optim.sgd_step(from_numpy(p), from_numpy(gt).transpose(), 0.5)
    np.testing.assert_allclose(p, want, **TOL["float64"])


# -- error paths ---------------------------------------------------------------------

def test_step_grad_shape_mismatch_raises():
    p, g = arrays((3, 4), "float32", 2)
    with pytest.raises(ValueError, match=r"sgd_update: the gradient \(shape \[4, 3\]"):
        optim.sgd_step(from_numpy(p), from_numpy(g.reshape(4, 3)), 0.1)


def test_step_dtype_mismatch_raises():
    p, = arrays((3,), "float32", 1)
    with pytest.raises(ValueError, match="dtype float64"):
        optim.sgd_step(from_numpy(p), from_numpy(p.astype("float64")), 0.1)


def test_step_integer_param_raises():
    p = np.arange(3, dtype="int64")
    with pytest.raises(TypeError, match="float32 or float64, got int64"):
        optim.sgd_step(from_numpy(p), from_numpy(p), 0.1)


def test_step_state_mismatch_raises():
    p, g = arrays((5,), "float32", 2)
    with pytest.raises(ValueError, match="velocity must match the parameter"):
        optim.momentum_step(from_numpy(p), from_numpy(g), from_numpy(np.zeros(4, "float32")),
                               0.1)


def test_adam_bad_beta_pow_raises():
    p, g, m, v = arrays((5,), "float32", 4)
    with pytest.raises(ValueError, match=r"beta1_pow and beta2_pow must be in \[0, 1\)"):
        optim.adam_step(*map(from_numpy, (p, g, m, v)), 0.1, 0.9, 0.999, 1e-8, 0.0,
                           1.0, 0.999)


def test_readonly_param_raises():
    p, g = arrays((5,), "float32", 2)
    p.flags.writeable = False
    with pytest.raises(ValueError, match="contiguous, writable"):
        optim.sgd_step(from_numpy(p), from_numpy(g), 0.1)


# -- the registered ops --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_update_op_in_place(dtype):
    p, g = arrays((4, 3), dtype, 2)
    want = ref_sgd(p.astype("float64"), g, 0.1, 0.01)
    lr = np.array([0.1], dtype)
    kernel = registry.get("fastop::sgd_update").kernels["*"]
    out = kernel(p, g, lr, out=(p,), weight_decay=0.01)
    assert np.shares_memory(np.asarray(out), p)
    np.testing.assert_allclose(p, want, **TOL[dtype])


def test_update_kernels_name_the_input_each_output_overwrites():
    assert optim.sgd.updates == ("param",)
    assert optim.momentum.updates == ("param", "velocity")
    assert optim.adam.updates == ("param", "moment1", "moment2", "beta1_pow", "beta2_pow")
    assert not optim.sgd.inplace_safe


@pytest.mark.parametrize("dtype", DTYPES)
def test_update_written_over_another_input_reads_it_first(dtype):
    # an output sharing memory with an input other than the one it updates is staged:
    # the kernel copies param into param_out before reading grad
    p, g, v = arrays((5,), dtype, 3)
    lr = np.array([0.5], dtype)
    want = ref_sgd(p.astype("float64"), g, 0.5, 0.0)
    grad = g.copy()
    optim.sgd(p, grad, lr, out=grad)
    np.testing.assert_allclose(grad, want, **TOL[dtype])
    want_p, want_v = ref_momentum(p.astype("float64"), g, v, 0.5, 0.9, False, 0.0)
    param, grad = p.copy(), g.copy()
    optim.momentum(param, grad, v.copy(), lr, out=(param, grad), momentum=0.9)
    np.testing.assert_allclose(param, want_p, **TOL[dtype])
    np.testing.assert_allclose(grad, want_v, **TOL[dtype])


def test_outputs_sharing_memory_are_refused():
    p, g, v = arrays((8,), "float64", 3)
    buf = np.zeros(12)
    with pytest.raises(ValueError, match="out 'velocity_out' shares memory with out "
                                         "'param_out'; outputs must not overlap"):
        optim.momentum(p, g, v, np.array([0.5]), out=(buf[0:8], buf[4:12]), momentum=0.9)
    np.testing.assert_array_equal(buf, 0)       # nothing written


@pytest.mark.parametrize("step, args", [
    ("sgd_step", lambda p, g, s: (p, g, 0.1)),
    ("momentum_step", lambda p, g, s: (p, g, s, 0.1)),
    ("adam_step", lambda p, g, s: (p, g, s, np.zeros(8), 0.1, 0.9, 0.999, 1e-8, 0.0,
                                   0.9, 0.999)),
])
def test_eager_steps_refuse_buffers_that_share_memory(step, args):
    buf = np.arange(16.0)
    p, g = np.ones(8), buf[0:8]
    state = buf[1:9] if step != "sgd_step" else None
    if step == "sgd_step":
        p = buf[4:12]                           # the parameter overlaps the gradient
    with pytest.raises(ValueError, match="shares memory with"):
        getattr(optim, step)(*(from_numpy(a) if isinstance(a, np.ndarray) else a
                               for a in args(p, g, state)))
    np.testing.assert_array_equal(buf, np.arange(16.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_update_op_out_of_place_leaves_inputs(dtype):
    p, g, v = arrays((4, 3), dtype, 3)
    p0, v0 = p.copy(), v.copy()
    want_p, want_v = ref_momentum(p.astype("float64"), g, v, 0.1, 0.8, True, 0.0)
    op = registry.get("fastop::momentum_update")
    new_p, new_v = op(p, g, v, np.array([0.1], dtype), momentum=0.8, use_nesterov=True)
    np.testing.assert_allclose(np.asarray(new_p), want_p, **TOL[dtype])
    np.testing.assert_allclose(np.asarray(new_v), want_v, **TOL[dtype])
    np.testing.assert_array_equal(p, p0)
    np.testing.assert_array_equal(v, v0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_update_op_in_place_advances_powers(dtype):
    p, g = arrays((6,), dtype, 2)
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1p, b2p = np.array([0.9], dtype), np.array([0.99], dtype)
    want = ref_adam(p.astype("float64"), g, m, v, 0.01, 0.9, 0.99, 1e-6, 0.0, 0.9, 0.99)
    kernel = registry.get("fastop::adam_update").kernels["*"]
    kernel(p, g, np.array(0.01), m, v, b1p, b2p, out=(p, m, v, b1p, b2p),
           beta2=0.99, epsilon=1e-6)
    for got, exp in zip((p, m, v), want):
        np.testing.assert_allclose(got, exp, **TOL[dtype])
    np.testing.assert_allclose(b1p, [0.81], **TOL[dtype])
    np.testing.assert_allclose(b2p, [0.99 * 0.99], **TOL[dtype])


def test_update_op_meta_propagates_unknown_dims():
    op = registry.get("fastop::sgd_update")
    metas = op.infer_meta([([None, 3], "float32"), ([None, 3], "float32"), ([1], "float32")],
                          op.check_attrs({}))
    assert [(m.shape, m.dtype.name) for m in metas] == [([None, 3], "float32")]


def test_update_op_bad_learning_rate_shape_raises():
    p, g = arrays((3,), "float32", 2)
    with pytest.raises(ValueError, match="sgd_update: input shapes are incompatible"):
        registry.get("fastop::sgd_update")(p, g, np.array([0.1, 0.2], "float32"))


def test_update_ops_are_not_differentiable():
    for name in ("sgd_update", "momentum_update", "adam_update"):
        assert registry.get(f"fastop::{name}").differentiable_inputs == ()
