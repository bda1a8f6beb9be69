"""The eager Tensor API: creation, dtypes, numpy interop, repr, operators with scalars and
broadcasting (against numpy), math functions, methods, indexing and its gradients."""
import numpy as np
import pytest

import fastop
from fastop.autograd import gradcheck


X = np.array([[0.3, -1.2, 0.7], [1.5, 0.1, -0.4]])


# --------------------------------------------------------------------------- creation

@pytest.mark.parametrize("data, dtype", [
    (1.5, "float32"), ([1.0, 2.0], "float32"), ([1, 2], "int64"), (True, "bool"),
    (np.arange(3, dtype=np.int32), "int32"), (X, "float64"),
    (X.astype(np.float16), "float16"), (np.arange(3, dtype=np.uint8), "uint8"),
    (np.arange(3, dtype=np.int16), "int16"), (X.astype(np.longdouble), "float32"),
], ids=["float", "float-list", "int-list", "bool", "int32-array", "float64-array",
        "float16-array", "uint8-array", "int16-array", "longdouble-array"])
def test_to_tensor_dtypes(data, dtype):
    t = fastop.to_tensor(data)
    assert t.dtype == dtype and isinstance(t, fastop.Tensor)
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))


@pytest.mark.parametrize("data", [
    np.array([1.5 + 2j]), np.array([1.7, 2.2], dtype=object), np.array(["12", "7"]),
    np.array(["2020-01-01"], dtype="datetime64[D]"), None,
], ids=["complex", "object", "str", "datetime", "None"])
def test_to_tensor_refuses_what_is_not_numbers(data):
    # these used to become int64 through an unsafe cast: [1.5+2j] gave [1]
    with pytest.raises(TypeError, match="to_tensor: 'data' must hold numbers"):
        fastop.to_tensor(data)


@pytest.mark.parametrize("data", [[[1, 2], [3]], [[1.0], [2.0, 3.0]], [[[1]], [2]]])
def test_to_tensor_refuses_a_ragged_list_naming_it(data):
    with pytest.raises(ValueError, match=r"to_tensor: 'data' must be rectangular .* got list"):
        fastop.to_tensor(data)


def test_to_tensor_refuses_a_uint64_that_int64_cannot_hold():
    with pytest.raises(OverflowError, match="uint64 value 9223372036854775813"):
        fastop.to_tensor(np.array([2**63 + 5], np.uint64))
    assert fastop.to_tensor(np.array([5], np.uint64)).numpy().tolist() == [5]


def test_creation_shapes_must_be_integers():
    with pytest.raises(TypeError, match="shape must hold integers, got \\[2.5\\]"):
        fastop.zeros([2.5])
    assert fastop.ones(np.int64(3)).shape == [3]
    assert fastop.zeros(fastop.to_tensor([2, 3])).shape == [2, 3]


@pytest.mark.parametrize("data", [0.1, [0.1, 1 / 3], 3.911083123456789])
def test_to_tensor_of_python_floats_with_dtype_float64_keeps_every_digit(data):
    # Python floats default to float32, but an explicit float64 reads them exactly
    got = fastop.to_tensor(data, dtype="float64")
    assert got.dtype == fastop.float64
    np.testing.assert_array_equal(got.numpy(), np.asarray(data, dtype=np.float64))
    assert fastop.to_tensor(data).dtype == fastop.float32


def test_to_tensor_copies_and_converts():
    src = X.copy()
    t = fastop.to_tensor(src, dtype="float32", stop_gradient=False)
    src[...] = 0
    assert t.dtype == fastop.float32 and not t.stop_gradient and t.is_leaf
    np.testing.assert_allclose(t.numpy(), X.astype(np.float32))
    again = fastop.to_tensor(t)
    assert again.stop_gradient and not np.shares_memory(again.numpy(), t.numpy())
    np.testing.assert_array_equal(fastop.Tensor(X).numpy(), X)
    strided = fastop.to_tensor(X.T)
    np.testing.assert_array_equal(strided.numpy(), X.T)


