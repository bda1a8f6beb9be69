"""One kernel choice (``fastop.ops._dispatch.kernel_dtype``, ``CallPlan.choose``): an eager
call, a static program run by the executor and the backward run the kernel the op's call
plan chooses. The rule: the dispatch input's dtype (a variadic input's first tensor's);
when that input is absent, the first present input's; float32 without tensor inputs.

The ops here are the cases where the choice was once written four ways and the ways
disagreed: the executor ran an op's Cython kernel for a dtype the op had a Python kernel
for, and took the plan's first input (not the Cython kernel's own dispatch input) when
the kernel was registered for some dtypes only."""
from __future__ import annotations

import numpy as np
import pytest

import fastop
from fastop import static
from fastop._core import elementwise as K
from fastop.ops import TensorMeta, registry
from fastop.ops._dispatch import kernel_dtype, mode_guard

X = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.75]])


def tanh64_kernel(x):
    """The float64 kernel of kernelchoice::tanh: tanh + 1, so a test sees it ran."""
    return np.tanh(x) + 1.0


def tanh_grad64_kernel(y, dy):
    """The float64 backward kernel of kernelchoice::tanh: 7 everywhere (a marker)."""
    return np.full_like(dy, 7.0)


def marker_kernel(value):
    """A kernel returning `value` (which kernel ran) as a float64 0-d array."""
    def kernel(*inputs):
        return np.array(value, np.float64)
    return kernel


def scalar_meta(*inputs):
    return TensorMeta([], "float64")


@pytest.fixture(scope="module")
def ops():
    """kernelchoice:: ops, removed afterwards."""
    defined = {
        # Cython kernels for every dtype, a Python one for float64 (forward and backward)
        "tanh": registry.define("kernelchoice::tanh", inputs=["x"], outputs=["out"],
                                meta=lambda x: x,
                                kernels={"*": K.tanh, "float64": tanh64_kernel}),
        "tanh_grad": registry.define("kernelchoice::tanh_grad", inputs=["y", "dy"],
                                     outputs=["dx"], meta=lambda y, dy: dy,
                                     kernels={"*": K.tanh_grad,
                                              "float64": tanh_grad64_kernel}),
        # a Cython kernel for some dtypes whose dispatch input is its second (x)
        "where": registry.define("kernelchoice::where", inputs=["condition", "x", "y"],
                                 outputs=["out"], meta=lambda c, x, y: x,
                                 promotes=("x", "y"), differentiable=("x", "y"),
                                 kernels={"float32": K.where, "float64": K.where}),
        # Python kernels telling which dtype chose them
        "pick": registry.define("kernelchoice::pick", inputs=["a?", "b?"], outputs=["out"],
                                meta=scalar_meta, differentiable=(),
                                kernels={"int64": marker_kernel(2), "float32": marker_kernel(3),
                                         "float64": marker_kernel(4)}),
        "first": registry.define("kernelchoice::first", inputs=["xs*", "b?"],
                                 outputs=["out"], meta=scalar_meta, differentiable=(),
                                 kernels={"int64": marker_kernel(2),
                                          "float32": marker_kernel(3),
                                          "float64": marker_kernel(4)}),
    }
    defined["tanh"].grad_op(defined["tanh_grad"], needs=("out", "dout"))
    yield defined
    for op in defined.values():
        registry.remove(op.name)


def _static(fn, *arrays):
    """fn's outputs on Variables fed `arrays` (None: an absent input), by the executor."""
    main, startup = static.Program(), static.Program()
    feed, variables = {}, []
    with mode_guard("static"), static.program_guard(main, startup):
        for i, a in enumerate(arrays):
            if a is None:
                variables.append(None)
                continue
            feed[f"in{i}"] = a
            variables.append(static.data(f"in{i}", list(a.shape), a.dtype.name))
        outs = fn(*variables)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return static.Executor().run(main, feed=feed, fetch_list=outs)


