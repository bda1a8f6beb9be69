"""fastop.testing.opcheck: what each check passes and catches (a wrong meta, a wrong
gradient, a rule reading a value it did not declare, an eager/static mismatch), and
that the report and failures say which op, sample, check, input or output."""

import numpy as np
import pytest

import fastop
from fastop.ops import Registry
from fastop.testing import Sample, opcheck

X = np.linspace(-2.0, 2.0, 6).reshape(2, 3) + 0.05
SAMPLES = [[X], [X.astype("float32")], [np.array([0.3, -1.2])]]


@pytest.fixture
def registry():
    """A registry of its own: the ops of these tests never reach fastop's."""
    return Registry()


def scale_op(registry, meta=lambda x, k: x, kernel=None, grad=None, name="t::scale"):
    """y = k * x with a numpy kernel and a numpy backward kernel, parts replaceable."""
    op = registry.define(name, inputs=["x"], outputs=["y"], attrs={"k": 3.0}, meta=meta)
    op.kernel("float32", "float64")(kernel or (lambda x, k: (k * x).astype(x.dtype)))
    op.grad_kernel(needs=["dy"])(grad or (lambda dy, k: k * dy))
    return op


def test_a_correct_op_passes_every_check_that_applies(registry):
    report = opcheck(scale_op(registry), SAMPLES)
    assert report == {"meta": "ok", "gradient": "ok",
                      "reads": "skipped: a backward kernel is given only the values it needs",
                      "double_grad": "skipped: the gradient is the backward kernel "
                                     "t::scale_grad, which has no gradient rule",
                      "eager_static": "ok"}


def test_the_installed_plugin_ops_and_a_composite_builtin_pass():
    assert opcheck("activations::swish", [[X], Sample(X, beta=2.0)])["gradient"] == "ok"
    report = opcheck(fastop.ops.fastop.multiply, [[X, X[0] * 2], [X, X + 1]])
    assert set(report.values()) == {"ok"}        # composite: reads and double grad too


def test_samples_and_attributes(registry):
    op = scale_op(registry)
    opcheck(op, [Sample(X, k=-0.5), [X]], attrs={"k": 2.0})
    with pytest.raises(TypeError, match="t::scale: unknown attribute"):
        opcheck(op, [Sample(X, kk=1.0)])
    with pytest.raises(ValueError, match=r"sample 0: 2 input\(s\) given, the op takes 1 \(x\)"):
        opcheck(op, [[X, X]])
    with pytest.raises(ValueError, match="no sample inputs"):
        opcheck(op, [])


def test_a_wrong_meta_is_caught(registry):
    op = scale_op(registry, meta=lambda x, k: fastop.ops.TensorMeta(x.shape[::-1], x.dtype))
    with pytest.raises(AssertionError, match=r"opcheck t::scale sample 0 \[meta\]: output 'y' "
                                             r"\(dtype float32\): the meta function says "
                                             r"float32\[3, 2\], the kernel returned "
                                             r"float32\[2, 3\]"):
        opcheck(op, SAMPLES)


def test_a_kernel_returning_the_wrong_dtype_for_one_kernel_dtype_is_caught(registry):
    op = scale_op(registry, kernel=lambda x, k: k * x.astype("float64"))
    with pytest.raises(AssertionError, match=r"\[meta\]: output 'y' \(dtype float32\): the meta "
                                             r"function says float32\[2, 3\], the kernel "
                                             r"returned float64\[2, 3\]"):
        opcheck(op, SAMPLES)


def test_a_wrong_gradient_is_caught_with_the_largest_error(registry):
    op = scale_op(registry, grad=lambda dy, k: k * dy * 1.01)
    with pytest.raises(AssertionError) as caught:
        opcheck(op, SAMPLES)
    message = str(caught.value)
    assert message.startswith("opcheck t::scale sample 0 [gradient]: t::scale: gradient of "
                              "input 'x' against finite differences: not close: 6 of 6 "
                              "element(s) differ; largest error ")
    assert "at index (" in message and "rtol=1e-05, atol=1e-06" in message