def test_from_numpy_shares_memory():
    a = X.copy()
    t = fastop.from_numpy(a)
    assert np.shares_memory(t.numpy(), a) and t.stop_gradient


@pytest.mark.parametrize("fn", [fastop.randn, fastop.rand])
def test_random_creation_is_reproducible_with_seed(fn):
    fastop.seed(7)
    a, c = fn([2, 3]), fn([2, 3], dtype="float64")
    fastop.seed(7)
    b, d = fn([2, 3]), fn([2, 3], dtype="float64")
    assert a.shape == [2, 3] and a.dtype == fastop.float32 and c.dtype == fastop.float64
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(c.numpy(), d.numpy())
    assert not np.array_equal(a.numpy(), fn([2, 3]).numpy())
    assert a.stop_gradient


def test_rand_is_in_unit_interval():
    values = fastop.rand([1000]).numpy()
    assert values.min() >= 0 and values.max() < 1


def test_filled_creation():
    assert fastop.zeros([2, 3]).numpy().tolist() == [[0.0] * 3] * 2
    assert fastop.ones(3, dtype="int64").numpy().tolist() == [1, 1, 1]
    full = fastop.full([2], 2.5, dtype="float64")
    assert full.dtype == fastop.float64 and full.numpy().tolist() == [2.5, 2.5]
    like = fastop.ones_like(fastop.to_tensor(X))
    assert like.dtype == fastop.float64 and like.shape == [2, 3]
    assert fastop.zeros_like(like).numpy().sum() == 0
    assert fastop.full_like(like, 4, dtype="int32").numpy().tolist() == [[4] * 3] * 2


def test_arange():
    assert fastop.arange(4).numpy().tolist() == [0, 1, 2, 3]
    assert fastop.arange(4).dtype == fastop.int64
    r = fastop.arange(0, 1, 0.25)
    assert r.dtype == fastop.float32 and r.numpy().tolist() == [0, 0.25, 0.5, 0.75]
    assert fastop.arange(1, 7, 2, dtype="float64").numpy().tolist() == [1.0, 3.0, 5.0]


# --------------------------------------------------------------------------- attributes

def test_attributes_and_numpy_zero_copy():
    t = fastop.to_tensor(X)
    assert t.shape == [2, 3] and isinstance(t.shape, list)
    assert t.dtype == fastop.float64 and t.ndim == 2 and t.size == 6
    assert t.stop_gradient and t.grad is None and t.is_leaf
    view = t.numpy()
    view[0, 0] = 42.0
    assert t.numpy()[0, 0] == 42.0
    assert fastop.to_tensor([[3.5]]).item() == 3.5
    assert float(fastop.to_tensor(2.0)) == 2.0 and int(fastop.to_tensor(3)) == 3
    with pytest.raises(ValueError, match="one element"):
        t.item()


def test_numpy_takes_paddles_positional_set_to_1d_flag():
    """``x.numpy(False)`` (PaddlePaddle 2.5 scripts): still the zero-copy array, a 0-D
    tensor's 0-D."""
    scalar = fastop.to_tensor(2.5)
    for flag in (False, True):
        assert scalar.numpy(flag).shape == ()
    t = fastop.to_tensor(X)
    t.numpy(False)[0, 1] = 7.0
    assert t.numpy()[0, 1] == 7.0


def test_set_value_refuses_values_of_another_kind():
    t = fastop.ones([2])
    with pytest.raises(TypeError, match="set_value: expected numbers for a float32 tensor, "
                                        "got a value of dtype complex128"):
        t.set_value(np.ones(2, complex))
    with pytest.raises(TypeError, match="set_value: a value of dtype float64 cannot be stored "
                                        "in the int64 tensor"):
        fastop.to_tensor([1, 2]).set_value(np.ones(2))
    t.set_value(np.array([3, 4]))       # integers into floats: same kind enough
    assert t.numpy().tolist() == [3.0, 4.0]