def _eager(fn, *arrays):
    outs = fn(*[None if a is None else fastop.to_tensor(a) for a in arrays])
    return [o.numpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_static_and_backward_run_the_kernel_the_plan_chooses(ops, dtype):
    x = X.astype(dtype)
    kernel = ops["tanh"].plan.kernels[fastop.to_tensor(x).dtype.code]
    forward = tanh64_kernel(x) if dtype == "float64" else np.tanh(x)
    y = forward.astype(dtype)
    grad = np.full_like(x, 7.0) if dtype == "float64" else 1 - y * y
    assert (kernel is tanh64_kernel) == (dtype == "float64")

    t = fastop.to_tensor(x, stop_gradient=False)
    out = ops["tanh"](t)
    out.sum().backward()
    np.testing.assert_allclose(out.numpy(), forward, rtol=1e-6)
    np.testing.assert_allclose(t.grad.numpy(), grad, rtol=1e-6)

    def program(v):
        v.stop_gradient = False
        out = ops["tanh"](v)
        (dv,) = static.gradients([out.sum()], [v])
        return out, dv
    static_out, static_grad = _static(program, x)
    np.testing.assert_allclose(static_out, forward, rtol=1e-6)
    np.testing.assert_allclose(static_grad, grad, rtol=1e-6)


def test_a_cython_kernel_for_some_dtypes_dispatches_on_its_own_dispatch_input(ops):
    where = ops["where"]
    assert where.plan.dispatch_input == 1            # x, as the kernel reads it
    cond = np.array([True, False, True])
    x, y = np.arange(3.0), -np.arange(3.0)
    expected = np.where(cond, x, y)
    (eager,) = _eager(where, cond, x, y)
    (static_out,) = _static(where, cond, x, y)
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(static_out, expected)
    with pytest.raises(TypeError, match=r"kernelchoice::where: no kernel for dtype int64"):
        where(fastop.to_tensor(cond), fastop.to_tensor([1, 2, 3]), fastop.to_tensor([1, 2, 3]))


I64, F32, F64 = np.array([1, 2]), np.ones(2, np.float32), np.ones(2)


@pytest.mark.parametrize("op, inputs, chosen", [
    ("pick", (I64, F64), 2),          # the dispatch input's dtype
    ("pick", (None, F64), 4),         # it is absent: the first present input's
    ("pick", (None, None), 3),        # no tensor: float32 (a creation op)
    ("first", ([F64, F32], I64), 4),  # a variadic dispatch input: its first tensor's
    ("first", ([], F32), 3),          # an empty one is absent
    ("first", ([], None), 3),
])
def test_the_fallback_rule_is_the_same_everywhere(ops, op, inputs, chosen):
    op = ops[op]

    def call(*xs):
        return op(*xs)
    flat = [a for x in inputs if x is not None for a in (x if isinstance(x, list) else [x])]

    def regroup(values):
        values, grouped = list(values), []
        for x in inputs:
            if isinstance(x, list):
                grouped.append([values.pop(0) for _ in x])
            else:
                grouped.append(None if x is None else values.pop(0))
        return grouped

    (eager,) = _eager(lambda *ts: op(*regroup(t for t in ts)), *flat)
    (static_out,) = _static(lambda *vs: op(*regroup(vs)), *flat)
    assert eager == static_out == chosen
    # the rule itself, on arrays, tensors and metas alike
    as_meta = {"array": lambda a: a, "tensor": fastop.to_tensor,
               "meta": lambda a: TensorMeta(list(a.shape), a.dtype.name)}
    codes = {name: kernel_dtype(op.plan, tuple(
        [f(a) for a in x] if isinstance(x, list) else None if x is None else f(x)
        for x in inputs)) for name, f in as_meta.items()}
    assert set(codes.values()) == {op.plan.choose(regroup(flat))[1]}
    assert op.plan.kernels[codes["array"]](*inputs) == chosen
