"""The one dispatch entry (``fastop.ops._dispatch``): every way of calling an op gives the
same answer, scalars and numpy values convert by one rule, and the mode (eager/static)
and grad mode are per thread."""
from __future__ import annotations

import operator
import threading

import numpy as np
import pytest

import fastop
from fastop.ops import registry
from fastop.ops._dispatch import current_mode, mode_guard

# Every built-in op taking two tensors that broadcast elementwise, with its Tensor
# operator where Python has one.
BINARY = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "divide": operator.truediv, "pow": operator.pow,
    "equal": operator.eq, "not_equal": operator.ne, "less_than": operator.lt,
    "less_equal": operator.le, "greater_than": operator.gt, "greater_equal": operator.ge,
    "maximum": None, "minimum": None,
    "logical_and": None, "logical_or": None, "logical_xor": None,
    "remainder": operator.mod,
}
COMPARISONS = {"equal", "not_equal", "less_than", "less_equal", "greater_than",
               "greater_equal", "logical_and", "logical_or", "logical_xor"}
NUMPY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide, "pow": np.power, "equal": np.equal, "not_equal": np.not_equal,
         "less_than": np.less, "less_equal": np.less_equal, "greater_than": np.greater,
         "greater_equal": np.greater_equal, "maximum": np.maximum, "minimum": np.minimum,
         "logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor, "remainder": np.remainder}

TENSORS = {
    "int32": np.array([[1, -2, 3], [4, 0, 5]], np.int32),
    "int64": np.array([[1, -2, 3], [4, 0, 5]], np.int64),
    "bool": np.array([[True, False, True], [False, False, True]]),
    "float32": np.array([[0.5, -2.0, 3.0], [4.0, 0.0, 1.5]], np.float32),
    "float64": np.array([[0.5, -2.0, 3.0], [4.0, 0.0, 1.5]], np.float64),
}
SCALARS = [2, -3, 2.5, True, False, 2 ** 40, np.int32(3), np.int64(2), np.float32(2.5),
           np.float64(0.5), np.bool_(True)]


def scalar_kind(s) -> str:
    if isinstance(s, (bool, np.bool_)):
        return "bool"
    return "int" if isinstance(s, (int, np.integer)) else "float"


def expected_dtype(tensor: str, s) -> str:
    """The documented rule: a float scalar meeting an integer or bool tensor computes in
    float32, an integer scalar keeps an integer tensor's dtype (a bool tensor's becomes
    int64), a bool scalar and any scalar meeting a float tensor keep the tensor's."""
    kind = scalar_kind(s)
    if tensor.startswith("float") or kind == "bool":
        return tensor
    if kind == "float":
        return "float32"
    return "int64" if tensor == "bool" else tensor


def outcome(fn):
    """``(dtype, values)`` of what `fn` returns, or ``(error type, None)``."""
    try:
        result = fn()
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        return type(exc).__name__, None
    array = np.asarray(result.numpy() if hasattr(result, "numpy") else result)
    return str(array.dtype), array


def static_outcome(build, x: np.ndarray):
    """What the static program `build(v)` computes for the feed `x` (or the error that
    building or running it raises: a data-dependent one comes when it runs)."""
    main, startup = fastop.static.Program(), fastop.static.Program()
    fastop.enable_static()
    try:
        with fastop.static.program_guard(main, startup):
            v = fastop.static.data("x", list(x.shape), str(x.dtype))
            return outcome(lambda: fastop.static.Executor(fastop.CPUPlace()).run(
                main, feed={"x": x}, fetch_list=[build(v)])[0])
    finally:
        fastop.disable_static()


def same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[1] is None or b[1] is None:
        return a[1] is None and b[1] is None
    return a[1].shape == b[1].shape and np.array_equal(a[1], b[1], equal_nan=a[1].dtype.kind == "f")


def test_the_table_names_every_broadcasting_binary_built_in():
    """A new two-input elementwise op joins BINARY (and so this test's matrix)."""
    binary = set()
    x = fastop.ones([2, 3], "float64")
    for op in registry.ops("fastop"):
        if len(op.inputs) != 2 or any(a.variadic or a.optional for a in op.inputs) \
                or not op.name.split("::")[1] == op.short_name:
            continue
        try:
            out = op(x, fastop.ones([3], "float64"))
        except (TypeError, ValueError):
            continue
        if isinstance(out, fastop.Tensor) and out.shape == [2, 3] and \
                not op.short_name.endswith("_grad"):
            binary.add(op.short_name)
    assert binary == set(BINARY)


@pytest.mark.parametrize("reflected", [False, True], ids=["tensor-op-scalar",
                                                          "scalar-op-tensor"])