def test_set_value_writes_in_place():
    t = fastop.to_tensor(X, dtype="float32", stop_gradient=False)
    before = t.data_ptr
    t.set_value(np.ones((2, 3)))
    assert t.data_ptr == before and t.numpy().tolist() == [[1.0] * 3] * 2
    t.set_value(fastop.to_tensor(X))
    np.testing.assert_allclose(t.numpy(), X.astype(np.float32))
    with pytest.raises(ValueError, match=r"expected a value of shape \[2, 3\], got \[3\]"):
        t.set_value(np.ones(3))


def test_repr_looks_like_numpy_with_dtype_and_stop_gradient():
    t = fastop.to_tensor([[1.0, 2.0], [3.0, 4.0]], stop_gradient=False)
    assert repr(t) == ("Tensor(shape=[2, 2], dtype=float32, place=Place(cpu), "
                       "stop_gradient=False,\n"
                       "       [[1., 2.],\n"
                       "        [3., 4.]])")
    assert str(fastop.to_tensor(3)).endswith("stop_gradient=True,\n       3)")


def test_setitem_writes_in_place_outside_autograd():
    t = fastop.to_tensor(X)
    t[0, 1:] = 5.0
    t[1] = fastop.to_tensor(np.zeros(3))
    np.testing.assert_array_equal(t.numpy(), [[0.3, 5.0, 5.0], [0.0, 0.0, 0.0]])
    p = fastop.to_tensor(X, stop_gradient=False)
    with pytest.raises(ValueError, match=r"__setitem__: \(InvalidArgument\) Leaf Var \(\) "
                                         r"that doesn't stop gradient can't use inplace"):
        p[0] = 1.0
    with fastop.no_grad():
        p[0] = 1.0
    assert p.numpy()[0].tolist() == [1.0, 1.0, 1.0]


def test_setitem_on_a_non_leaf_is_recorded_as_paddle_does():
    w = fastop.to_tensor(X, stop_gradient=False)
    y = w * 3.0
    y[0, 1:] = 5.0
    y[1] = fastop.to_tensor([1.0, 2.0, 3.0], dtype="float64")
    np.testing.assert_allclose(y.numpy(), [[0.9, 5.0, 5.0], [1.0, 2.0, 3.0]])
    (y * y).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[2 * 0.9 * 3.0, 0, 0], [0, 0, 0]])
    z = w * 1.0
    kept = z * z                  # saves z: a later write is refused at backward
    z[0, 0] = 1.0
    with pytest.raises(RuntimeError, match="modified in place"):
        kept.sum().backward()
    v = fastop.to_tensor([2.0, 4.0], dtype="float64", stop_gradient=False)
    u = w * 1.0
    u[:, 1:] = v[:, None] * 1.0          # broadcast along the row: each v twice
    np.testing.assert_allclose(u.numpy()[:, 1:], [[2.0, 2.0], [4.0, 4.0]])
    (u * 3.0).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [6.0, 6.0])


def test_deepcopy_and_pickle_of_leaves():
    import copy
    import pickle
    t = fastop.to_tensor(X, stop_gradient=False)
    t.grad = fastop.ones([2, 3], dtype="float64")
    c = copy.deepcopy(t)
    assert not c.stop_gradient and not np.shares_memory(c.numpy(), t.numpy())
    np.testing.assert_array_equal(c.numpy(), X)
    np.testing.assert_array_equal(c.grad.numpy(), np.ones_like(X))
    p = pickle.loads(pickle.dumps(t))
    assert p.dtype == fastop.float64 and not p.stop_gradient and p.grad is None
    np.testing.assert_array_equal(p.numpy(), X)
    with pytest.raises(RuntimeError, match="only leaf tensors"):
        copy.deepcopy(t[0])


def test_detach_and_clear_grad():
    t = fastop.to_tensor(X, stop_gradient=False)
    d = t.detach()
    assert d.stop_gradient and np.shares_memory(d.numpy(), t.numpy())
    t.grad = fastop.ones([2, 3], dtype="float64")
    t.clear_grad()
    assert t.grad.numpy().sum() == 0 and t.grad.shape == [2, 3]
    t.clear_grad(set_to_zero=False)
    assert t.grad is None


