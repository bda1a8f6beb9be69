"""The executor: compilation and caching, zero-copy feeds, memory planning, shapes that
change at run time, and every error (each followed by a successful run)."""
import traceback
import weakref

import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import registry

from .conftest import assert_arena_sound

mm = registry.get("fastop::matmul")


def _var(main, name, shape, dtype="float32"):
    return main.current_block().create_var(name=name, dtype=dtype, shape=shape)


@pytest.fixture
def chain(static_env):
    """x [?, 3] @ w [3, 2] -> y, a parameter initialized by the startup program."""
    main, startup, scope = static_env
    x = static.data("x", [None, 3], "float32")
    w = static.create_parameter([3, 2], "float32", name="w")
    y = mm(x, w)
    return main, startup, scope, x, w, y


def _ok(exe, main, scope, y, rows=2):
    xv = np.arange(3 * rows, dtype="float32").reshape(rows, 3)
    (out,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_allclose(out, xv @ scope["w"], rtol=1e-6)


def test_compiles_once_per_signature(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    feed = {"x": np.ones((2, 3), "float32")}
    exe.run(main, feed=feed, fetch_list=[y])
    plan = exe.plan_of(main, feed, [y])
    assert plan is not None and plan.traced
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[y])
    assert exe.plan_of(main, feed, [y]) is plan
    other = {"x": np.ones((5, 3), "float32")}
    _ok(exe, main, scope, y, rows=5)
    assert exe.plan_of(main, other, [y]) is not plan
    mm(y, y, transpose_y=True)                  # editing the program recompiles
    assert exe.plan_of(main, feed, [y]) is None
    _ok(exe, main, scope, y)


def test_fetches_are_fresh_arrays(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    feed = {"x": np.ones((2, 3), "float32")}
    (a,) = exe.run(main, feed=feed, fetch_list=[y])
    (b,) = exe.run(main, feed={"x": np.zeros((2, 3), "float32")}, fetch_list=[y])
    assert not np.shares_memory(a, b)
    np.testing.assert_allclose(a, feed["x"] @ scope["w"], rtol=1e-6)
    (t,) = exe.run(main, feed=feed, fetch_list=[y], return_numpy=False)
    assert isinstance(t, fastop._core.storage.DenseTensor)
    (wv,) = exe.run(main, feed=feed, fetch_list=["w"])     # a persistable: a copy
    wv[:] = 0
    assert np.abs(scope["w"]).sum() > 0


def test_missing_feed(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    with pytest.raises(ValueError, match=r"missing feed: static.data variable 'x'.*"
                                         r"needed by op #0.*fastop::matmul"):
        exe.run(main, feed={}, fetch_list=[y])
    _ok(exe, main, scope, y)


def test_feed_conflicting_with_data(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    with pytest.raises(TypeError, match=r"feed 'x': expected dtype float32 .* got float64"
                                        r".*fastop::matmul"):
        exe.run(main, feed={"x": np.ones((2, 3))}, fetch_list=[y])
    with pytest.raises(ValueError,
                       match=r"feed 'x': expected shape \[None, 3\] .* got \[2, 4\]"):
        exe.run(main, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[y])
    with pytest.raises(ValueError, match=r"feed: the program has no variable 'z'"):
        exe.run(main, feed={"z": np.ones(1, "float32")}, fetch_list=[y])
    # values fastop has no dtype for, or that are no numbers at all, name the feed too
    with pytest.raises(TypeError, match=r"feed 'x': expected dtype float32 .* got complex128"):
        exe.run(main, feed={"x": np.ones((2, 3), complex)}, fetch_list=[y])
    with pytest.raises(ValueError, match=r"feed 'x': cannot read 'abc' as an array \(declared "
                                         r"float32\)"):
        exe.run(main, feed={"x": "abc"}, fetch_list=[y])
    _ok(exe, main, scope, y)


def test_fetch_of_unknown_variable(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    with pytest.raises(ValueError, match=rf"fetch_list: the program has no variable "
                                         rf"'{y.name}x'; did you mean '{y.name}'"):
        exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y.name + "x"])
    _ok(exe, main, scope, y)


def test_parameters_need_the_startup_program(chain, exe):
    main, startup, scope, x, w, y = chain
    with pytest.raises(RuntimeError, match=r"'w' has no value in the scope but is read by "
                                           r"op #0 .*fastop::matmul.*startup program") as info:
        exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y])
    assert not getattr(info.value, "__notes__", [])      # raised before any op ran
    exe.run(startup)
    _ok(exe, main, scope, y)


def test_cycle(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2, 2], "float32")
    a = _var(main, "a", [2, 2])
    b = mm(a, x)                                   # reads a, which is written below
    main.global_block().append_op("fastop::matmul", [b, x], outputs=a)
    with pytest.raises(ValueError, match=r"cycle: op #0 .* needs 'a' from op #1; "
                                         r"op #1 .* needs '.*' from op #0"):
        exe.run(main, feed={"x": np.eye(2, dtype="float32")}, fetch_list=[b])
    other = static.Program()
    with static.program_guard(other):
        z = static.data("z", [2, 2], "float32")
        out = mm(z, z)
    (r,) = exe.run(other, feed={"z": np.eye(2, dtype="float32")}, fetch_list=[out])
    np.testing.assert_array_equal(r, np.eye(2))


