"""The executor's per-run fast path (the previous plan, its feed signature checked in C),
view kernels run inside the plan (expand_as, broadcast_to), and Python-kernel ops
checked by the registry's one result check (OpDef.check_results) in static mode too."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop._core.storage import from_numpy
from fastop.ops import registry

mm = registry.get("fastop::matmul")
expand_as = registry.get("fastop::expand_as")
broadcast_to = registry.get("fastop::broadcast_to")


def _var(main, name, shape, dtype="float32"):
    return main.current_block().create_var(name=name, dtype=dtype, shape=shape)


# ----------------------------------------------------------------------------- fast path

def test_a_repeated_run_reuses_the_plan_and_each_signature_gets_its_own(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 2], "float64")
    y = mm(x, np.array([[1.0, 2.0], [3.0, 4.0]]))
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    fetch = [y]
    small, big = np.ones((2, 2)), np.arange(10.0).reshape(5, 2)
    for feed in (small, small, big, small, big):
        (r,) = exe.run(main, feed={"x": feed}, fetch_list=fetch)
        np.testing.assert_allclose(r, feed @ w)
    plan = exe.plan_of(main, {"x": small}, fetch)
    assert plan is not exe.plan_of(main, {"x": big}, fetch)
    (r,) = exe.run(main, feed={"x": small}, fetch_list=[y])     # a new, equal fetch list
    np.testing.assert_allclose(r, small @ w)
    assert exe.plan_of(main, {"x": small}, [y]) is plan


def test_the_fast_path_sees_a_changed_fetch_list_and_odd_feeds(static_env, exe):
    """Feeds that are not C-contiguous arrays of the planned dtype leave the fast path
    and are converted as on a first run; a fetch list mutated between runs is honoured."""
    main, _, _ = static_env
    x = static.data("x", [2, 2], "float32")
    y = mm(x, x)
    z = mm(y, x)
    xv = np.array([[1, 2], [3, 4]], "float32")
    fetch = [y]
    exe.run(main, feed={"x": xv}, fetch_list=fetch)
    fetch.append(z)
    ry, rz = exe.run(main, feed={"x": xv}, fetch_list=fetch)
    np.testing.assert_allclose(rz, xv @ xv @ xv)
    for feed in (xv.T.copy().T, xv.tolist(), from_numpy(xv)):
        ry, rz = exe.run(main, feed={"x": feed}, fetch_list=fetch)
        np.testing.assert_allclose(ry, xv @ xv)
    with pytest.raises(TypeError, match=r"feed 'x': expected dtype float32.*got float64"):
        exe.run(main, feed={"x": xv.astype("float64")}, fetch_list=fetch)
    with pytest.raises(ValueError, match=r"feed: the program has no variable 'q'"):
        exe.run(main, feed={"x": xv, "q": xv}, fetch_list=fetch)
    with pytest.raises(ValueError, match=r"missing feed: static.data variable 'x'"):
        exe.run(main, feed={}, fetch_list=fetch)
    ry, rz = exe.run(main, feed={"x": xv}, fetch_list=fetch)
    np.testing.assert_allclose(rz, xv @ xv @ xv)


def test_an_unused_feed_is_still_checked(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    static.data("unused", [3], "float32")
    y = x * 2.0
    feed = {"x": np.ones(2, "float32"), "unused": np.ones(3, "float32")}
    exe.run(main, feed=feed, fetch_list=[y])
    with pytest.raises(ValueError, match=r"feed 'unused': expected shape \[3\]"):
        exe.run(main, feed={"x": feed["x"], "unused": np.ones(4, "float32")},
                fetch_list=[y])


def test_editing_the_program_leaves_the_fast_path(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [2], "float64")
    y = x * 2.0
    xv = np.array([1.0, 2.0])
    exe.run(main, feed={"x": xv}, fetch_list=[y])
    z = y * 3.0
    (ry, rz) = exe.run(main, feed={"x": xv}, fetch_list=[y, z])
    np.testing.assert_allclose(rz, xv * 6)


# ----------------------------------------------------------------------------- view kernels

def test_mean_gradient_runs_expand_as_as_a_view_in_the_plan(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float64")
    loss = fastop.tanh(x).mean()
    (dx,) = static.gradients([loss], [x])
    xv = np.random.default_rng(0).standard_normal((4, 3))
    for rows in (4, 4, 2):
        (l, g) = exe.run(main, feed={"x": xv[:rows]}, fetch_list=[loss, dx])
        np.testing.assert_allclose(l, np.tanh(xv[:rows]).mean())
        np.testing.assert_allclose(g, (1 - np.tanh(xv[:rows]) ** 2) / (rows * 3))
    assert "fastop::expand_as" in [op.opdef.name for op in main.global_block().ops]


def test_views_keep_their_memory_alive_and_reach_python_ops_read_only(static_env, exe):
    """expand_as of an arena temporary, read after later ops that could reuse its
    memory; a py_func gets it as a read-only numpy view (stride 0)."""
    main, _, _ = static_env
    x = static.data("x", [1, 4], "float64")
    small = mm(x, np.eye(4))                         # an arena temporary [1, 4]
    wide = expand_as(small, np.zeros((3, 4)))       # its view [3, 4]
    later = mm(mm(x, np.eye(4) * 2), np.eye(4))       # temporaries after small's last read
    seen = {}

    def record(t):
        seen["type"], seen["readonly"] = type(t), not t.flags.writeable
        seen["strides"] = np.asarray(t).strides
        return np.asarray(t) * 1.0

    copied = static.py_func(record, wide, _var(main, "copied", [3, 4], "float64"))
    both = mm(np.ones((2, 3)), copied)
    xv = np.arange(4.0).reshape(1, 4)
    for _ in range(3):
        rw, rb, rl = exe.run(main, feed={"x": xv}, fetch_list=[wide, both, later])
        np.testing.assert_array_equal(rw, np.broadcast_to(xv, (3, 4)))
        np.testing.assert_array_equal(rb, np.full((2, 4), 3.0) * xv)
        np.testing.assert_array_equal(rl, xv * 2)
        assert rw.flags.writeable and rw.flags.c_contiguous      # fetches are copies
    assert seen["type"] is np.ndarray and seen["readonly"]
    assert seen["strides"][0] == 0


def test_broadcast_to_in_a_program_and_its_run_time_error(static_env, exe):
    main, _, _ = static_env
    x = static.data("x", [None, 1], "float32")
    y = static.data("y", [None, 3], "float32")
    out = broadcast_to(x, shape=[2, 3]) + expand_as(x, y)
    xv = np.array([[1.0], [2.0]], "float32")
    (r,) = exe.run(main, feed={"x": xv, "y": np.zeros((2, 3), "float32")}, fetch_list=[out])
    np.testing.assert_array_equal(r, np.broadcast_to(xv * 2, (2, 3)))
    with pytest.raises(ValueError, match=r"fastop::expand_as: x's shape must broadcast to the "
                                         r"target shape .*x: shape \[2, 1\] float32, y: "
                                         r"shape \[4, 3\]") as info:
        exe.run(main, feed={"x": xv, "y": np.zeros((4, 3), "float32")}, fetch_list=[out])
    assert any("fastop::expand_as" in note and "op #" in note for note in info.value.__notes__)
    (r,) = exe.run(main, feed={"x": xv, "y": np.zeros((2, 3), "float32")}, fetch_list=[out])
    np.testing.assert_array_equal(r, np.broadcast_to(xv * 2, (2, 3)))


# ----------------------------------------------------------------------------- one result check

def test_python_kernel_results_are_checked_by_the_registry_in_both_modes(static_env, exe,
                                                                        define_op):
    """The same wrong result raises the same error eagerly and in a program."""
    answer = {"value": None}
    op = define_op("static_test::returns", lambda x: answer["value"],
                   meta=lambda x: (x.shape, x.dtype))
    main, _, _ = static_env
    x = static.data("x", [2], "float32")
    out = op(x)
    xv = np.ones(2, "float32")
    cases = [(np.ones(2, "float64"), TypeError,
              r"static_test::returns: output 'out' should have dtype float32, the kernel "
              r"returned float64"),
             (np.ones(3, "float32"), ValueError,
              r"static_test::returns: output 'out' should have shape \[2\], the kernel "
              r"returned \[3\]"),
             ((xv, xv), ValueError, r"static_test::returns: the Python kernel returned 2 "
                                    r"value\(s\), expected 1")]
    for value, error, message in cases:
        answer["value"] = value
        with pytest.raises(error, match=message):
            exe.run(main, feed={"x": xv}, fetch_list=[out])
        fastop.disable_static()
        try:
            with pytest.raises(error, match=message):
                op(fastop.to_tensor(xv))
        finally:
            fastop.enable_static()
    answer["value"] = np.full(2, 7.0, "float32")
    (r,) = exe.run(main, feed={"x": xv}, fetch_list=[out])
    np.testing.assert_array_equal(r, [7.0, 7.0])


def test_static_python_kernels_are_one_checked_kernel_call(static_env, exe, define_op):
    """A program's Python-kernel op is a PythonKernel record (the eager call's kernel
    binding, checked by the C result checker): no meta function runs per run."""
    from fastop._core.kernel import PythonKernel
    metas = []
    op = define_op("static_test::double", lambda x: x * 2,
                   meta=lambda x: metas.append(1) or (x.shape, x.dtype))
    main, _, _ = static_env
    x = static.data("x", [2], "float64")
    out = op(x)
    built = len(metas)
    for _ in range(3):
        (r,) = exe.run(main, feed={"x": np.array([1.0, 2.0])}, fetch_list=[out])
        np.testing.assert_array_equal(r, [2.0, 4.0])
    assert len(metas) == built
    plan = exe.plan_of(main, {"x": np.array([1.0, 2.0])}, [out])
    assert any(isinstance(call, PythonKernel) for call in plan.python_calls())


# ----------------------------------------------------------------------------- py_func results

def test_py_func_results_off_the_common_case_get_the_full_check(static_env, exe):
    """The plan takes a fresh C-contiguous array as declared directly; views of the
    input, Fortran-ordered arrays, other dtypes and shapes off the declared known dims
    go through py_func's full check (copy, conversion, warning)."""
    main, _, _ = static_env
    x = static.data("x", [None, 3], "float64")
    returned = {}
    out = static.py_func(lambda t: returned["value"](np.asarray(t)), x,
                         _var(main, "out", [None, 3], "float64"))
    y = out * 1.0
    xv = np.arange(6.0).reshape(2, 3)
    returned["value"] = lambda a: a * 2                    # fresh, as declared
    np.testing.assert_array_equal(exe.run(main, feed={"x": xv}, fetch_list=[y])[0], xv * 2)
    returned["value"] = lambda a: a                        # the input itself: copied
    (r,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(r, xv)
    returned["value"] = lambda a: np.asfortranarray(a * 3)   # fresh, F-ordered
    np.testing.assert_array_equal(exe.run(main, feed={"x": xv}, fetch_list=[y])[0], xv * 3)
    returned["value"] = lambda a: (a * 4).astype("float32")
    with pytest.warns(RuntimeWarning, match=r"'out' was declared with dtype float64"):
        (r,) = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_array_equal(r, xv * 4)
    returned["value"] = lambda a: np.ones((2, 4))
    static.set_strict(True)
    with pytest.raises(ValueError, match=r"'out' was declared with shape \[\?, 3\] but "
                                         r".* returned shape \[2, 4\] \(strict mode\)"):
        exe.run(main, feed={"x": xv}, fetch_list=[y])