# --------------------------------------------------------------------------- operators

BINARY = [
    ("add", lambda a, b: a + b), ("subtract", lambda a, b: a - b),
    ("multiply", lambda a, b: a * b), ("divide", lambda a, b: a / b),
]


@pytest.mark.parametrize("name, op", BINARY, ids=[n for n, _ in BINARY])
def test_binary_operators_with_scalars_and_broadcasting(name, op):
    a = X.astype(np.float32)
    b = np.array([2.0, -3.0, 4.0], dtype=np.float32)
    ta, tb = fastop.to_tensor(a), fastop.to_tensor(b)
    for got, want in [(op(ta, tb), op(a, b)), (op(ta, 2), op(a, np.float32(2))),
                      (op(2.5, ta), op(np.float32(2.5), a)), (op(ta, b), op(a, b)),
                      (op(b, ta), op(b, a))]:
        assert isinstance(got, fastop.Tensor) and got.dtype == fastop.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("scalar", [0.5, np.float64(0.5), np.float32(0.5)],
                         ids=["float", "np.float64", "np.float32"])
def test_integer_tensor_with_float_scalar_computes_in_float32(scalar):
    # np.float32 is no Python float: it used to take the tensor's dtype (0.5 -> 0)
    ints = fastop.to_tensor(np.array([1, 2], np.int32))
    out = ints + scalar
    assert out.dtype == fastop.float32 and out.numpy().tolist() == [1.5, 2.5]
    assert (scalar * ints).numpy().tolist() == [0.5, 1.0]


def test_true_division_of_integer_tensors():
    out = fastop.to_tensor([1, 2]) / 2
    assert out.dtype == fastop.float32 and out.numpy().tolist() == [0.5, 1.0]


def test_binary_operator_dtype_mismatch_names_the_op():
    with pytest.raises(TypeError, match="fastop::add: x and y must have the same dtype"):
        fastop.to_tensor(X) + fastop.to_tensor(X, dtype="int32")


def test_float32_and_float64_operands_compute_in_float64():
    out = fastop.to_tensor(X) + fastop.to_tensor(X, dtype="float32")
    assert out.dtype == fastop.float64


# float16 is a storage dtype: ops without a kernel for it compute in float32
H = (X * 4).astype(np.float16)
U = np.array([[0, 7, 255], [3, 128, 1]], np.uint8)
STORAGE_CASES = {
    "f16+f16": (lambda a, b, u: a + b, lambda a, b, u: a + b),
    "f16*f32": (lambda a, b, u: a * b.astype("float32"),
                lambda a, b, u: a * b.astype(np.float32)),
    "f16-2.5": (lambda a, b, u: a - 2.5, lambda a, b, u: a - np.float32(2.5)),
    "tanh": (lambda a, b, u: fastop.tanh(a), lambda a, b, u: np.tanh(a)),
    "matmul": (lambda a, b, u: a @ b.T, lambda a, b, u: a @ b.T),
    "max": (lambda a, b, u: fastop.maximum(a, u.astype("float16")),
            lambda a, b, u: np.maximum(a, u)),
}


@pytest.mark.parametrize("case", sorted(STORAGE_CASES))
def test_storage_dtype_operands_compute_in_float32(case):
    on_tensors, on_arrays = STORAGE_CASES[case]
    out = on_tensors(fastop.to_tensor(H), fastop.to_tensor(H[::-1]), fastop.to_tensor(U))
    want = on_arrays(H.astype(np.float32), H[::-1].astype(np.float32), U.astype(np.float32))
    assert out.dtype == fastop.float32
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_an_op_with_a_kernel_for_every_dtype_keeps_storage_dtypes():
    joined = fastop.concat([fastop.to_tensor(H), fastop.to_tensor(H)])   # a numpy kernel
    assert joined.dtype == fastop.float16
    np.testing.assert_array_equal(joined.numpy(), np.concatenate([H, H]))
    flat = fastop.to_tensor(H).reshape([-1])      # Cython kernels: computed in float32
    assert flat.dtype == fastop.float32 and flat.numpy().tolist() == H.ravel().tolist()


