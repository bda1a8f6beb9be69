"""The optimizer kernels (fastop._core.optim) called raw, against their numpy twins
(tests/reference/optimizer.py) over several steps: every update rule x decay kind x
grad_scale, in float32 and float64; threads, strided inputs, in-place and staged outputs,
bad input; and squared_l2_norm."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from fastop._core import kernel, optim
from ..reference import optimizer as ref

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-14)}
DTYPES = ["float32", "float64"]
DECAYS = [("", 0.0), ("l2_decay", 0.05), ("l1_decay", 0.05)]
ADAM_HP = {"beta1": 0.8, "beta2": 0.95, "epsilon": 1e-7}
# rule -> (kernel, numpy twin, state entries (name, initial value), attributes)
RULES = {
    "sgd": (optim.sgd, ref.sgd_update, [], {}),
    "momentum": (optim.momentum, ref.momentum_update, [("velocity", 0.0)],
                 {"momentum": 0.8}),
    "nesterov": (optim.momentum, ref.momentum_update, [("velocity", 0.0)],
                 {"momentum": 0.8, "use_nesterov": True}),
    "adam": (optim.adam, ref.adam_update,
             [("moment1", 0.0), ("moment2", 0.0), ("beta1_pow", 0.8), ("beta2_pow", 0.95)],
             ADAM_HP),
    "adamw": (optim.adamw, ref.adamw_update,
              [("moment1", 0.0), ("moment2", 0.0), ("beta1_pow", 0.8), ("beta2_pow", 0.95)],
              {**ADAM_HP, "coeff": 0.1}),
}


def arrays(shape, dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def new_state(rule, shape, dtype):
    return {name: np.full([1] if name.endswith("_pow") else shape, value, dtype)
            for name, value in RULES[rule][2]}


def operands(rule, param, grad, lr, state):
    """The kernel's inputs (without grad_scale) and the outputs they update."""
    if rule == "sgd":
        return [param, grad, lr], [param]
    if rule in ("momentum", "nesterov"):
        return [param, grad, state["velocity"], lr], [param, state["velocity"]]
    m1, m2, b1p, b2p = state.values()
    return [param, grad, lr, m1, m2, b1p, b2p], [param, m1, m2, b1p, b2p]


def run_steps(rule, dtype, attrs, scale, steps=3, shape=(13, 4)):
    """`steps` updates by the kernel (in place) and by the twin (float64 state);
    returns both lists of final outputs."""
    kern, twin, _, base = RULES[rule]
    attrs = {**base, **attrs}
    (param,) = arrays(shape, dtype, 1)
    state = new_state(rule, shape, dtype)
    want = operands(rule, param.astype("float64"), None, None,
                    {k: v.astype("float64") for k, v in state.items()})[1]
    gs = None if scale is None else np.array([scale], dtype)
    for step in range(steps):
        (grad,) = arrays(shape, dtype, 1, seed=step + 1)
        lr = np.array([0.05 * (step + 1)], dtype)     # a rate that changes, as a schedule's
        inputs, outputs = operands(rule, param, grad, lr, state)
        kern(*inputs, *([] if gs is None else [gs]), out=tuple(outputs), **attrs)
        ref_inputs, _ = operands(rule, want[0], grad, lr, dict(zip(
            [n for n, _ in RULES[rule][2]], want[1:])))
        want = list(twin(*ref_inputs, grad_scale=gs, **attrs))
    return outputs, want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [None, 0.3], ids=["unscaled", "grad_scale"])
@pytest.mark.parametrize("method,coeff", DECAYS, ids=["no-decay", "l2", "l1"])
@pytest.mark.parametrize("rule", ["sgd", "momentum", "nesterov", "adam"])
def test_update_matches_numpy_over_steps(rule, method, coeff, scale, dtype):
    got, want = run_steps(rule, dtype, {"regularization_method": method,
                                        "regularization_coeff": coeff}, scale)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [None, 0.3], ids=["unscaled", "grad_scale"])
@pytest.mark.parametrize("with_decay", [True, False])
def test_adamw_matches_numpy_over_steps(with_decay, scale, dtype):
    got, want = run_steps("adamw", dtype, {"with_decay": with_decay}, scale)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[dtype])


