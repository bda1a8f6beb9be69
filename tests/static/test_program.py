"""The IR: programs, blocks, variables, operators, shape inference while building,
parameters and their deterministic startup initialization, gradients of built-in ops."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import registry

mm = registry.get("fastop::matmul")


def test_modes():
    assert not fastop.in_dynamic_mode()
    fastop.disable_static()
    assert fastop.in_dynamic_mode()
    fastop.enable_static()
    assert not static.in_dynamic_mode()


def test_data_and_shape_inference(static_env):
    main, _, _ = static_env
    x = static.data("x", [None, 4], "float32")
    w = static.data("w", [-1, 3], "float32")
    assert x.shape == [None, 4] and w.shape == [None, 3]
    assert x.dtype == fastop.float32 and x.stop_gradient and x.is_data
    y = mm(x, w, transpose_x=True)
    assert y.shape == [4, 3] and y.dtype == fastop.float32
    assert isinstance(y, static.Variable) and y.block is main.global_block()
    op = main.global_block().ops[-1]
    assert op.type == "fastop::matmul" and op.input("x") is x and op.output("out") is y
    assert op.attrs == {"transpose_x": True, "transpose_y": False}
    assert mm(x, x, transpose_y=True).shape == [None, None]
    with pytest.raises(ValueError, match="matmul") as info:
        mm(x, static.data("z", [5, 2], "float32"))
    assert any("while appending op fastop::matmul" in n for n in info.value.__notes__)


def test_program_listing(static_env):
    main, _, _ = static_env
    x = static.data("x", [None, 4], "float32")
    w = static.create_parameter([4, 2], "float32", name="w")
    y = mm(x, w)
    text = str(main)
    assert "x: float32[?, 4] data" in text
    assert "w: float32[4, 2] parameter" in text
    assert f"0  {y.name} = fastop::matmul(x, w, transpose_x=False, transpose_y=False)" in text
    assert repr(main) == "<Program 3 vars, 1 ops>"


def test_data_declared_again_is_the_same_variable_as_paddle(static_env):
    x = static.data("x", [None, 3], "float32")
    assert static.data("x", [-1, 3], "float32") is x
    with pytest.raises(ValueError, match="already exists as x: float32"):
        static.data("x", [2, 3], "float32")
    with pytest.raises(ValueError, match="already exists as x: float32.* not float64"):
        static.data("x", [-1, 3], "float64")
    y = fastop.matmul(x, fastop.ones([3, 2]))
    with pytest.raises(ValueError, match=f"'{y.name}' already exists as .* not a data"):
        static.data(y.name, y.shape, "float32")


def test_create_var_and_lookup(static_env):
    main, _, _ = static_env
    block = main.current_block()
    v = block.create_var(name="v", dtype="int64", shape=[2, None])
    assert block.create_var(name="v", dtype="int64", shape=[2, -1]) is v
    with pytest.raises(ValueError, match="already exists as v: int64"):
        block.create_var(name="v", dtype="float32", shape=[2])
    with pytest.raises(KeyError, match="did you mean 'v'"):
        block.var("vv")
    assert block.has_var("v") and main.list_vars() == [v]


def test_program_guard_restores(static_env):
    main, startup, _ = static_env
    other_main, other_startup = static.Program(), static.Program()
    with static.program_guard(other_main, other_startup):
        assert static.default_main_program() is other_main
        assert static.default_startup_program() is other_startup
        static.data("x", [1], "float32")
    assert static.default_main_program() is main
    assert "x" in other_main.global_block().vars and "x" not in main.global_block().vars


def test_variables_of_another_program_are_rejected(static_env):
    x = static.data("x", [2, 2], "float32")
    with static.program_guard(static.Program()):
        with pytest.raises(ValueError, match="'x' belongs to another program"):
            mm(x, x)


def test_parameters_are_initialized_deterministically(static_env, exe):
    main, startup, scope = static_env

    def build_and_init():
        fastop.seed(7)
        m, s, sc = static.Program(), static.Program(), static.Scope()
        with static.program_guard(m, s):
            w = static.create_parameter([3, 4], "float32")
            b = static.create_parameter([4], "float32", is_bias=True)
        static.Executor().run(s, scope=sc)
        return sc[w.name].copy(), sc[b.name].copy(), m
    w1, b1, m = build_and_init()
    w2, b2, _ = build_and_init()
    np.testing.assert_array_equal(w1, w2)
    assert np.abs(w1).max() <= np.sqrt(6 / 7) and np.unique(w1).size == 12
    np.testing.assert_array_equal(b1, np.zeros(4))
    params = m.all_parameters()
    assert [p.shape for p in params] == [[3, 4], [4]]
    assert all(p.persistable and p.is_parameter and not p.stop_gradient for p in params)
    assert m.global_block().all_parameters() == params


def test_create_parameter_with_initializer_and_global_var(static_env, exe):
    main, startup, scope = static_env
    w = static.create_parameter([2, 2], "float64", name="w",
                                initializer=fastop.initializer.Constant(0.5))
    g = static.create_global_var([1], 3.0, "float32", name="g")
    exe.run(startup)
    np.testing.assert_array_equal(scope["w"], np.full((2, 2), 0.5))
    np.testing.assert_array_equal(scope["g"], [3.0])
    assert g.persistable and not g.is_parameter and w.is_parameter
    with pytest.raises(ValueError, match="already has a variable 'w'"):
        static.create_parameter([2], "float64", name="w")


def test_python_kernel_ops_run_in_programs(static_env, exe, define_op):
    main, _, _ = static_env
    cube = define_op("static_test::cube", lambda x: x ** 3, meta=lambda x: x)
    stack = define_op("static_test::stack",
                      lambda xs, scale: np.stack(xs) * (1 if scale is None else scale),
                      meta=lambda xs, scale: ([len(xs), *xs[0].shape], xs[0].dtype),
                      inputs=["xs*", "scale?"])
    x = static.data("x", [2], "float64")
    s = stack([cube(x), x])
    assert s.shape == [2, 2]
    (r,) = exe.run(main, feed={"x": np.array([2.0, 3.0])}, fetch_list=[s])
    np.testing.assert_array_equal(r, [[8, 27], [2, 3]])


def test_variable_operators_and_fastop_functions(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float64")
    y = (2.0 * x + 1) / (x - 4.0) * -x
    z = fastop.tanh(y).mean()
    xv = np.arange(6.0).reshape(2, 3) + 0.5
    yr, zr = exe.run(main, feed={"x": xv}, fetch_list=[y, z])
    expected = (2 * xv + 1) / (xv - 4) * -xv
    np.testing.assert_allclose(yr, expected, rtol=1e-12)
    np.testing.assert_allclose(zr, np.tanh(expected).mean(), rtol=1e-12)
    assert y.shape == [None, 3] and z.shape == []


def test_gradients_of_matmul_chain(static_env, exe, rng):
    """d sum(x @ a @ b) against numpy (matmul and sum are built-ins)."""
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float64")
    a = static.data("a", [3, 4], "float64")
    b = static.data("b", [4, 2], "float64")
    loss = mm(mm(x, a), b).sum()
    da, db, dx = static.gradients([loss], [a, b, x])
    feed = {"x": rng.standard_normal((5, 3)), "a": rng.standard_normal((3, 4)),
            "b": rng.standard_normal((4, 2))}
    ga, gb, gx = exe.run(main, feed=feed, fetch_list=[da, db, dx])
    ones = np.ones((5, 2))
    np.testing.assert_allclose(ga, feed["x"].T @ ones @ feed["b"].T, rtol=1e-12)
    np.testing.assert_allclose(gb, (feed["x"] @ feed["a"]).T @ ones, rtol=1e-12)
    np.testing.assert_allclose(gx, ones @ feed["b"].T @ feed["a"].T, rtol=1e-12)


def test_a_variable_given_twice_to_a_variadic_input_gets_both_gradients(static_env, exe):
    """concat([a, b, a]): a's gradient sums its two places in the list."""
    a = static.data("a", [2], "float64")
    b = static.data("b", [2], "float64")
    loss = (fastop.concat([a, b, a]) * np.arange(6.0)).sum()
    da, db = static.gradients([loss], [a, b])
    ga, gb = exe.run(static_env[0], feed={"a": np.ones(2), "b": np.ones(2)},
                     fetch_list=[da, db])
    np.testing.assert_array_equal(ga, [0 + 4, 1 + 5])
    np.testing.assert_array_equal(gb, [2, 3])