@pytest.mark.parametrize("dtype", ["float16", "uint8"])
def test_casts_to_and_from_storage_dtypes_keep_them(dtype):
    t = fastop.to_tensor(np.abs(X) * 50)
    s = t.astype(dtype)
    assert s.dtype == dtype
    np.testing.assert_array_equal(s.numpy(), (np.abs(X) * 50).astype(dtype))
    back = fastop.cast(s, "float64")
    np.testing.assert_array_equal(back.numpy(), s.numpy().astype(np.float64))


def test_gradient_reaches_a_float16_leaf_in_its_dtype():
    x = fastop.to_tensor(H, stop_gradient=False)
    y = (x * x).sum()
    assert y.dtype == fastop.float32
    y.backward()
    assert x.grad.dtype == fastop.float16
    np.testing.assert_array_equal(x.grad.numpy(), (2 * H.astype(np.float32)).astype(np.float16))


def test_a_python_kernel_for_every_dtype_gets_storage_dtypes_as_they_are():
    from fastop.ops import registry
    name = "tensortest::double"
    op = registry.get(name) if name in registry else registry.define(
        name, inputs=["x"], meta=lambda x: x, kernels={"*": lambda x: x * x.dtype.type(2)})
    out = op(fastop.to_tensor(H))
    assert out.dtype == fastop.float16            # no float32 detour: it has a kernel
    np.testing.assert_array_equal(out.numpy(), H * np.float16(2))


def test_bool_tensor_with_an_integer_scalar_computes_in_int64():
    # `mask == 2` used to turn 2 into True: [True, False] == 2 gave [True, False]
    mask = fastop.to_tensor(np.array([True, False]))
    assert (mask == 2).numpy().tolist() == [False, False]
    assert (mask < 2).numpy().tolist() == [True, True]
    out = mask + 1
    assert out.dtype == fastop.int64 and out.numpy().tolist() == [2, 1]
    assert (mask == True).numpy().tolist() == [True, False]    # noqa: E712 (bool stays)


def test_operator_operand_errors_name_the_op():
    ints = fastop.to_tensor([1, 2], dtype="int32")
    with pytest.raises(OverflowError, match=r"fastop::add: input 'y' is 1099511627776, which "
                                            r"does not fit the int32 the op computes in"):
        ints + 2**40
    with pytest.raises(TypeError, match="fastop::multiply: input 'y' must be a tensor, an "
                                        "array or a number, got array"):
        fastop.ones([2]) * np.ones(2, np.complex64)
    assert (ints + 1).numpy().tolist() == [2, 3]


def test_op_inputs_that_are_not_numbers_name_the_op_and_input():
    with pytest.raises(TypeError, match=r"fastop::exp: input 'x' must be a tensor, an array "
                                        r"or a number, got 'a'"):
        fastop.exp("a")
    with pytest.raises(TypeError, match=r"fastop::add: input 'y' must be"):
        fastop.add(fastop.ones([2]), np.ones(2, complex))


def test_neg_pow_matmul_operators():
    t = fastop.to_tensor(X)
    np.testing.assert_array_equal((-t).numpy(), -X)
    np.testing.assert_allclose((t ** 2).numpy(), X ** 2)
    np.testing.assert_allclose((t @ t.numpy().T).numpy(), X @ X.T)


@pytest.mark.parametrize("name, op", [
    ("equal", lambda a, b: a == b), ("not_equal", lambda a, b: a != b),
    ("less_than", lambda a, b: a < b), ("less_equal", lambda a, b: a <= b),
    ("greater_than", lambda a, b: a > b), ("greater_equal", lambda a, b: a >= b),
])
def test_comparisons_give_bool_tensors(name, op):
    got = op(fastop.to_tensor(X), 0.1)
    assert got.dtype == fastop.bool and got.stop_gradient
    np.testing.assert_array_equal(got.numpy(), op(X, 0.1))