def test_adamw_decays_and_adam_does_not():
    """The decoupled decay is the only difference: it shrinks the parameter by exactly
    lr * coeff * param beyond Adam's step; without decay AdamW is Adam."""
    adam, _ = run_steps("adam", "float64", {}, None, steps=1)
    adamw, _ = run_steps("adamw", "float64", {"coeff": 0.1}, None, steps=1)
    plain, _ = run_steps("adamw", "float64", {"with_decay": False}, None, steps=1)
    (start,) = arrays((13, 4), "float64", 1)
    np.testing.assert_allclose(adam[0] - adamw[0], 0.05 * 0.1 * start, rtol=1e-12)
    for a, b in zip(adam, plain):
        np.testing.assert_array_equal(a, b)


FLOATS = st.floats(-10, 10, allow_nan=False, width=32)


@given(data=st.data(), rule=st.sampled_from(["sgd", "momentum", "nesterov", "adam", "adamw"]),
       dtype=st.sampled_from(DTYPES), method=st.sampled_from(["", "l2_decay", "l1_decay"]),
       coeff=st.floats(0, 1), lr=st.floats(0, 1), scale=st.none() | st.floats(0, 2))
def test_one_step_of_any_values_matches_numpy(data, rule, dtype, method, coeff, lr, scale):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40))
    param, grad = (data.draw(hnp.arrays(dtype, shape, elements=FLOATS)) for _ in range(2))
    kern, twin, _, attrs = RULES[rule]
    attrs = dict(attrs)
    if rule == "adamw":
        attrs["coeff"] = coeff
    else:
        attrs.update(regularization_method=method, regularization_coeff=coeff)
    state = new_state(rule, shape, dtype)
    for key in ("velocity", "moment1", "moment2"):      # the second moment is >= 0
        if key in state:
            values = data.draw(hnp.arrays(dtype, shape, elements=FLOATS))
            state[key][...] = np.abs(values) if key == "moment2" else values
    gs = None if scale is None else np.array([scale], dtype)
    inputs, outputs = operands(rule, param, grad, np.array([lr], dtype), state)
    want = twin(*[a.copy() for a in inputs], grad_scale=gs, **attrs)
    kern(*inputs, *([] if gs is None else [gs]), out=tuple(outputs), **attrs)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    for got, exp in zip(outputs, want):
        np.testing.assert_allclose(got, exp, **tol)


@given(x=hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3,
                                                             min_side=0, max_side=50),
                    elements=FLOATS))
def test_squared_l2_norm_of_any_values(x):
    tol = dict(rtol=1e-5, atol=1e-6) if x.dtype == np.float32 else dict(rtol=1e-12, atol=0)
    np.testing.assert_allclose(optim.squared_l2_norm(x), ref.squared_l2_norm(x), **tol)


def test_l1_decay_uses_the_sign_of_the_parameter():
    p = np.array([-2.0, 0.0, 3.0])
    optim.sgd(p, np.zeros(3), np.array([1.0]), out=p, regularization_method="l1_decay",
              regularization_coeff=0.5)
    np.testing.assert_array_equal(p, [-1.5, 0.0, 2.5])


@pytest.mark.parametrize("rule", ["sgd", "momentum", "adam", "adamw"])
def test_threaded_update_matches_serial(rule):
    results = []
    for threads in (1, 2):
        kernel.set_num_threads(threads)
        try:
            results.append(run_steps(rule, "float32", {}, 0.5, steps=2, shape=(300_000,))[0])
        finally:
            kernel.set_num_threads(1)
    for serial, threaded in zip(*results):
        np.testing.assert_array_equal(serial, threaded)


def test_strided_grad_and_param_inputs_are_read_correctly():
    p, g = arrays((6, 4), "float64", 2)
    pt, gt = np.ascontiguousarray(p.T), np.ascontiguousarray(g.T)   # .T of these: strided
    (want,) = ref.sgd_update(p, g, 0.5, regularization_method="l2_decay",
                             regularization_coeff=0.1)
    out = np.empty((6, 4))
    optim.sgd(pt.T, gt.T, np.array([0.5]), out=out, regularization_method="l2_decay",
              regularization_coeff=0.1)
    np.testing.assert_allclose(out, want, **TOL["float64"])


def test_grad_scale_of_another_float_dtype_is_read():
    p, g = arrays((5,), "float32", 2)
    (want,) = ref.sgd_update(p, g, 0.1, grad_scale=0.25)
    optim.sgd(p, g, np.array([0.1], "float32"), np.array([0.25], "float64"), out=p)
    np.testing.assert_allclose(p, want, **TOL["float32"])


