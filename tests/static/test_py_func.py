"""py_func: every rule of seeds 000/001 — inputs and outputs as Variables or lists,
debugging ops, backward arguments, skipped variables, None gradients, the declared
output contract, zero-copy inputs."""
import sys

import numpy as np
import pytest

from fastop import static


def _var(main, name, shape, dtype="float32"):
    return main.current_block().create_var(name=name, dtype=dtype, shape=shape)


def test_func_gets_zero_copy_arrays(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float32")
    seen = {}

    def func(t):
        seen["type"] = type(t)
        seen["ptr"] = np.asarray(t).__array_interface__["data"][0]
        seen["array_ptr"] = np.array(t, copy=False).__array_interface__["data"][0]
        return np.exp(t)

    out = static.py_func(func, x, _var(main, "y", [None, 3]))
    feed = np.arange(6, dtype="float32").reshape(2, 3)
    (y,) = exe.run(main, feed={"x": feed}, fetch_list=[out])
    assert seen["type"] is np.ndarray
    assert seen["ptr"] == seen["array_ptr"] == feed.__array_interface__["data"][0]
    np.testing.assert_allclose(y, np.exp(feed), rtol=1e-6)


@pytest.mark.parametrize("container", [list, tuple])
def test_list_inputs_and_outputs(static_env, exe, container):
    main, _, _ = static_env
    a = static.data("a", [2], "float64")
    b = static.data("b", [2], "float64")
    outs = container([_var(main, "s", [2], "float64"), _var(main, "p", [2], "float64")])
    returned = static.py_func(lambda u, v: (np.add(u, v), np.multiply(u, v)),
                              container([a, b]), outs)
    assert returned is outs
    s, p = exe.run(main, feed={"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])},
                   fetch_list=list(outs))
    np.testing.assert_array_equal(s, [4.0, 6.0])
    np.testing.assert_array_equal(p, [3.0, 8.0])


def test_func_may_return_tensors(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [3], "float32")
    out = static.py_func(lambda t: t, x, _var(main, "y", [3]))   # returns its input
    feed = np.array([1.0, 2.0, 3.0], "float32")
    (y,) = exe.run(main, feed={"x": feed}, fetch_list=[out])
    np.testing.assert_array_equal(y, feed)
    assert not np.shares_memory(y, feed)


def test_debug_op_runs_on_every_run(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    calls = []
    assert static.py_func(lambda t: calls.append(np.array(t)), x, None) is None
    for i in range(3):
        exe.run(main, feed={"x": np.full(2, i, "float32")})
    assert [c.tolist() for c in calls] == [[0, 0], [1, 1], [2, 2]]


def test_wrong_count_of_results_is_an_error(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    outs = [_var(main, "u", [2]), _var(main, "v", [2])]
    static.py_func(lambda t: np.asarray(t), x, outs)
    with pytest.raises(ValueError, match=r"returned 1 value\(s\), expected 2 outputs \(u, v\)"):
        exe.run(main, feed={"x": np.ones(2, "float32")}, fetch_list=outs)


def test_shape_contract_warns_once_and_strict_mode_raises(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 2], "float32")
    out = static.py_func(lambda t: np.zeros((3, 5), "float32"), x, _var(main, "y", [None, 2]))
    feed = {"x": np.ones((3, 2), "float32")}
    with pytest.warns(RuntimeWarning) as record:
        for _ in range(3):
            (y,) = exe.run(main, feed=feed, fetch_list=[out]); line = sys._getframe().f_lineno
    messages = [str(w.message) for w in record]
    assert len(messages) == 1
    # issue 26: the warning points at the user's line (exe.run here), not inside fastop
    assert (record[0].filename, record[0].lineno) == (__file__, line)
    assert "py_func[" in messages[0] and "'y'" in messages[0]
    assert "[?, 2]" in messages[0] and "[3, 5]" in messages[0]
    assert y.shape == (3, 5)
    static.set_strict(True)
    with pytest.raises(ValueError, match=r"'y' was declared with shape \[\?, 2\].*strict"):
        exe.run(main, feed=feed, fetch_list=[out])


def test_dtype_contract_converts_with_a_warning(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    out = static.py_func(lambda t: np.asarray(t, dtype="float64") * 2, x, _var(main, "y", [2]))
    with pytest.warns(RuntimeWarning, match="declared with dtype float32 .* dtype float64; "
                                            "converting it to float32"):
        (y,) = exe.run(main, feed={"x": np.ones(2, "float32")}, fetch_list=[out])
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [2, 2])


def test_skip_vars_must_be_among_x_and_out(static_env):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    other = static.data("other", [2], "float32")
    with pytest.raises(ValueError, match="'other', which is neither an input x nor an output"):
        static.py_func(np.tanh, x, _var(main, "y", [2]), backward_func=np.tanh,
                       skip_vars_in_backward_input=other)


def test_x_and_out_must_be_variables(static_env):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    with pytest.raises(TypeError, match="out must be a Variable"):
        static.py_func(np.tanh, x, "y")
    with pytest.raises(TypeError, match="func must be callable"):
        static.py_func(None, x, None)


# ----------------------------------------------------------------------------- backward

def _grads_of(main, exe, feed, target, inputs):
    grads = static.gradients([target], inputs)
    return exe.run(main, feed=feed, fetch_list=grads)


def test_backward_gets_inputs_outputs_and_grads_minus_skipped(static_env, exe):
    main, _, _ = static_env
    a = static.data("a", [2], "float64")
    b = static.data("b", [2], "float64")
    a.stop_gradient = b.stop_gradient = False
    u, v = _var(main, "u", [2], "float64"), _var(main, "v", [2], "float64")
    got = {}

    def backward(a_, u_, v_, du, dv):     # b skipped
        got["args"] = [None if t is None else np.array(t) for t in (a_, u_, v_, du, dv)]
        return np.array(du) * 2, np.array(du) * 3

    static.py_func(lambda x, y: (np.add(x, y), np.subtract(x, y)), [a, b], [u, v],
                   backward_func=backward, skip_vars_in_backward_input=[b])
    feed = {"a": np.array([1.0, 2.0]), "b": np.array([5.0, 7.0])}
    # v has no gradient (only u is a target): backward gets None for dv
    da, db = static.gradients([u], [a, b])
    ra, rb = exe.run(main, feed=feed, fetch_list=[da, db])
    a_, u_, v_, du, dv = got["args"]
    np.testing.assert_array_equal(a_, [1, 2])
    np.testing.assert_array_equal(u_, [6, 9])
    np.testing.assert_array_equal(v_, [-4, -5])
    np.testing.assert_array_equal(du, [1, 1])
    assert dv is None
    np.testing.assert_array_equal(ra, [2, 2])
    np.testing.assert_array_equal(rb, [3, 3])


def test_backward_returning_none_for_input_without_gradient(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [3], "float64")
    label = static.data("label", [3], "int64")
    x.stop_gradient = False
    y = static.py_func(lambda t, l: np.asarray(t) * np.asarray(l), [x, label],
                       _var(main, "y", [3], "float64"),
                       backward_func=lambda t, l, out, dout: (np.multiply(dout, l), None))
    (dx,) = static.gradients([y], [x])
    (g,) = exe.run(main, feed={"x": np.ones(3), "label": np.array([1, 2, 3])}, fetch_list=[dx])
    np.testing.assert_array_equal(g, [1, 2, 3])


def test_backward_wrong_count_is_an_error(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [3], "float64")
    broken = [True]

    def backward(t, out, dout):
        return (dout, dout) if broken[0] else np.asarray(dout) * (1 - np.square(out))

    y = static.py_func(np.tanh, x, _var(main, "y", [3], "float64"), backward_func=backward)
    (dx,) = static.gradients([y], [x])
    with pytest.raises(ValueError, match=r"returned 2 value\(s\), expected 1 gradients"):
        exe.run(main, feed={"x": np.ones(3)}, fetch_list=[dx])
    broken[0] = False           # the same program and executor keep working
    (g,) = exe.run(main, feed={"x": np.ones(3)}, fetch_list=[dx])
    np.testing.assert_allclose(g, 1 - np.tanh(1.0) ** 2)


def test_py_func_without_backward_stops_the_gradient(static_env):
    main, _, _ = static_env
    x = static.data("x", [3], "float64")
    y = static.py_func(np.tanh, x, _var(main, "y", [3], "float64"))
    assert static.gradients([y], [x]) == [None]


def test_py_func_activation_matches_builtin_gradients(static_env, exe, rng):
    """A net whose activation is a py_func gets the gradients of the built-in op."""
    main, _, scope = static_env
    x = static.data("x", [None, 5], "float64")
    h1 = static.nn.fc(x, 4, name="a")
    builtin = static.nn.fc(static.nn.fc(h1, 4, activation="tanh", name="b"), 1, name="c").mean()
    t = static.nn.fc(h1, 4, name="d")
    act = static.py_func(np.tanh, t, _var(main, "act", t.shape, "float64"),
                         backward_func=lambda y, dy: np.asarray(dy) * (1 - np.square(y)),
                         skip_vars_in_backward_input=t)
    custom = static.nn.fc(act, 1, name="e").mean()
    exe.run(static.default_startup_program())
    for a, b in (("b", "d"), ("c", "e")):
        for suffix in (".w_0", ".b_0"):
            scope.set(b + suffix, scope[a + suffix])
    p = {v.name: v for v in main.all_parameters()}
    g_builtin = static.gradients([builtin], [p["a.w_0"], p["b.w_0"], p["c.w_0"], x])
    g_custom = static.gradients([custom], [p["a.w_0"], p["d.w_0"], p["e.w_0"], x])
    feed = {"x": rng.standard_normal((6, 5))}
    r_builtin = exe.run(main, feed=feed, fetch_list=g_builtin)
    r_custom = exe.run(main, feed=feed, fetch_list=g_custom)
    for u, v in zip(r_builtin, r_custom):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)