def test_variable_comparisons_append_ops_and_a_variable_has_no_truth_value(static_env, exe):
    """As Paddle's static Variable: ``==``/``!=`` build equal/not_equal ops (identity
    still decides ``v in list`` and hashing), and ``if v`` is an error naming it."""
    x = static.data("x", [3], "float32")
    eq, ne = x == 2.0, x != 2.0
    assert [op.opdef.name for op in static_env[0].global_block().ops[-2:]] == \
        ["fastop::equal", "fastop::not_equal"]
    assert x in [x] and {x: 1}[x] == 1 and (x == None) is False  # noqa: E711
    with pytest.raises(TypeError, match="truth value of Variable 'x'"):
        bool(x)
    got_eq, got_ne = exe.run(static_env[0], feed={"x": np.array([1, 2, 3], "float32")},
                             fetch_list=[eq, ne])
    assert got_eq.tolist() == [False, True, False] and got_ne.tolist() == [True, False, True]


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_cross_entropy_gradients_through_loss_and_softmax_outputs(static_env, exe, rng):
    """softmax_cross_entropy's rule gets None for an output without gradient: the loss
    alone appends no zero-filled softmax gradient; a used softmax output adds its term."""
    main, _, _ = static_env
    ce = registry.get("fastop::softmax_cross_entropy")
    logits = static.data("logits", [None, 4], "float64")
    label = static.data("label", [None], "int64")
    w = static.data("w", [None, 4], "float64")
    loss, sm = ce(logits, label)
    (d_loss_only,) = static.gradients([loss.sum()], [logits])
    assert "fastop::full_like" not in [op.type for op in main.global_block().ops]
    (d_both,) = static.gradients([loss.sum() + (sm * w).sum()], [logits])
    feed = {"logits": rng.standard_normal((3, 4)), "label": np.array([2, 0, 3]),
            "w": rng.standard_normal((3, 4))}
    got_loss, got_both = exe.run(main, feed=feed, fetch_list=[d_loss_only, d_both])
    p = _softmax(feed["logits"])
    onehot = np.eye(4)[feed["label"]]
    np.testing.assert_allclose(got_loss, p - onehot, rtol=1e-12, atol=1e-14)
    through = p * (feed["w"] - (feed["w"] * p).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(got_both, p - onehot + through, rtol=1e-12, atol=1e-14)


def test_append_backward_returns_parameter_gradients_and_prunes(static_env, exe):
    main, startup, scope = static_env
    x = static.data("x", [None, 3], "float64")
    h = static.nn.fc(x, 4, name="l1")
    loss = static.nn.fc(h, 1, name="l2").sum()
    n_forward = len(main.global_block().ops)
    pairs = static.append_backward(loss)
    assert [p.name for p, _ in pairs] == ["l1.w_0", "l1.b_0", "l2.w_0", "l2.b_0"]
    assert [g.name for _, g in pairs] == [p.name + "@GRAD" for p, _ in pairs]
    grad_ops = main.global_block().ops[n_forward:]
    # no op computes d(loss)/dx: x is data, so its gradient was pruned
    assert all(op.outputs and op.outputs[0].shape != [None, 3] for op in grad_ops)
    exe.run(startup)
    xv = np.ones((2, 3))
    grads = exe.run(main, feed={"x": xv}, fetch_list=[g for _, g in pairs])
    w2 = scope["l2.w_0"]
    np.testing.assert_allclose(grads[3], [2.0])
    hidden = xv @ scope["l1.w_0"] + scope["l1.b_0"]
    np.testing.assert_allclose(grads[2], hidden.sum(0)[:, None])
    np.testing.assert_allclose(grads[0], xv.T @ np.ones((2, 1)) @ w2.T)
    with pytest.raises(KeyError, match="no variable 'nope'"):
        static.append_backward(loss, parameter_list=["nope"])


def test_clone_is_independent(static_env, exe):
    main, startup, scope = static_env
    x = static.data("x", [None, 3], "float64")
    y = static.nn.fc(x, 2, name="c")
    test_program = main.clone(for_test=True)
    loss = y.sum()
    static.append_backward(loss)
    assert str(test_program) != str(main)
    assert len(test_program.global_block().ops) == 1
    exe.run(startup)
    xv = np.ones((2, 3))
    (a,) = exe.run(test_program, feed={"x": xv}, fetch_list=[y.name])
    (b,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(a, b)
    assert test_program.global_block().var("c.w_0") is not main.global_block().var("c.w_0")


def test_fastop_functions_append_ops_on_variables(static_env, exe, rng):
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float64")
    w = static.data("w", [3, 2], "float64")
    outs = [fastop.matmul(x, w), fastop.concat([x, fastop.exp(x)], axis=1),
            fastop.transpose(x, [1, 0]), fastop.reshape(x, [-1]), fastop.sum(x, axis=0),
            x ** 2, 1 - x]
    assert [o.shape for o in outs] == [[None, 2], [None, 6], [3, None], [None], [3],
                                      [None, 3], [None, 3]]
    xv, wv = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    got = exe.run(main, feed={"x": xv, "w": wv}, fetch_list=outs)
    expected = [xv @ wv, np.concatenate([xv, np.exp(xv)], axis=1), xv.T, xv.reshape(-1),
                xv.sum(0), xv ** 2, 1 - xv]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)


def test_storage_dtype_variables_compute_in_float32_through_an_appended_cast(static_env):
    main, _, _ = static_env
    h = static.data("h", [2, 3], "float16")
    y = fastop.tanh(h)
    as_float64 = h.astype("float64")          # cast has a float16 kernel: no detour
    assert y.dtype == fastop.float32 and as_float64.dtype == fastop.float64
    assert [op.type for op in main.global_block().ops] == \
        ["fastop::cast", "fastop::tanh", "fastop::cast"]
    half = np.array([[0.5, -1.25, 2.0], [3.5, 0.1, -0.7]], np.float16)
    got, got64 = static.Executor(fastop.CPUPlace()).run(main, feed={"h": half},
                                                        fetch_list=[y, as_float64])
    np.testing.assert_allclose(got, np.tanh(half.astype(np.float32)), rtol=1e-6)
    np.testing.assert_array_equal(got64, half.astype(np.float64))