def test_tensors_hash_by_identity():
    a, b = fastop.to_tensor(X), fastop.to_tensor(X)
    assert len({a, b}) == 2 and {a: 1}[a] == 1


def test_operator_gradients_with_broadcasting():
    a = fastop.to_tensor(X, stop_gradient=False)
    b = fastop.to_tensor([2.0, -3.0, 4.0], dtype="float64", stop_gradient=False)
    (a * b + a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to([3.0, -2.0, 5.0], X.shape))
    np.testing.assert_allclose(b.grad.numpy(), X.sum(axis=0))


# --------------------------------------------------------------------------- math functions

UNARY = {
    "tanh": np.tanh, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "square": np.square,
    "abs": np.abs, "relu": lambda a: np.maximum(a, 0), "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_match_numpy(name):
    a = np.abs(X) + 0.1 if name in ("log", "sqrt") else X
    got = getattr(fastop, name)(fastop.to_tensor(a))
    np.testing.assert_allclose(got.numpy(), UNARY[name](a), rtol=1e-12)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide"])
def test_binary_functions_match_numpy(name):
    got = getattr(fastop, name)(fastop.to_tensor(X), fastop.to_tensor(np.cos(X)))
    np.testing.assert_allclose(got.numpy(), getattr(np, name)(X, np.cos(X)))


def test_matmul_function():
    t = fastop.to_tensor(X)
    np.testing.assert_allclose(fastop.matmul(t, t, transpose_y=True).numpy(), X @ X.T)


@pytest.mark.parametrize("name", ["mean", "sum", "max"])
@pytest.mark.parametrize("axis, keepdim", [(None, False), (1, False), (0, True), ([0, 1], False)])
def test_reductions_function_and_method(name, axis, keepdim):
    t = fastop.to_tensor(X)
    want = getattr(np, name)(X, axis=None if axis is None else tuple(np.atleast_1d(axis)),
                             keepdims=keepdim)
    for got in (getattr(fastop, name)(t, axis=axis, keepdim=keepdim),
                getattr(t, name)(axis=axis, keepdim=keepdim)):
        np.testing.assert_allclose(got.numpy(), want)


def test_shape_functions_and_methods():
    t = fastop.to_tensor(X)
    assert fastop.reshape(t, [3, 2]).shape == [3, 2] and t.reshape([-1]).shape == [6]
    np.testing.assert_array_equal(fastop.transpose(t, [1, 0]).numpy(), X.T)
    np.testing.assert_array_equal(t.T.numpy(), X.T)
    np.testing.assert_array_equal(fastop.concat([t, t], axis=1).numpy(),
                                  np.concatenate([X, X], axis=1))


def test_astype():
    t = fastop.to_tensor(X).astype("int32")
    assert t.dtype == fastop.int32 and t.numpy().tolist() == X.astype(np.int32).tolist()


# --------------------------------------------------------------------------- indexing

@pytest.mark.parametrize("key", [0, -1, (1, 2), slice(None, None, 2), (Ellipsis, 1),
                                 (None, 0), (slice(1, None), slice(None, None, -1))],
                         ids=["int", "negative", "pair", "step", "ellipsis", "newaxis",
                              "reversed"])
def test_basic_indexing_is_a_view(key):
    t = fastop.to_tensor(X)
    got = t[key]
    assert isinstance(got, fastop.Tensor)
    np.testing.assert_array_equal(got.numpy(), X[key])
    if got.size:
        assert np.shares_memory(got.numpy(), t.numpy())


@pytest.mark.parametrize("key", [[1, 0, 1], (slice(None), [2, 0]),
                                 np.array([[0], [1]]), (0, fastop.to_tensor([2, 2]))],
                         ids=["rows", "columns", "2d-index", "tensor-index"])
def test_integer_array_gather(key):
    t = fastop.to_tensor(X)
    np_key = tuple(k.numpy() if isinstance(k, fastop.Tensor) else k for k in key) \
        if isinstance(key, tuple) else key
    np.testing.assert_array_equal(t[key].numpy(), X[np_key])


def test_indexing_gradients_scatter_and_add_repeated_indices():
    t = fastop.to_tensor(X, stop_gradient=False)
    t[[1, 0, 1]].backward(fastop.to_tensor(np.arange(9.0).reshape(3, 3)))
    np.testing.assert_array_equal(t.grad.numpy(), [[3, 4, 5], [6 + 0, 8, 10]])
    s = fastop.to_tensor(X, stop_gradient=False)
    s[:, 1].backward()
    np.testing.assert_array_equal(s.grad.numpy(), [[0, 1, 0], [0, 1, 0]])
    assert gradcheck(lambda v: v[1:, ::-1], [s])
    assert gradcheck(lambda v: v[[0, 0, 1], [2, 2, 0]], [s])
    assert gradcheck(lambda v: v[X > 0], [s])                      # boolean mask


def test_indexing_gradient_goes_where_the_index_pointed_when_read():
    # the index tensor or array written after the forward pass does not move the gradient
    t = fastop.to_tensor(np.zeros(4), stop_gradient=False)
    idx, arr = fastop.to_tensor(np.array([0, 1])), np.array([3])
    y = t[idx].sum() + t[arr].sum()
    idx.set_value(np.array([2, 3]))
    arr[0] = 0
    y.backward()
    np.testing.assert_array_equal(t.grad.numpy(), [1, 1, 0, 1])


def test_indexing_backward_twice_needs_retain_graph():
    t = fastop.to_tensor(X, stop_gradient=False)
    row = t[1]
    row.backward()
    with pytest.raises(RuntimeError, match="op 'fastop::slice' a second time.*"
                                           "retain_graph=True"):
        row.backward()


def test_indexing_gradient_is_differentiable_again():
    t = fastop.to_tensor(X, stop_gradient=False)
    seed = fastop.to_tensor(np.ones(3), stop_gradient=False)
    (g,) = fastop.grad(t[1], t, seed, create_graph=True)
    assert not g.stop_gradient
    (gg,) = fastop.grad(g[1], seed)
    np.testing.assert_array_equal(gg.numpy(), [1.0, 1.0, 1.0])


def test_retain_grads_keeps_a_non_leafs_gradient():
    """PaddlePaddle's Tensor.retain_grads: after backward a non-leaf that called it has
    its gradient in .grad (accumulated over passes, as a leaf's); one that did not has
    None; fastop.grad writes no .grad."""
    w = fastop.to_tensor([1.0, 2.0, 3.0], stop_gradient=False)
    h = w * w
    h.retain_grads()
    kept_out = (h * 3.0).sum()
    kept_out.retain_grads()                 # the root: its gradient is ones
    plain = h + 1.0
    out = kept_out + plain.sum()
    out.backward(retain_graph=True)
    np.testing.assert_allclose(h.grad.numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_allclose(kept_out.grad.numpy(), 1.0)
    assert plain.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [8.0, 16.0, 24.0])
    out.backward()
    np.testing.assert_allclose(h.grad.numpy(), [8.0, 8.0, 8.0])
    h2 = w * 2.0
    h2.retain_grads()
    fastop.grad(h2.sum(), w)
    assert h2.grad is None


def test_retain_grads_on_a_leaf_or_a_constant_changes_nothing():
    w = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
    w.retain_grads()
    c = fastop.to_tensor([5.0, 6.0])
    c.retain_grads()
    (w * c).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [5.0, 6.0])
    assert c.grad is None and c.stop_gradient


def test_a_0d_tensor_formats_as_its_number():
    assert f"{fastop.to_tensor(1.5):.2f}" == "1.50" and f"{fastop.to_tensor(7):>3}" == "  7"
    assert format(fastop.to_tensor([1.0])).startswith("Tensor(shape=[1]")
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{fastop.to_tensor([1.0]):.2f}"
