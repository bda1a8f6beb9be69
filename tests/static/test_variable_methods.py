"""Static Variables have the methods eager Tensors have as tensor functions: each call
appends its op, and the program runs to what the eager method computes."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops._dispatch import mode_guard
from fastop.tensor._common import TENSOR_METHODS

X = np.array([[0.5, 2.0, 1.5], [3.0, 0.25, 1.0]], dtype=np.float32)
Y = np.array([[1.0, 0.5, 2.5], [0.75, 2.0, 1.0]], dtype=np.float32)
I = np.array([[2, 0, 1], [1, 1, 0]], dtype=np.int64)

# method -> (a call of it on Variables/Tensors x, y (float32 [2, 3]), i (int64 [2, 3]);
#            the op type it appends). The table must cover every Tensor method there is;
# it may name more (those run where the method exists).
CASES = {
    "neg": (lambda x, y, i: x.neg(), "fastop::neg"),
    "pow": (lambda x, y, i: x.pow(2.0), "fastop::pow"),
    "tanh": (lambda x, y, i: x.tanh(), "fastop::tanh"),
    "exp": (lambda x, y, i: x.exp(), "fastop::exp"),
    "log": (lambda x, y, i: x.log(), "fastop::log"),
    "sqrt": (lambda x, y, i: x.sqrt(), "fastop::sqrt"),
    "square": (lambda x, y, i: x.square(), "fastop::square"),
    "abs": (lambda x, y, i: (-x).abs(), "fastop::abs"),
    "relu": (lambda x, y, i: (x - 1.0).relu(), "fastop::relu"),
    "sigmoid": (lambda x, y, i: x.sigmoid(), "fastop::sigmoid"),
    "matmul": (lambda x, y, i: x.matmul(y, transpose_y=True), "fastop::matmul"),
    "add": (lambda x, y, i: x.add(y), "fastop::add"),
    "subtract": (lambda x, y, i: x.subtract(y), "fastop::subtract"),
    "multiply": (lambda x, y, i: x.multiply(y), "fastop::multiply"),
    "divide": (lambda x, y, i: x.divide(y), "fastop::divide"),
    "mean": (lambda x, y, i: x.mean(axis=1, keepdim=True), "fastop::mean"),
    "sum": (lambda x, y, i: x.sum(axis=0), "fastop::sum"),
    "max": (lambda x, y, i: x.max(axis=1), "fastop::max"),
    "min": (lambda x, y, i: x.min(axis=0), "fastop::min"),
    "prod": (lambda x, y, i: x.prod(axis=1), "fastop::prod"),
    "cumsum": (lambda x, y, i: x.cumsum(axis=1), "fastop::cumsum"),
    "clip": (lambda x, y, i: x.clip(0.75, 2.0), "fastop::clip"),
    "maximum": (lambda x, y, i: x.maximum(y), "fastop::maximum"),
    "minimum": (lambda x, y, i: x.minimum(y), "fastop::minimum"),
    "isnan": (lambda x, y, i: (x.log() - 1.0).sqrt().isnan(), "fastop::isnan"),
    "isinf": (lambda x, y, i: (x - x).log().isinf(), "fastop::isinf"),
    "isfinite": (lambda x, y, i: (x - 1.0).log().isfinite(), "fastop::isfinite"),
    "all": (lambda x, y, i: (x > 0.3).all(axis=1), "fastop::all"),
    "any": (lambda x, y, i: (x > 2.5).any(axis=0), "fastop::any"),
    "numel": (lambda x, y, i: x.numel(), "fastop::sum"),
    "reshape": (lambda x, y, i: x.reshape([3, 2]), "fastop::reshape"),
    "transpose": (lambda x, y, i: x.transpose([1, 0]), "fastop::transpose"),
    # concat takes a list (Paddle binds it all the same): called through the class
    "concat": (lambda x, y, i: type(x).concat([x, y], axis=1), "fastop::concat"),
    "argmax": (lambda x, y, i: x.argmax(axis=1), "fastop::argmax"),
    "argmin": (lambda x, y, i: x.argmin(axis=0), "fastop::argmin"),
    "topk": (lambda x, y, i: x.topk(2, axis=1), "fastop::topk"),
    "where": (lambda x, y, i: (x > y).where(x, y), "fastop::where"),
    "nonzero": (lambda x, y, i: (x > 1.2).nonzero(), "fastop::nonzero"),
    "split": (lambda x, y, i: x.split([1, 2], axis=1), "fastop::slice"),
    "chunk": (lambda x, y, i: x.chunk(3, axis=1), "fastop::slice"),
    "squeeze": (lambda x, y, i: x.reshape([1, 2, 3]).squeeze(0), "fastop::squeeze"),
    "unsqueeze": (lambda x, y, i: x.unsqueeze(1), "fastop::unsqueeze"),
    # in place in eager mode, the out-of-place op in a program (PaddlePaddle's rule)
    "squeeze_": (lambda x, y, i: x.reshape([1, 2, 3]).squeeze_(0), "fastop::squeeze"),
    "unsqueeze_": (lambda x, y, i: x.unsqueeze_(1), "fastop::unsqueeze"),
    "reshape_": (lambda x, y, i: x.reshape_([3, 2]), "fastop::reshape"),
    "flatten_": (lambda x, y, i: x.reshape([1, 2, 3]).flatten_(1), "fastop::reshape"),
    "add_": (lambda x, y, i: x.add_(y), "fastop::add"),
    "subtract_": (lambda x, y, i: x.subtract_(y), "fastop::subtract"),
    "multiply_": (lambda x, y, i: x.multiply_(y), "fastop::multiply"),
    "divide_": (lambda x, y, i: x.divide_(y), "fastop::divide"),
    "pow_": (lambda x, y, i: x.pow_(2.0), "fastop::pow"),
    "scale_": (lambda x, y, i: x.scale_(2.0, 1.0), "fastop::multiply"),
    "clip_": (lambda x, y, i: x.clip_(0.75, 2.0), "fastop::clip"),
    "exp_": (lambda x, y, i: x.exp_(), "fastop::exp"),
    "log_": (lambda x, y, i: x.log_(), "fastop::log"),
    "sqrt_": (lambda x, y, i: x.sqrt_(), "fastop::sqrt"),
    "tanh_": (lambda x, y, i: x.tanh_(), "fastop::tanh"),
    "abs_": (lambda x, y, i: (-x).abs_(), "fastop::abs"),
    "neg_": (lambda x, y, i: x.neg_(), "fastop::neg"),
    "reciprocal_": (lambda x, y, i: x.reciprocal_(), "fastop::divide"),
    "zero_": (lambda x, y, i: x.zero_(), "fastop::full_like"),
    "fill_": (lambda x, y, i: x.fill_(3.0), "fastop::full_like"),
    "scale": (lambda x, y, i: x.scale(2.0, 1.0, bias_after_scale=False), "fastop::add"),
    "reciprocal": (lambda x, y, i: x.reciprocal(), "fastop::divide"),
    "gather": (lambda x, y, i: x.gather(i[0], axis=1), "fastop::gather"),
    "take_along_axis": (lambda x, y, i: x.take_along_axis(i, axis=1),
                        "fastop::take_along_axis"),
    "flatten": (lambda x, y, i: x.reshape([1, 2, 3]).flatten(1), "fastop::reshape"),
    "clone": (lambda x, y, i: x.clone(), "fastop::cast"),
    "expand": (lambda x, y, i: x.sum(axis=0).expand([4, 3]), "fastop::broadcast_to"),
    "expand_as": (lambda x, y, i: x.sum(axis=0).expand_as(y), "fastop::expand_as"),
    "equal": (lambda x, y, i: x.equal(y * 0 + x), "fastop::equal"),
    "not_equal": (lambda x, y, i: x.not_equal(y), "fastop::not_equal"),
    "greater_than": (lambda x, y, i: x.greater_than(y), "fastop::greater_than"),
    "greater_equal": (lambda x, y, i: x.greater_equal(y), "fastop::greater_equal"),
    "less_than": (lambda x, y, i: x.less_than(y), "fastop::less_than"),
    "less_equal": (lambda x, y, i: x.less_equal(y), "fastop::less_equal"),
    "equal_all": (lambda x, y, i: x.equal_all(x * 1.0), "fastop::all"),
    "logical_and": (lambda x, y, i: (x > 1).logical_and(y > 1), "fastop::logical_and"),
    "logical_or": (lambda x, y, i: (x > 1).logical_or(y > 1), "fastop::logical_or"),
    "logical_xor": (lambda x, y, i: (x > 1).logical_xor(y > 1), "fastop::logical_xor"),
    "logical_not": (lambda x, y, i: (x > 1).logical_not(), "fastop::logical_not"),
    "astype": (lambda x, y, i: x.astype("float64"), "fastop::cast"),
    "cast": (lambda x, y, i: x.cast("int64"), "fastop::cast"),
}

# trigonometric, rounding and rsqrt methods and their in-place forms: one op each (asin
# and acos of x * 0.3, inside their domain)
UNARY = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil", "round",
         "trunc", "rsqrt")
CASES.update({
    method: (lambda x, y, i, method=method, name=name: getattr(
        x * 0.3 if name in ("asin", "acos") else x, method)(), f"fastop::{name}")
    for name in UNARY for method in (name, f"{name}_")})
CASES.update({
    "sign": (lambda x, y, i: (x - 1.0).sign(), "fastop::sign"),
    "remainder": (lambda x, y, i: x.remainder(y), "fastop::remainder"),
    "mod": (lambda x, y, i: x.mod(y), "fastop::remainder"),
    "floor_mod": (lambda x, y, i: x.floor_mod(y), "fastop::remainder"),
    "remainder_": (lambda x, y, i: x.remainder_(y), "fastop::remainder"),
    "mod_": (lambda x, y, i: x.mod_(y), "fastop::remainder"),
    "floor_mod_": (lambda x, y, i: x.floor_mod_(y), "fastop::remainder"),
    "scatter": (lambda x, y, i: x.scatter(i[1, :2], y), "fastop::scatter"),
    "scatter_": (lambda x, y, i: x.scatter_(i[1, :2], y, overwrite=False), "fastop::scatter"),
    "masked_fill": (lambda x, y, i: x.masked_fill(x > y, 0.5), "fastop::where"),
    "masked_fill_": (lambda x, y, i: x.masked_fill_(x > y, y.sum()), "fastop::where"),
})


METHODS = set(TENSOR_METHODS) | {"astype", "cast"}     # astype/cast: C methods of Tensor


def test_every_tensor_method_is_a_variable_method_and_tested():
    assert all(callable(getattr(static.Variable, name, None)) for name in METHODS)
    assert METHODS <= set(CASES), METHODS - set(CASES)


def _flat(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_appends_its_op_and_runs_as_in_eager_mode(static_env, name):
    main, _, _ = static_env
    call, op_type = CASES[name]
    x = static.data("x", [2, 3], "float32")
    y = static.data("y", [2, 3], "float32")
    i = static.data("i", [2, 3], "int64")
    before = len(main.global_block().ops)
    outs = _flat(call(x, y, i))
    assert all(isinstance(v, static.Variable) for v in outs)
    appended = [op.type for op in main.global_block().ops[before:]]
    assert op_type in appended, appended
    exe = static.Executor(fastop.CPUPlace())
    got = exe.run(main, feed={"x": X, "y": Y, "i": I}, fetch_list=outs)
    with mode_guard("eager"):
        want = [t.numpy() for t in _flat(call(fastop.to_tensor(X), fastop.to_tensor(Y),
                                              fastop.to_tensor(I)))]
    for g, w, v in zip(got, want, outs):
        assert g.dtype == w.dtype == v.dtype.numpy_dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_methods_build_ops_under_program_guard_in_eager_mode():
    fastop.disable_static()
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        x = static.data("x", [None, 3], "float32")
        y = x.clip(0.75, 2.0).argmax(axis=1)
    assert fastop.in_dynamic_mode()
    assert [op.type for op in main.global_block().ops] == ["fastop::clip",
                                                           "fastop::argmax"]
    got, = static.Executor(fastop.CPUPlace()).run(main, feed={"x": X}, fetch_list=[y])
    np.testing.assert_array_equal(got, np.clip(X, 0.75, 2.0).argmax(axis=1))