def test_a_gradient_needs_a_float64_kernel(registry):
    op = registry.define("t::f32", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32")(lambda x: x * 2)
    op.grad_kernel(needs=["dy"])(lambda dy: dy * 2)
    with pytest.raises(AssertionError, match=r"\[gradient\]: needs a float64 kernel"):
        opcheck(op, [[X.astype("float32")]])


def exp_op(registry, reads):
    """y = exp(x) with the composite rule dx = y * dy, declaring `reads`."""
    op = registry.define("t::exp", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(np.exp)
    multiply = fastop.ops.get("fastop::multiply")

    @op.grad(needs=("x", "y"), reads=reads)
    def exp_grad(x, y, dy):
        return multiply(y, dy)
    return op


def test_declared_reads_hold(registry):
    report = opcheck(exp_op(registry, reads={"x": ("y",)}), SAMPLES)
    assert report["reads"] == "ok" and report["double_grad"] == "ok"


def test_a_rule_reading_a_value_it_did_not_declare_is_caught(registry):
    op = exp_op(registry, reads={"x": ("x",)})     # it reads y, not x
    with pytest.raises(AssertionError, match=r"opcheck t::exp sample 0 \[reads\]: the gradient "
                                             r"of input 'x' depends on the contents of 'y', "
                                             r"which reads= does not declare for it "
                                             r"\(declared: \['x'\]\).*largest error"):
        opcheck(op, SAMPLES)


def test_an_eager_static_mismatch_is_caught(registry):
    # a rule that branches on what it is given: eager tensors take the wrong branch
    op = registry.define("t::double", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(lambda x: 2 * x)
    multiply = fastop.ops.get("fastop::multiply")

    @op.grad(needs=("x",), reads={})
    def double_grad(x, dy):
        return multiply(dy, 3.0 if isinstance(x, fastop.Tensor) else 2.0)
    with pytest.raises(AssertionError, match=r"opcheck t::double sample 0 \[eager_static\]: "
                                             r"gradient of input 'x', static against eager: "
                                             r"not close"):
        opcheck(op, SAMPLES)


def test_an_output_differing_between_modes_is_caught(registry):
    calls = []

    def counting(x):            # not a function of its input: each call differs
        calls.append(1)
        return x + len(calls)
    op = registry.define("t::counter", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel()(counting)
    with pytest.raises(AssertionError, match=r"\[eager_static\]: output 'y', static against "
                                             r"eager: not close"):
        opcheck(op, SAMPLES)


def test_a_composite_rule_calling_an_op_without_a_gradient_rule_skips_double_grad(registry):
    """As for a backward kernel without a rule: the op promises no second derivative
    (vision::max_pool2d's rule calls max_pool2d_grad, which has none)."""
    op = registry.define("t::square", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(np.square)
    helper = registry.define("t::twice_no_grad", inputs=["x", "dy"], outputs=["dx"],
                             meta=lambda x, dy: x)
    helper.kernel()(lambda x, dy: 2 * x * dy)

    @op.grad(needs=("x",))
    def square_grad(x, dy):
        return helper(x, dy)       # an op without a gradient rule: no double backward
    report = opcheck(op, SAMPLES)
    assert report == {"meta": "ok", "gradient": "ok",
                      "reads": "skipped: the gradient rule declares no reads=",
                      "double_grad": "skipped: the gradient of input 'x' is not "
                                     "differentiable again (the rule calls "
                                     "t::twice_no_grad, which has no gradient rule)",
                      "eager_static": "ok"}


def test_a_rule_computing_outside_autograd_skips_double_grad(registry):
    op = registry.define("t::cube", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(lambda x: x ** 3)
    multiply = fastop.ops.get("fastop::multiply")

    @op.grad(needs=("x",))
    def cube_grad(x, dy):
        with fastop.no_grad():     # right values, nothing recorded
            return multiply(multiply(multiply(x, x), 3.0), dy)
    assert opcheck(op, SAMPLES)["double_grad"] == (
        "skipped: the gradient of input 'x' is not differentiable again (the rule "
        "computes it outside autograd)")


def test_variadic_and_optional_inputs(registry):
    op = registry.define("t::weighted_sum", inputs=["xs*", "w?"], outputs=["y"],
                         meta=lambda xs, w: xs[0])
    add, multiply = fastop.ops.get("fastop::add"), fastop.ops.get("fastop::multiply")

    @op.kernel("float32", "float64")
    def weighted_sum(xs, w):
        total = sum(xs)
        return total if w is None else total * w

    @op.grad(needs=("xs", "w"), reads={"xs": ("w",), "w": ("xs",)})
    def weighted_sum_grad(xs, w, dy):
        if w is None:
            return [dy for _ in xs], None
        total = xs[0]
        for x in xs[1:]:
            total = add(total, x)
        return [multiply(dy, w) for _ in xs], multiply(dy, total)
    report = opcheck(op, [[[X, X * 2], X + 1], [[X, X, X]]])
    assert set(report.values()) == {"ok"}


def test_an_absent_optional_input_is_not_replaced_by_the_reads_check(registry):
    op = registry.define("t::maybe_scale", inputs=["x", "w?"], outputs=["y"],
                         meta=lambda x, w: x, differentiable=("x",))
    op.kernel("float32", "float64")(lambda x, w: x if w is None else x * w)
    multiply = fastop.ops.get("fastop::multiply")

    @op.grad(needs=("w",), reads={"x": ()})      # true only while w is absent
    def maybe_scale_grad(w, dy):
        return (dy if w is None else multiply(dy, w)), None
    assert opcheck(op, [[X]])["reads"] == "ok"
    with pytest.raises(AssertionError, match=r"\[reads\]: the gradient of input 'x' depends "
                                             r"on the contents of 'w'"):
        opcheck(op, [[X, X + 2]])


def test_opcheck_runs_every_check_on_an_elementwise_op_over_three_samples():
    """(What benchmarks/bench_plugins.py times: its target is under 0.5 s.)"""
    samples = [[X], [X.astype("float32")], [np.array([0.3, -1.2])]]
    report = opcheck("activations::user_relu_forward", samples)
    assert report["gradient"] == report["double_grad"] == "ok"


# -- how the samples are given -----------------------------------------------------------

def recording_op(registry, inputs=("x",)):
    """y = the sum of the inputs (a variadic input summed too); records the shapes each
    kernel call saw."""
    seen = []
    op = registry.define("t::recorded", inputs=list(inputs), outputs=["y"],
                         meta=lambda *xs: xs[0][0] if isinstance(xs[0], list) else xs[0])

    @op.kernel("float32", "float64")
    def recorded(*xs):
        flat = [v for x in xs if x is not None for v in (x if isinstance(x, list) else [x])]
        seen.append(tuple(np.shape(v) for v in flat))
        return sum(flat)
    return op, seen


def test_one_calls_inputs_are_one_sample(registry):
    """``opcheck(op, [x])`` checks the op on input x, as torch.library.opcheck(op, args)."""
    op, seen = recording_op(registry)
    x = np.ones((4, 5))
    report = opcheck(op, [x])
    assert report["meta"] == "ok" and set(seen) == {((4, 5),)}
    two, seen2 = recording_op(Registry(), inputs=("x", "w"))
    opcheck(two, [x, np.ones(5)])
    assert set(seen2) == {((4, 5), (5,))}
    opcheck(two, [fastop.to_tensor(x), fastop.to_tensor(np.ones(5))])     # Tensors too
    assert set(seen2) == {((4, 5), (5,))}


def test_lists_and_samples_are_several_samples(registry):
    op, seen = recording_op(registry)
    opcheck(op, [[np.ones(2)], [np.ones((3, 1))], Sample(np.ones(4))])
    assert set(seen) == {((2,),), ((3, 1),), ((4,),)}


def test_several_arrays_for_a_one_input_op_are_one_call_and_refused(registry):
    op, _ = recording_op(registry)
    with pytest.raises(ValueError, match=r"sample 0: 2 input\(s\) given, the op takes 1 "
                                         r"\(x\); opcheck takes one call's inputs"):
        opcheck(op, [np.ones(2), np.ones(3)])


def test_a_variadic_input_is_a_list_inside_a_sample(registry):
    op, seen = recording_op(registry, inputs=("xs*", "w?"))
    opcheck(op, [[[np.ones(2), np.ones(2)]], Sample([np.ones(3)], np.ones(3))])
    assert set(seen) == {((2,), (2,)), ((3,), (3,))}
    with pytest.raises(ValueError, match=r"the variadic input 'xs' takes a list of arrays, "
                                         r"got ndarray"):
        opcheck(op, [[np.ones(2), np.ones(2)]])     # one sample: xs=a, w=b


# -- NaN and Inf, and every failure naming its check -------------------------------------

def test_a_nan_output_from_finite_inputs_fails_the_meta_check(registry):
    op = scale_op(registry, kernel=lambda x, k: np.where(x > 0, np.nan, x).astype(x.dtype))
    with pytest.raises(AssertionError, match=r"opcheck t::scale sample 0 \[meta\]: output 'y' "
                                             r"\(dtype float32\) is not finite from finite "
                                             r"inputs: nan at index \(1, 0\)"):
        opcheck(op, SAMPLES)


def test_an_inf_gradient_from_finite_inputs_fails_the_gradient_check(registry):
    op = scale_op(registry, grad=lambda dy, k: dy / 0.0)
    with pytest.raises(AssertionError, match=r"opcheck t::scale sample 0 \[gradient\]: .*"
                                             r"gradient of input 'x'.*inf"):
        with np.errstate(divide="ignore"):
            opcheck(op, SAMPLES)


def test_a_nan_output_and_gradient_is_not_reported_ok(registry):
    """Finite differences of a NaN output are NaN too: equal to a NaN gradient, which
    once let such an op pass its gradient check."""
    op = registry.define("t::nan", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(lambda x: x * np.nan)
    op.grad_kernel(needs=["dy"])(lambda dy: dy * np.nan)
    with pytest.raises(AssertionError, match=r"\[meta\]: output 'y' .* is not finite"):
        opcheck(op, [X])


def test_nan_inputs_may_give_nan_outputs(registry):
    op = registry.define("t::plus_one", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(lambda x: x + 1)
    x = X.copy()
    x[0, 0] = np.nan
    assert opcheck(op, [x])["meta"] == "ok"


def test_a_rule_that_raises_fails_the_gradient_check_by_name(registry):
    def broken(dy, k):
        raise RuntimeError("rule broke")
    with pytest.raises(AssertionError, match=r"opcheck t::scale sample 0 \[gradient\]: "
                                             r"RuntimeError: rule broke"):
        opcheck(scale_op(registry, grad=broken), SAMPLES)


def test_a_wrong_second_derivative_fails_the_double_gradient_check(registry):
    """dx = twice(x) * dy is right to first order, but twice's own rule is wrong."""
    twice = registry.define("t::twice", inputs=["x"], outputs=["y"], meta=lambda x: x)
    twice.kernel("float32", "float64")(lambda x: 2 * x)
    multiply = fastop.ops.get("fastop::multiply")

    @twice.grad(needs=())
    def twice_grad(dy):
        return multiply(dy, 3.0)         # should be 2
    op = registry.define("t::square", inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel("float32", "float64")(np.square)

    @op.grad(needs=("x",))
    def square_grad(x, dy):
        return multiply(twice(x), dy)
    with pytest.raises(AssertionError, match=r"opcheck t::square sample 0 \[double_grad\]: "):
        opcheck(op, SAMPLES)


# -- the caller's mode ---------------------------------------------------------------------

def test_the_callers_mode_is_restored_after_a_check_inside_mode_guard(registry):
    from fastop.ops._dispatch import current_mode, mode_guard, set_mode
    try:
        with mode_guard("static"):
            assert opcheck(exp_op(registry, reads=None), [[X]])["eager_static"] == "ok"
            assert current_mode() == "static"
        assert current_mode() == "eager"
        fastop.enable_static()
        opcheck("fastop::multiply", [[X, X + 1]])
        assert current_mode() == "static"
    finally:
        set_mode("eager")