def test_read_before_write_is_reordered(static_env, exe):
    """A variable read by an op appended before its writer: the writer runs first."""
    main, _, _ = static_env
    x = static.data("x", [2, 2], "float32")
    a = _var(main, "a", [2, 2])
    b = mm(a, x)
    main.global_block().append_op("fastop::matmul", [x, x], outputs=a)
    xv = np.array([[1, 2], [3, 4]], "float32")
    (r,) = exe.run(main, feed={"x": xv}, fetch_list=[b])
    np.testing.assert_allclose(r, xv @ xv @ xv)


class UserError(Exception):
    pass


def _user_func(t):
    if _user_func.fail:
        raise UserError("bad input")
    return np.asarray(t) + 1


def test_python_op_raising(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    out = static.py_func(_user_func, x, _var(main, "y", [2]))
    _user_func.fail = True
    with pytest.raises(UserError, match="bad input") as info:
        exe.run(main, feed={"x": np.zeros(2, "float32")}, fetch_list=[out])
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "_user_func"
    assert any("py_func[_user_func]" in n and "op #0" in n for n in info.value.__notes__)
    _user_func.fail = False
    (r,) = exe.run(main, feed={"x": np.zeros(2, "float32")}, fetch_list=[out])
    np.testing.assert_array_equal(r, [1, 1])


def test_kernel_error_names_op_and_shapes(static_env, exe):
    main, _, _ = static_env
    a = static.data("a", [None, None], "float32")
    b = static.data("b", [None, None], "float32")
    out = mm(a, b)
    with pytest.raises(ValueError, match=r"matmul.*\[2, 3\].*\[4, 2\]") as info:
        exe.run(main, feed={"a": np.ones((2, 3), "float32"), "b": np.ones((4, 2), "float32")},
                fetch_list=[out])
    assert any("op #0" in n for n in info.value.__notes__)
    feed = {"a": np.ones((2, 3), "float32"), "b": np.ones((3, 2), "float32")}
    (r,) = exe.run(main, feed=feed, fetch_list=[out])
    np.testing.assert_array_equal(r, np.full((2, 2), 3))


def test_shapes_changing_at_run_time(static_env, exe):
    """A Python op whose result changes size between runs: later kernels get new
    buffers for that run and the arena is laid out again."""
    main, _, _ = static_env
    x = static.data("x", [2, 2], "float32")
    repeats = [1]
    rows = static.py_func(lambda t: np.repeat(np.asarray(t), repeats[0], axis=0), x,
                          _var(main, "rows", [None, 2]))
    y = mm(mm(rows, x), x)
    xv = np.array([[1, 2], [3, 4]], "float32")
    for k in (1, 3, 3, 2):
        repeats[0] = k
        (r,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
        np.testing.assert_allclose(r, np.repeat(xv, k, axis=0) @ xv @ xv)


def test_memory_plan_of_a_10_layer_mlp(static_env):
    """Forward + backward of a 10-layer MLP, run serially: the arena stays within 1.3x
    of the minimum live set, and far below the sum of all temporaries. (A concurrent
    region keeps its temporaries until no op beside their users can overwrite them, so
    which ops run at once, chosen by first-run timings, changes the arena.)"""
    main, startup, _ = static_env
    exe = static.Executor(static.CPUPlace(), num_threads=1)
    x = static.data("x", [64, 256], "float32")
    h = x
    for i in range(10):
        h = static.nn.fc(h, 256)
    loss = h.sum()
    grads = [g for _, g in static.append_backward(loss)]
    exe.run(startup)
    feed = {"x": np.ones((64, 256), "float32")}
    exe.run(main, feed=feed, fetch_list=[loss])
    plan = exe.plan_of(main, feed, [loss])
    all_bytes = sum(np.prod(v.shape) * 4 for v in main.list_vars()
                    if not v.persistable and v.constant is None and not v.is_data
                    and v.name != loss.name)
    assert plan.min_live_bytes > 0
    assert plan.arena_bytes <= 1.3 * plan.min_live_bytes
    assert plan.arena_bytes < 0.5 * all_bytes
    assert len(grads) == 20


@pytest.fixture
def transpose_view(define_op):
    """A test op whose Python kernel returns a view of its input."""
    return define_op("static_test::transpose_view", lambda x: x.T,
                     meta=lambda x: ([x.shape[1], x.shape[0]], x.dtype))


def test_views_returned_by_python_ops_keep_their_input_alive(static_env, exe,
                                                           transpose_view):
    """A Python kernel returning a view of an arena buffer: the buffer is not reused
    while the view is live."""
    main, _, _ = static_env
    view = transpose_view
    x = static.data("x", [4, 4], "float64")
    v = view(mm(x, x))
    b = mm(x, x, transpose_x=True)
    d = mm(b, x)
    e = mm(mm(d, x), mm(v, x))
    xv = np.arange(16.0).reshape(4, 4) / 10
    for _ in range(3):
        (r,) = exe.run(main, feed={"x": xv}, fetch_list=[e])
        np.testing.assert_allclose(r, xv.T @ xv @ xv @ xv @ ((xv @ xv).T @ xv), rtol=1e-12)


def test_ops_on_constants_are_computed_once(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2, 2], "float64")
    c = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = mm(mm(c, c), x)                      # c @ c has constant inputs: folded
    xv = np.eye(2) * 3
    (r,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_allclose(r, c @ c @ xv)
    assert len(main.global_block().ops) == 2
    assert exe.plan_of(main, {"x": xv}, [y]).n_ops == 1


def test_a_python_op_cannot_rerun_its_own_program(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [1], "float32")
    static.py_func(lambda t: exe.run(main, feed={"x": np.asarray(t)}), x, None)
    with pytest.raises(RuntimeError, match="re-entrant"):
        exe.run(main, feed={"x": np.ones(1, "float32")})


def test_fetched_views_keep_their_input_alive(static_env, exe, transpose_view):
    main, _, _ = static_env
    x = static.data("x", [4, 4], "float64")
    v = transpose_view(mm(x, x))          # fetched, read by no later op
    d = mm(mm(x, x, transpose_x=True), x)
    xv = np.arange(16.0).reshape(4, 4) / 10
    for _ in range(3):
        rv, rd = exe.run(main, feed={"x": xv}, fetch_list=[v, d])
        np.testing.assert_allclose(rv, (xv @ xv).T, rtol=1e-12)
        np.testing.assert_allclose(rd, xv.T @ xv @ xv, rtol=1e-12)


def test_feeds_of_lists_tensors_and_strided_arrays(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    expected = np.array(rows, "float32") @ scope["w"]
    (a,) = exe.run(main, feed={"x": rows}, fetch_list=[y])                  # a list
    (b,) = exe.run(main, feed={"x": fastop._core.storage.from_numpy(
        np.array(rows, "float32"))}, fetch_list=[y])                        # a tensor
    (c,) = exe.run(main, feed={"x": np.array(rows, "float32").T.copy().T}, # F-ordered
                   fetch_list=[y])
    (d,) = exe.run(main, feed={"x": np.array(rows, ">f4")}, fetch_list=[y])  # big-endian
    for r in (a, b, c, d):
        np.testing.assert_allclose(r, expected, rtol=1e-6)


def test_first_run_frees_temporaries_as_they_die(static_env, exe):
    """The tracing run (before the arena exists) frees each temporary after its last
    use, so its peak memory stays near the live set too."""
    main, _, _ = static_env
    seen = {}
    x = static.data("x", [3], "float64")
    a = fastop.tanh(x)
    static.py_func(lambda t: seen.setdefault("a", weakref.ref(t)), a, None)
    c = fastop.tanh(fastop.tanh(a))                 # a's last use
    static.py_func(lambda t: seen.setdefault("alive", seen["a"]() is not None), c, None)
    (r,) = exe.run(main, feed={"x": np.zeros(3)}, fetch_list=[c])
    assert seen["alive"] is False
    np.testing.assert_array_equal(r, np.zeros(3))


# ---------------------------------------------------------------- updates in place, aliasing

def _append(main, op, inputs, outputs=None, **attrs):
    return main.global_block().append_op(f"fastop::{op}", inputs, attrs, outputs=outputs)


def test_ops_updating_their_input_in_place(static_env, exe):
    """An op whose output is one of its inputs reads the value the variable had: a feed
    (the caller's array stays untouched), a rewritten temporary, a persistable and a
    constant (every run starts from the constant again)."""
    main, _, scope = static_env
    y = static.data("y", [2, 3], "float64")
    t = fastop.tanh(y)
    _append(main, "exp", [y], outputs=y)
    _append(main, "exp", [t], outputs=t)
    p = static.create_global_var([2, 3], 0.5, "float64", persistable=True, name="p")
    c = main.global_block()._constant(np.full((2, 3), 2.0), "float64")
    _append(main, "multiply", [p, c], outputs=p)
    _append(main, "multiply", [c, c], outputs=c)
    w = fastop.tanh(y) + c
    scope.set("p", np.full((2, 3), 0.5))
    a = np.arange(6.0).reshape(2, 3) / 10
    a0 = a.copy()
    for run in range(1, 4):
        ry, rw, rt, rc = exe.run(main, feed={"y": a}, fetch_list=[y, w, t, c])
        np.testing.assert_allclose(ry, np.exp(a0), rtol=1e-12)
        np.testing.assert_allclose(rt, np.exp(np.tanh(a0)), rtol=1e-12)
        np.testing.assert_allclose(rw, np.tanh(np.exp(a0)) + 4.0, rtol=1e-12)
        np.testing.assert_array_equal(rc, np.full((2, 3), 4.0))
        np.testing.assert_array_equal(scope["p"], np.full((2, 3), 0.5 * 2.0 ** run))
        np.testing.assert_array_equal(a, a0)


def test_writing_a_persistable_that_an_input_overlaps_is_staged(static_env, exe,
                                                               transpose_view):
    """A kernel writing a persistable whose memory an input shares (other than element
    for element in an elementwise kernel) computes aside and copies: W = W @ W and
    W = W.T + 0 give the mathematical result."""
    main, _, scope = static_env
    w = static.create_global_var([3, 3], 0.0, "float64", persistable=True, name="w")
    v = static.create_global_var([3, 3], 0.0, "float64", persistable=True, name="v")
    _append(main, "matmul", [w, w], outputs=w)
    _append(main, "add", [transpose_view(v), np.zeros((3, 3))], outputs=v)
    w0 = np.arange(9.0).reshape(3, 3) / 10
    v0 = np.arange(9.0).reshape(3, 3)
    scope.set("w", w0)
    scope.set("v", v0)
    exe.run(main)
    np.testing.assert_allclose(scope["w"], w0 @ w0, rtol=1e-12)
    np.testing.assert_array_equal(scope["v"], v0.T)
    exe.run(main)
    np.testing.assert_allclose(scope["w"], w0 @ w0 @ w0 @ w0, rtol=1e-12)
    np.testing.assert_array_equal(scope["v"], v0)


@pytest.mark.parametrize("value,held", [
    (np.ones((3, 2)), r"float64\[3, 2\]"), (np.ones((4, 2), "float32"), r"float32\[4, 2\]"),
    (np.ones(6, "float32"), r"float32\[6\]")])
def test_a_scope_value_unlike_its_declaration_is_an_error_naming_it(static_env, exe,
                                                                   value, held):
    """A parameter set to the wrong dtype or shape is refused where it is bound, not
    deep inside the kernel reading it; the run after a good value works."""
    main, startup, scope = static_env
    x = static.data("x", [None, 3], "float32")
    y = static.nn.fc(x, 2)
    exe.run(startup)
    w = main.global_block().ops[0].inputs[1].name
    scope.set(w, value)
    with pytest.raises(ValueError, match=rf"persistable variable '{w}' holds {held} in the "
                                         rf"scope, but the program declares it "
                                         rf"float32\[3, 2\]"):
        exe.run(main, feed={"x": np.ones((1, 3), "float32")}, fetch_list=[y])
    scope.set(w, np.full((3, 2), 2.0, "float32"))
    b = np.asarray(scope[main.global_block().ops[0].inputs[2].name])
    (out,) = exe.run(main, feed={"x": np.ones((1, 3), "float32")}, fetch_list=[y])
    np.testing.assert_allclose(out, 6.0 + b[None], rtol=1e-6)


def test_python_results_stored_in_persistables_are_copies(static_env, exe):
    """The scope owns its values: a Python op's result (its argument, a view of it, a
    view of the persistable itself) is copied into the persistable."""
    main, _, scope = static_env
    x = static.data("x", [3, 3], "float64")
    p = main.global_block().create_var(name="p", dtype="float64", shape=[3, 3],
                                       persistable=True)
    q = static.create_global_var([3, 3], 0.0, "float64", persistable=True, name="q")
    r = static.create_global_var([3, 3], 0.0, "float64", persistable=True, name="r")
    static.py_func(lambda t: t, x, p)                       # the feed itself
    static.py_func(lambda t: np.asarray(t).T, q, q)          # a transposed view of q
    static.py_func(lambda t: np.asarray(t)[::-1], r, r)      # an overlapping view of r
    q0, r0 = np.arange(9.0).reshape(3, 3), np.arange(9.0).reshape(3, 3) + 10
    scope.set("q", q0)
    scope.set("r", r0)
    xv = np.ones((3, 3))
    exe.run(main, feed={"x": xv})
    assert not np.shares_memory(scope["p"], xv)
    xv[:] = 7
    np.testing.assert_array_equal(scope["p"], np.ones((3, 3)))
    np.testing.assert_array_equal(scope["q"], q0.T)
    np.testing.assert_array_equal(scope["r"], r0[::-1])


def test_views_of_a_persistable_keep_the_value_before_its_update(static_env, exe,
                                                                transpose_view):
    """A view of a parameter read after an op updates the parameter in place still holds
    the value it was computed from (value semantics, as in PaddlePaddle)."""
    main, _, scope = static_env
    w = static.create_global_var([2, 2], 0.0, "float64", persistable=True, name="w")
    b = static.create_global_var([1, 2], 0.0, "float64", persistable=True, name="b")
    t = transpose_view(w)                                    # a Python op's view
    e = registry.get("fastop::broadcast_to")(b, shape=[2, 2])  # a C view kernel
    _append(main, "add", [w, np.ones((2, 2))], outputs=w)
    _append(main, "add", [b, np.ones((1, 2))], outputs=b)
    s = t + e                                                # read after the updates
    w0, b0 = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[10.0, 20.0]])
    scope.set("w", w0)
    scope.set("b", b0)
    for run in range(2):
        rs, rt = exe.run(main, fetch_list=[s, t])
        np.testing.assert_array_equal(rs, (w0 + run).T + (b0 + run))
        np.testing.assert_array_equal(rt, (w0 + run).T)
    np.testing.assert_array_equal(scope["w"], w0 + 2)


def test_python_op_with_many_outputs(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float64")
    outs = [main.global_block().create_var(name=f"o{i}", dtype="float64", shape=[2])
            for i in range(20)]
    static.py_func(lambda t: [np.asarray(t) * i for i in range(20)], x, outs)
    got = exe.run(main, feed={"x": np.array([1.0, 2.0])}, fetch_list=outs[::-1])
    for i, r in zip(range(19, -1, -1), got):
        np.testing.assert_array_equal(r, [i, 2.0 * i])


def test_reading_a_variable_before_any_write(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    t = main.global_block().create_var(name="t", dtype="float32", shape=[2])
    _append(main, "exp", [t], outputs=t)
    y = fastop.exp(x)
    with pytest.raises(ValueError, match=r"variable 't' \(float32\[2\]\) is read by op "
                                         r"#0 .*exp.* before any op writes it"):
        exe.run(main, feed={"x": np.ones(2, "float32")}, fetch_list=[y])
    main.global_block().ops.pop(0)
    main._bump()
    (r,) = exe.run(main, feed={"x": np.ones(2, "float32")}, fetch_list=[y])
    np.testing.assert_allclose(r, np.exp(np.ones(2)), rtol=1e-6)


def test_a_variable_fetched_twice_gives_two_arrays(chain, exe):
    main, startup, scope, x, w, y = chain
    exe.run(startup)
    a, b = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y, y])
    assert not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- lifetimes, threads, scale

def _short_lived_program(exe, k):
    """Build, run and return a small program (a py_func and C kernels), fetching by
    Variable and by name; returns weak references to the program and a fetched Variable."""
    main = static.Program()
    with static.program_guard(main, static.Program()):
        x = static.data("x", [2, 2], "float64")
        y = mm(x, x) + float(k)
        static.py_func(np.tanh, y, _var(main, "z", [2, 2], "float64"))
    xv = np.eye(2)
    for _ in range(2):              # the second run takes the fast path
        ry, rz = exe.run(main, feed={"x": xv}, fetch_list=[y, "z"])
    np.testing.assert_allclose(rz, np.tanh(xv @ xv + k))
    return weakref.ref(main), weakref.ref(y)


def test_an_executor_keeps_no_program_alive(static_env, exe):
    """Plans are cached per program, but the cache does not keep a program, or the
    Variables fetched from it, alive: dropping a program frees it and its plans."""
    import gc
    refs = [_short_lived_program(exe, k) for k in range(5)]
    gc.collect()
    assert [r() for pair in refs for r in pair] == [None] * 10
    assert not exe._plans            # the plans went with their programs


def test_fetching_a_variable_of_another_program_keeps_neither_alive(static_env, exe):
    """A Variable of the program a clone was made from (fetched by name in the clone)."""
    import gc
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    y = x * 3.0
    clone = main.clone()
    xv = np.ones(2, "float32")
    for _ in range(2):
        (r,) = exe.run(clone, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(r, [3, 3])
    ref = weakref.ref(clone)
    del clone
    gc.collect()
    assert ref() is None


def test_one_program_run_from_threads_matches_serial_runs(static_env, exe):
    """Threads running one program at once (C kernels that release the GIL, a py_func)
    each get the result of their own feed."""
    import threading
    main, _, _ = static_env
    x = static.data("x", [64, 64], "float64")
    h = fastop.tanh(mm(x, x))
    h = static.py_func(lambda t: np.asarray(t) * 2.0, h, _var(main, "h2", [64, 64], "float64"))
    y = mm(h, x).sum()
    feeds = [np.random.default_rng(k).uniform(-1, 1, (64, 64)) for k in range(4)]
    expected = [(np.tanh(f @ f) * 2.0 @ f).sum() for f in feeds]
    errors, results = [], {}

    def work(k):
        try:
            for _ in range(30):
                (r,) = exe.run(main, feed={"x": feeds[k]}, fetch_list=[y])
                results.setdefault(k, []).append(float(r))
        except BaseException as exc:        # reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for k in range(4):
        np.testing.assert_allclose(results[k], [expected[k]] * 30, rtol=1e-10)
    (r,) = exe.run(main, feed={"x": feeds[0]}, fetch_list=[y])     # still serial-correct
    np.testing.assert_allclose(r, expected[0], rtol=1e-10)


def test_a_python_op_may_run_another_signature_of_its_program(static_env, exe):
    """Running the same program with another fetch list from inside one of its Python
    ops uses another plan: it runs (the same signature is re-entrance, an error)."""
    main, _, _ = static_env
    x = static.data("x", [1], "float32")
    y = x * 2.0
    inner = []

    def nested(t):
        if not inner:
            inner.append(None)
            inner.append(exe.run(main, feed={"x": np.asarray(t) + 1}, fetch_list=["x", y]))
    static.py_func(nested, x, None)
    (r,) = exe.run(main, feed={"x": np.ones(1, "float32")}, fetch_list=[y])
    np.testing.assert_array_equal(r, [2])
    np.testing.assert_array_equal(inner[1][1], [4])


def test_a_misspelt_feed_names_the_data_variables_still_needed(static_env, exe):
    main, _, _ = static_env
    x = static.data("image", [2], "float32")
    label = static.data("label", [2], "float32")
    y = x + label
    with pytest.raises(ValueError, match=r"feed: the program has no variable 'imge'; did "
                                         r"you mean 'image'\?.*static.data variable 'image' "
                                         r"\(float32\[2\]\) is not fed"):
        exe.run(main, feed={"imge": np.ones(2, "float32"), "label": np.ones(2, "float32")},
                fetch_list=[y])
    (r,) = exe.run(main, feed={"image": np.ones(2, "float32"),
                               "label": np.ones(2, "float32")}, fetch_list=[y])
    np.testing.assert_array_equal(r, [2, 2])


def test_long_chains_compile_with_a_tight_arena(static_env, exe):
    """A chain of 3,000 ops (each temporary lives for two ops) compiles and runs; its
    arena holds two temporaries at a time."""
    main, _, _ = static_env
    x = static.data("x", [256], "float32")
    h = x
    for _ in range(3000):
        h = h + 1.0
    out = h * 1.0
    (r,) = exe.run(main, feed={"x": np.zeros(256, "float32")}, fetch_list=[out])
    np.testing.assert_array_equal(r, np.full(256, 3000, "float32"))
    plan = exe.plan_of(main, {"x": np.zeros(256, "float32")}, [out])
    assert_arena_sound(plan)
    assert plan.arena_bytes == plan.min_live_bytes == 2 * 256 * 4
