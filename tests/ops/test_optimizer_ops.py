"""The optimizer ops (fastop::sgd_update, momentum_update, adam_update, adamw_update,
squared_l2_norm) as registry ops: signatures, meta with unknown dims, eager dispatch
against numpy (in place with out=, and out of place), static programs updating
persistable variables against eager, and squared_l2_norm's gradient rule against
central finite differences."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import optimizer as ref

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-14)}
UPDATES = ("sgd_update", "momentum_update", "adam_update", "adamw_update")


def rand(*shape, seed=1, dtype="float64"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_signatures():
    sig = {n: registry.get(f"fastop::{n}").signature() for n in (*UPDATES, "squared_l2_norm")}
    decay = "regularization_method='', regularization_coeff=0.0"
    assert sig["sgd_update"] == ("fastop::sgd_update(param, grad, learning_rate, grad_scale?, "
                                 f"{decay}) -> (param_out)")
    assert sig["momentum_update"] == (
        "fastop::momentum_update(param, grad, velocity, learning_rate, grad_scale?, "
        f"momentum=0.9, use_nesterov=False, {decay}) -> (param_out, velocity_out)")
    adam_io = ("(param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow, "
               "grad_scale?, beta1=0.9, beta2=0.999, epsilon=1e-08, ")
    outs = " -> (param_out, moment1_out, moment2_out, beta1_pow_out, beta2_pow_out)"
    assert sig["adam_update"] == f"fastop::adam_update{adam_io}{decay}){outs}"
    assert sig["adamw_update"] == f"fastop::adamw_update{adam_io}coeff=0.01, with_decay=True){outs}"
    assert sig["squared_l2_norm"] == "fastop::squared_l2_norm(x) -> (out)"


def test_update_ops_are_not_differentiable():
    for name in UPDATES:
        assert registry.get(f"fastop::{name}").differentiable_inputs == ()


def test_meta_propagates_unknown_dims():
    f32 = "float32"
    metas = registry.get("fastop::adamw_update").infer_meta(
        [TensorMeta([None, 3], f32), TensorMeta([None, 3], f32), TensorMeta([1], f32),
         TensorMeta([None, 3], f32), TensorMeta([None, 3], f32), TensorMeta([1], f32),
         TensorMeta([1], f32), TensorMeta([1], "float64")], {})
    assert metas == [TensorMeta([None, 3], f32)] * 3 + [TensorMeta([1], f32)] * 2
    assert registry.get("fastop::squared_l2_norm").infer_meta(
        [TensorMeta([None, 7], "float64")], {}) == [TensorMeta([1], "float64")]


def adam_inputs(dtype, seed=1):
    p, g = rand(4, 3, seed=seed, dtype=dtype), rand(4, 3, seed=seed + 1, dtype=dtype)
    m, v = rand(4, 3, seed=seed + 2, dtype=dtype), np.abs(rand(4, 3, seed=seed + 3, dtype=dtype))
    return [p, g, np.array([0.01], dtype), m, v, np.array([0.9 ** 3], dtype),
            np.array([0.999 ** 3], dtype)]


CASES = [   # op, inputs(dtype), attrs, the inputs the outputs update (indices)
    ("sgd_update", lambda d: [rand(5, dtype=d), rand(5, seed=2, dtype=d), np.array([0.1], d)],
     {"regularization_method": "l1_decay", "regularization_coeff": 0.01}, (0,)),
    ("momentum_update", lambda d: [rand(5, dtype=d), rand(5, seed=2, dtype=d),
                                   rand(5, seed=3, dtype=d), np.array([0.1], d)],
     {"momentum": 0.8, "use_nesterov": True, "regularization_method": "l2_decay",
      "regularization_coeff": 0.01}, (0, 2)),
    ("adam_update", adam_inputs, {"beta2": 0.99, "regularization_method": "l2_decay",
                                  "regularization_coeff": 0.1}, (0, 3, 4, 5, 6)),
    ("adamw_update", adam_inputs, {"epsilon": 1e-6, "coeff": 0.2}, (0, 3, 4, 5, 6)),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale", [None, 0.5], ids=["unscaled", "grad_scale"])
@pytest.mark.parametrize("name,make,attrs,updated", CASES, ids=IDS)
def test_eager_in_place_matches_numpy(name, make, attrs, updated, scale, dtype):
    inputs = make(dtype)
    extra = [] if scale is None else [np.array([scale], dtype)]
    want = getattr(ref, name)(*inputs, grad_scale=extra[0] if extra else None, **attrs)
    tensors = [fastop.to_tensor(a) for a in inputs + extra]
    outs = [tensors[i] for i in updated]
    pointers = [t.data_ptr for t in outs]
    registry.get(f"fastop::{name}")(*tensors, out=outs, **attrs)
    assert [t.data_ptr for t in outs] == pointers
    for got, exp in zip(outs, want):
        np.testing.assert_allclose(got.numpy(), exp, **TOL[dtype])


@pytest.mark.parametrize("name,make,attrs,updated", CASES, ids=IDS)
def test_eager_out_of_place_leaves_inputs(name, make, attrs, updated):
    inputs = make("float64")
    before = [a.copy() for a in inputs]
    results = registry.get(f"fastop::{name}")(*map(fastop.to_tensor, inputs), **attrs)
    results = results if isinstance(results, (list, tuple)) else [results]
    for got, exp in zip(results, getattr(ref, name)(*inputs, **attrs)):
        np.testing.assert_allclose(got.numpy(), exp, **TOL["float64"])
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,make,attrs,updated", CASES, ids=IDS)
def test_static_updates_persistables_like_eager(name, make, attrs, updated):
    """A program whose update op writes persistable variables: two runs equal two eager
    calls; grad_scale comes from a fed variable."""
    inputs = make("float64")
    scale = np.array([0.7])
    op = registry.get(f"fastop::{name}")
    tensors = [fastop.to_tensor(a) for a in inputs]
    for _ in range(2):
        op(*tensors, fastop.to_tensor(scale), out=[tensors[i] for i in updated], **attrs)

    state = {*updated, 3 if name == "momentum_update" else 2}   # and the learning rate
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup), static.scope_guard(scope):
            variables = [static.create_global_var(list(a.shape), 0.0, "float64",
                                                  persistable=True, name=f"in{i}")
                         if i in state else static.data(f"in{i}", list(a.shape), "float64")
                         for i, a in enumerate(inputs)]
            gs = static.data("scale", [1], "float64")
            op(*variables, gs, out=[variables[i] for i in updated], **attrs)
            exe = static.Executor()
            exe.run(startup)
            for i, a in enumerate(inputs):
                if variables[i].persistable:
                    scope.set(f"in{i}", a)
            feed = {f"in{i}": a for i, a in enumerate(inputs) if not variables[i].persistable}
            for _ in range(2):
                exe.run(main, feed={**feed, "scale": scale})
            for i in updated:
                np.testing.assert_array_equal(scope[f"in{i}"], tensors[i].numpy())
    finally:
        fastop.disable_static()


def test_bad_regularization_method_names_the_op_and_attribute():
    p, g = rand(3), rand(3, seed=2)
    with pytest.raises(ValueError, match=r"sgd_update.*'regularization_method' must be one of"):
        registry.get("fastop::sgd_update")(fastop.to_tensor(p), fastop.to_tensor(g),
                                           fastop.to_tensor(np.array([0.1])),
                                           regularization_method="l2")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_squared_l2_norm_eager_and_static(dtype, run_static):
    x = rand(6, 5, dtype=dtype)
    op = registry.get("fastop::squared_l2_norm")
    eager = op(fastop.to_tensor(x)).numpy()
    np.testing.assert_allclose(eager, ref.squared_l2_norm(x), **TOL[dtype])
    np.testing.assert_array_equal(run_static(op, x)[0], eager)


def test_squared_l2_norm_rule_matches_finite_differences():
    check_grad_rule("fastop::squared_l2_norm", [rand(3, 4)])