def test_update_kernels_name_the_input_each_output_overwrites():
    assert optim.sgd.updates == ("param",)
    assert optim.momentum.updates == ("param", "velocity")
    for k in (optim.adam, optim.adamw):
        assert k.updates == ("param", "moment1", "moment2", "beta1_pow", "beta2_pow")
    assert not optim.sgd.inplace_safe


@pytest.mark.parametrize("dtype", DTYPES)
def test_update_written_over_another_input_reads_it_first(dtype):
    # an output sharing memory with an input other than the one it updates is staged:
    # the kernel copies param into param_out before reading grad
    p, g, v = arrays((5,), dtype, 3)
    lr = np.array([0.5], dtype)
    (want,) = ref.sgd_update(p, g, lr)
    grad = g.copy()
    optim.sgd(p, grad, lr, out=grad)
    np.testing.assert_allclose(grad, want, **TOL[dtype])
    want_p, want_v = ref.momentum_update(p, g, v, lr, momentum=0.9)
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


# -- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("kern", [optim.adam, optim.adamw], ids=["adam", "adamw"])
def test_beta_pow_out_of_range_raises_and_writes_nothing(kern):
    p, g, m, v = arrays((5,), "float64", 4)
    before = [a.copy() for a in (p, m, v)]
    with pytest.raises(ValueError, match=r"beta1_pow and beta2_pow must be in \[0, 1\)"):
        kern(p, g, np.array([0.1]), m, v, np.array([1.0]), np.array([0.999]),
             out=(p, m, v, np.zeros(1), np.zeros(1)))
    for a, b in zip((p, m, v), before):
        np.testing.assert_array_equal(a, b)


def test_unknown_regularization_method_raises():
    p, g = arrays((3,), "float32", 2)
    with pytest.raises(ValueError, match=r"'regularization_method' must be one of \['', "
                                         r"'l2_decay', 'l1_decay'\], got 'l3_decay'"):
        optim.sgd(p, g, np.array([0.1], "float32"), out=p, regularization_method="l3_decay")


@pytest.mark.parametrize("bad", ["lr", "grad_scale"])
def test_scalar_inputs_must_have_one_element(bad):
    p, g = arrays((3,), "float32", 2)
    lr, gs = np.array([0.1], "float32"), np.array([1.0], "float32")
    if bad == "lr":
        lr = np.array([0.1, 0.2], "float32")
    else:
        gs = np.ones(2, "float32")
    with pytest.raises(ValueError, match="grad_scale one element each"):
        optim.sgd(p, g, lr, gs, out=p)


def test_grad_shape_and_dtype_mismatch_raise():
    p, g = arrays((3, 4), "float32", 2)
    lr = np.array([0.1], "float32")
    with pytest.raises(ValueError, match="grad and state must have param's shape"):
        optim.sgd(p, g.reshape(4, 3), lr, out=p)
    with pytest.raises(TypeError, match="grad and state of its dtype"):
        optim.sgd(p, g.astype("float64"), lr, out=p)
    with pytest.raises(TypeError, match="param must be float32 or float64"):
        optim.sgd(np.arange(3), np.arange(3), lr, out=np.arange(3))


# -- squared_l2_norm ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (33, 5), (3, 4, 5), (70_001,)], ids=str)
def test_squared_l2_norm_matches_numpy(shape, dtype):
    (x,) = arrays(shape, dtype, 1)
    got = np.asarray(optim.squared_l2_norm(x))
    assert got.shape == (1,) and got.dtype == dtype
    np.testing.assert_allclose(got, ref.squared_l2_norm(x), **TOL[dtype])


def test_squared_l2_norm_of_a_strided_view():
    (x,) = arrays((40, 30), "float64", 1)
    np.testing.assert_allclose(optim.squared_l2_norm(x.T[::2]), ref.squared_l2_norm(x.T[::2]),
                               rtol=1e-12)


def test_squared_l2_norm_is_the_same_on_any_thread_count():
    (x,) = arrays((64 * 2 ** 15 + 123,), "float32", 1)   # more pieces than the stack holds
    results = []
    for threads in (1, 2):
        kernel.set_num_threads(threads)
        try:
            results.append(np.asarray(optim.squared_l2_norm(x)))
        finally:
            kernel.set_num_threads(1)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], ref.squared_l2_norm(x), rtol=1e-6)


def test_squared_l2_norm_refuses_integers():
    with pytest.raises(TypeError, match="x must be float32 or float64"):
        optim.squared_l2_norm(np.arange(4))