@pytest.mark.parametrize("dtype", sorted(TENSORS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_operator_function_op_and_static_agree_for_every_scalar(name, dtype, reflected):
    x_np = TENSORS[dtype]
    x = fastop.to_tensor(x_np)
    fn, op = getattr(fastop, name), registry.get(f"fastop::{name}")
    pyop = BINARY[name]

    def args(t, s):
        return (s, t) if reflected else (t, s)

    for s in SCALARS:
        ways = {"fastop." + name: outcome(lambda: fn(*args(x, s))),
                "registry op": outcome(lambda: op(*args(x, s))),
                "static fastop." + name: static_outcome(lambda v: fn(*args(v, s)), x_np)}
        if pyop is not None:
            ways["operator"] = outcome(lambda: pyop(*args(x, s)))
            ways["static operator"] = static_outcome(lambda v: pyop(*args(v, s)), x_np)
        first = next(iter(ways.values()))
        label = f"{name}({'s, x' if reflected else 'x, s'}) with x {dtype}, s={s!r}"
        assert all(same(first, w) for w in ways.values()), \
            f"{label}: " + "; ".join(f"{k}: {w[0]} {None if w[1] is None else w[1].tolist()}"
                                     for k, w in ways.items())
        if first[1] is None:
            # only a value the tensor's dtype cannot hold, or a kernel refusing the dtype
            continue
        compute = expected_dtype(dtype, s)
        if name == "divide" and compute in ("int32", "int64", "bool"):
            compute = "float32"                       # true division
        want = "bool" if name in COMPARISONS else compute
        assert first[0] == want, f"{label}: computed in {first[0]}, expected {want}"
        a = x_np.astype(compute)
        b = np.asarray(s).astype(compute)
        with np.errstate(all="ignore"):
            ref = NUMPY[name](*args(a, b))
        np.testing.assert_allclose(first[1], ref.astype(want), rtol=1e-6, err_msg=label)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_integer_scalar_the_dtype_cannot_hold_is_an_error_naming_the_op(dtype):
    x = fastop.to_tensor(TENSORS[dtype])
    big = 2 ** 40 if dtype == "int32" else 2 ** 70
    for call in (lambda: x * big, lambda: fastop.multiply(x, big),
                 lambda: registry.get("fastop::multiply")(x, big)):
        with pytest.raises((OverflowError, ValueError), match="multiply"):
            call()
    assert x.numpy().tolist() == TENSORS[dtype].tolist()      # still usable


def test_numpy_arrays_convert_by_the_same_rule_as_tensors():
    x = fastop.to_tensor(TENSORS["float32"])
    y = np.full((2, 3), 2.0, np.float32)
    for result in (x * y, fastop.multiply(x, y), y * x):
        assert isinstance(result, fastop.Tensor) and result.dtype == fastop.float32
        np.testing.assert_array_equal(result.numpy(), TENSORS["float32"] * 2)


# --------------------------------------------------------------------------- per thread

def test_a_program_built_on_one_thread_leaves_another_thread_eager():
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def builder():
        main, startup = fastop.static.Program(), fastop.static.Program()
        with mode_guard("static"), fastop.static.program_guard(main, startup):
            v = fastop.static.data("d", [2], "float32")
            seen["builder mode"] = current_mode()
            inside.set()
            release.wait(10)
            seen["builder result"] = type(fastop.tanh(v * 2.0)).__name__

    thread = threading.Thread(target=builder)
    thread.start()
    try:
        assert inside.wait(10)
        t = fastop.ones([2], "float32")
        assert current_mode() == "eager"
        assert isinstance(fastop.tanh(t), fastop.Tensor)
        assert isinstance(t * 2.0, fastop.Tensor)
        assert isinstance(t[0:1], fastop.Tensor)
    finally:
        release.set()
        thread.join(10)
    assert seen == {"builder mode": "static", "builder result": "Variable"}


def test_mode_guard_is_per_thread_and_enable_static_is_the_process_default():
    results = []
    fastop.enable_static()
    try:
        thread = threading.Thread(target=lambda: results.append(current_mode()))
        thread.start()
        thread.join(10)
        with mode_guard("eager"):
            assert current_mode() == "eager"
            other = threading.Thread(target=lambda: results.append(current_mode()))
            other.start()
            other.join(10)
    finally:
        fastop.disable_static()
    assert results == ["static", "static"]
    assert current_mode() == "eager"


def test_no_grad_on_one_thread_leaves_another_recording():
    inside, release = threading.Event(), threading.Event()

    def quiet():
        with fastop.no_grad():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=quiet)
    thread.start()
    try:
        assert inside.wait(10)
        x = fastop.to_tensor(np.ones(3, np.float32), stop_gradient=False)
        y = fastop.tanh(x).sum()
        assert not y.stop_gradient
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(1.0) ** 2, rtol=1e-6)
    finally:
        release.set()
        thread.join(10)


def test_keyword_calls_of_one_op_bind_their_own_attributes_whatever_their_order():
    """An op remembers its last few distinct keyword calls' bindings (a backward
    alternates matmul's transpose flags): each call computes with its own attributes,
    when they alternate, when more distinct calls than are remembered cycle, and when a
    list the caller passed is changed afterwards."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)).astype("float32")
    b = rng.standard_normal((3, 3)).astype("float32")
    x, y = fastop.to_tensor(a), fastop.to_tensor(b)
    flags = [{}, {"transpose_x": True}, {"transpose_y": True},
             {"transpose_x": True, "transpose_y": True}, {"transpose_x": False},
             {"transpose_y": False, "transpose_x": True}]
    for _ in range(3):
        for kw in flags:
            want = (a.T if kw.get("transpose_x") else a) @ (b.T if kw.get("transpose_y") else b)
            np.testing.assert_allclose(fastop.matmul(x, y, **kw).numpy(), want, rtol=1e-5)
    t = fastop.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
    perm = [1, 0]
    for _ in range(2):
        assert fastop.transpose(t, perm=perm).shape == [3, 2]
        assert fastop.transpose(t, perm=[0, 1]).shape == [2, 3]
    perm[:] = [0, 1]       # the caller's list changed: its new value counts ...
    assert fastop.transpose(t, perm=perm).shape == [2, 3]
    w = fastop.to_tensor(np.ones((2, 3), "float32"))
    w.stop_gradient = False
    fastop.transpose(w, perm=[1, 0]).sum().backward()   # ... and not in [1, 0]'s binding
    assert w.grad.shape == [2, 3]
