"""Registry ops defined without a meta function (``OpDef.first_call``,
``OpDef.infer_by_running``): fastop runs the kernel to learn each output's shape and
dtype — in eager mode the first call per input signature (its results kept, the kernel
run once), in a static Program a dry run on zeros at build time (unknown dims probed) —
caches the metas per signature and checks later calls against them. Each input kind of
the op contract (variadic, optional, attributes, integer outputs), backward kernels
without a meta, opcheck, save and load, and the errors."""
import warnings

import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import OpDefinitionError, TensorMeta, registry
from fastop.ops._dispatch import bump_registry_version
from fastop.ops._registry import PROBE_SIZES
from fastop.testing import Sample, opcheck

NS = "dryrun"
RUNS: list[tuple] = []            # (op, input shapes) per run of a counting kernel


def head_kernel(x, k):
    """The first k entries of the last axis, doubled, and that axis' length (int64)."""
    RUNS.append(("head", x.shape))
    return x[..., :k] * 2, np.array(x.shape[-1], np.int64)


def flatten_kernel(x):
    RUNS.append(("flatten", x.shape))
    return x.reshape(-1)


def positive_kernel(x):
    return x[x > 0]                 # its shape depends on the values: needs a meta


def vsum_kernel(xs, b, scale, axes):
    """scale * (sum of xs [+ b]), summed over `axes` (a list attribute)."""
    total = sum(xs) if b is None else sum(xs) + b
    return (scale * total).sum(axis=tuple(axes)) if axes else scale * total


def pairsum_kernel(x):
    return x[..., 0::2] + x[..., 1::2]


def pairsum_backward(dy):
    return np.repeat(dy, 2, axis=-1)


def fastop_register_ops(registry):
    """As a plugin's hook would: ops without meta, each input kind."""
    registry.define(f"{NS}::head", inputs=["x"], outputs=["y", "n"], attrs={"k": 2},
                    kernels={"*": head_kernel})
    registry.define(f"{NS}::flatten", inputs=["x"], outputs=["y"],
                    kernels={"float32": flatten_kernel, "float64": flatten_kernel})
    registry.define(f"{NS}::positive", inputs=["x"], outputs=["y"],
                    kernels={"*": positive_kernel})
    registry.define(f"{NS}::vsum", inputs=["xs*", "b?"], outputs=["y"],
                    attrs={"scale": 1.0, "axes": ()}, kernels={"*": vsum_kernel})
    registry.define(f"{NS}::log", inputs=["x"], outputs=["y"], kernels={"*": np.log})

    pairsum = registry.define(f"{NS}::pairsum", inputs=["x"], outputs=["y"],
                              doc="y[..., i] = x[..., 2i] + x[..., 2i+1]")
    pairsum.kernel("float32", "float64")(pairsum_kernel)
    pairsum.grad_kernel(needs=["dy"], meta=lambda dy: TensorMeta(
        dy.shape[:-1] + [None if dy.shape[-1] is None else 2 * dy.shape[-1]],
        dy.dtype))(pairsum_backward)

    # y = x^3, its gradient a backward op of its own (grad_op), also without meta
    backward = registry.define(f"{NS}::cube_backward", inputs=["x", "dy"],
                               outputs=["dx"], kernels={"*": lambda x, dy: 3 * x * x * dy})
    cube = registry.define(f"{NS}::cube", inputs=["x"], outputs=["y"],
                           kernels={"*": lambda x: x ** 3})
    cube.grad_op(backward, needs=["x", "dy"])


@pytest.fixture(scope="module", autouse=True)
def plugin_ops():
    before = {op.name for op in registry}
    with registry.providing("fastop-dryrun", "0.1") as reg:
        fastop_register_ops(reg)
    yield
    for name in {op.name for op in registry} - before:
        registry.remove(name)


@pytest.fixture(autouse=True)
def fresh_runs():
    """No run counted, no signature learned: the ops' metas and call plans forgotten."""
    RUNS.clear()
    for name in ("head", "flatten"):
        registry.get(f"{NS}::{name}").inferred_metas.clear()
    bump_registry_version()


def ops():
    return fastop.ops.dryrun


def tensor(values, dtype="float32", grad=False):
    return fastop.to_tensor(np.asarray(values, dtype), stop_gradient=not grad)


X = np.arange(12, dtype="float32").reshape(3, 4)


def build(fn, shapes, dtype="float32"):
    """A Program of `fn` on data variables of `shapes` (None for unknown dims)."""
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            names = [f"in_{i}" for i in range(len(shapes))]
            out = fn(*[static.data(n, s, dtype) for n, s in zip(names, shapes)])
    finally:
        fastop.disable_static()
    return main, names, out


# ------------------------------------------------------------------------ eager

def test_eager_call_learns_the_metas_from_its_own_run():
    y, n = ops().head(tensor(X))
    np.testing.assert_array_equal(y.numpy(), X[:, :2] * 2)
    assert n.dtype == fastop.int64 and int(n.numpy()) == 4
    assert RUNS == [("head", (3, 4))]          # one run: the call's own
    assert list(registry.get(f"{NS}::head").inferred_metas.values()) == [
        [TensorMeta([3, 2], "float32"), TensorMeta([], "int64")]]


def test_the_kernel_runs_once_per_call_and_signatures_are_cached():
    op = registry.get(f"{NS}::head")
    x = tensor(X)
    for _ in range(3):
        ops().head(x)
    ops().head(x, k=3)
    ops().head(tensor(X[:2]))
    ops().head(x, k=2)                         # a new attrs dict, a known signature
    assert len(RUNS) == 6                      # no run but the calls' own
    assert len(op.inferred_metas) == 3
    y, _ = ops().head(x, k=3)
    assert y.shape == [3, 3]


def test_an_op_keeps_the_most_recent_signatures(monkeypatch):
    monkeypatch.setattr("fastop.ops._registry.INFERRED_SIGNATURES", 2)
    op = registry.get(f"{NS}::head")
    for rows in (1, 2, 3):
        ops().head(tensor(np.ones((rows, 4))))
    assert [key[0][0][0] for key in op.inferred_metas] == [(2, 4), (3, 4)]


def test_a_later_result_that_breaks_the_learned_meta_is_an_error_naming_the_op():
    y = ops().positive(tensor([1.0, -1.0, 2.0]))
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    with pytest.raises(ValueError, match=rf"{NS}::positive: output 'y' should have shape "
                                         rf"\[2\], the kernel returned \[3\]; the op has no "
                                         rf"meta function.*needs meta="):
        ops().positive(tensor([1.0, 1.0, 2.0]))
    y = ops().positive(tensor([5.0, -1.0, 2.0]))    # the learned shape again: fine
    np.testing.assert_array_equal(y.numpy(), [5.0, 2.0])


def test_replacing_a_kernel_forgets_what_the_old_one_taught():
    op = registry.define(f"{NS}::swap", inputs=["x"], outputs=["y"],
                         kernels={"*": lambda x: x[:1]})
    try:
        assert ops().swap(tensor(X)).shape == [1, 4]
        op.kernel()(lambda x: x[:2])
        assert not op.inferred_metas
        assert ops().swap(tensor(X)).shape == [2, 4]
    finally:
        registry.remove(op.name)


@pytest.mark.parametrize("with_b", [False, True])
def test_variadic_optional_and_list_attribute(with_b):
    a, c = np.ones((2, 3), "float32"), np.full((2, 3), 2.0, "float32")
    b = tensor(np.full((2, 3), 10.0)) if with_b else None
    y = ops().vsum([tensor(a), tensor(c)], b, scale=2.0)
    np.testing.assert_array_equal(y.numpy(), 2 * (a + c + (10 if with_b else 0)))
    y = ops().vsum([tensor(a), tensor(c), tensor(a)], b, axes=[1])
    assert y.shape == [2]
    np.testing.assert_array_equal(y.numpy(), (2 * a + c + (10 if with_b else 0)).sum(1))


# ------------------------------------------------------------------------ static

def test_static_dry_run_resolves_unknown_dims_per_run():
    main, names, (y, n) = build(lambda d: ops().head(d, k=3), [[None, 4]])
    assert y.shape == [None, 3] and n.shape == [] and n.dtype == fastop.int64
    assert RUNS == [("head", (size, 4)) for size in PROBE_SIZES]     # the dry runs
    exe = static.Executor(fastop.CPUPlace())
    for batch in (1, 3, 8):
        x = np.arange(batch * 4, dtype="float32").reshape(batch, 4)
        got_y, got_n = exe.run(main, feed={names[0]: x}, fetch_list=[y, n])
        np.testing.assert_array_equal(got_y, x[:, :3] * 2)
        assert int(got_n) == 4
    RUNS.clear()
    build(lambda d: ops().head(d, k=3), [[None, 4]])
    assert not [r for r in RUNS if r[1][0] in PROBE_SIZES]           # cached: no dry run


def test_static_output_dim_that_follows_the_batch_without_equalling_it():
    """flatten of [None, 4] is [4 * batch]: a dim that differs between the probe
    sizes, so unknown, although it equals neither."""
    main, names, y = build(ops().flatten, [[None, 4]])
    assert y.shape == [None]
    for batch in (2, 5):
        x = np.ones((batch, 4), "float32")
        got, = static.Executor(fastop.CPUPlace()).run(main, feed={names[0]: x},
                                                      fetch_list=[y])
        assert got.shape == (4 * batch,)


def test_static_known_shapes_run_once_and_keep_every_dim():
    main, names, y = build(ops().flatten, [[3, 4]])
    assert y.shape == [12] and RUNS == [("flatten", (3, 4))]


def test_static_variadic_optional_and_attrs():
    def fn(a, c, b):
        return ops().vsum([a, c], b, scale=3.0, axes=[0]), ops().vsum([a, c])
    main, names, (y, z) = build(fn, [[None, 3]] * 3)
    assert y.shape == [3] and z.shape == [None, 3]
    feed = {n: np.full((4, 3), i + 1.0, "float32") for i, n in enumerate(names)}
    got_y, got_z = static.Executor(fastop.CPUPlace()).run(main, feed=feed,
                                                          fetch_list=[y, z])
    np.testing.assert_array_equal(got_y, np.full(3, 3.0 * 4 * 6))
    np.testing.assert_array_equal(got_z, np.full((4, 3), 3.0))


def test_static_value_dependent_shape_is_caught_when_the_program_runs():
    main, names, y = build(ops().positive, [[None]])
    assert y.shape == [0]                      # zeros have no positive entry
    with pytest.raises(ValueError, match=rf"{NS}::positive: output 'y' should have shape "
                                         rf"\[0\].*needs meta="):
        static.Executor(fastop.CPUPlace()).run(
            main, feed={names[0]: np.array([1.0, 2.0], "float32")}, fetch_list=[y])


def test_dry_run_on_zeros_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        main, names, y = build(ops().log, [[None, 2]])
    assert y.shape == [None, 2]


def test_static_program_saved_and_loaded(tmp_path):
    main, names, (y, n) = build(lambda d: ops().head(ops().pairsum(d), k=1), [[None, 4]])
    path = str(tmp_path / "program")
    static.save(main, path)
    loaded = static.load_program(path)
    fetch = [y.name, n.name]
    assert loaded.global_block().var(y.name).shape == [None, 1]
    x = np.arange(8, dtype="float32").reshape(2, 4)
    exe = static.Executor(fastop.CPUPlace())
    for got, want in zip(exe.run(loaded, feed={names[0]: x}, fetch_list=fetch),
                         exe.run(main, feed={names[0]: x}, fetch_list=fetch)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(exe.run(loaded, feed={names[0]: x}, fetch_list=fetch)[0],
                                  (x[:, 0::2] + x[:, 1::2])[:, :1] * 2)


# ------------------------------------------------------------------------ gradients

def test_grad_kernel_op_without_meta_eager_static_and_opcheck():
    x = tensor(np.arange(6.0).reshape(2, 3) - 2, "float64", grad=True)
    seed = np.random.default_rng(0).standard_normal((2, 3))
    (ops().cube(x) * tensor(seed, "float64")).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * (x.numpy() ** 2) * seed)
    report = opcheck(f"{NS}::cube", [np.linspace(-2, 2, 6).reshape(2, 3)])
    assert report["meta"].startswith("ok (inferred:") and report["gradient"] == "ok"
    assert report["eager_static"] == "ok"
    report = opcheck(f"{NS}::pairsum", [[np.linspace(-1, 1, 8).reshape(2, 4)],
                                        Sample(np.ones((3, 6), "float32"))])
    assert report["meta"].startswith("ok (inferred:") and report["gradient"] == "ok"


def test_backward_kernel_without_derivable_meta_runs():
    """dx, dw from y, dy, dz only: fastop infers the backward op's output metas."""
    mul = registry.define(f"{NS}::scale_shift", inputs=["x", "w"], outputs=["y", "z"],
                          kernels={"float64": lambda x, w: (x * 2.0, w + 1.0)})
    try:
        @mul.grad_kernel(needs=["dy", "dz"])
        def scale_shift_backward(dy, dz):
            return 2.0 * dy, dz.copy()
        assert registry.get(f"{NS}::scale_shift_grad").meta_fn is None
        x = tensor(np.ones((2, 3)), "float64", grad=True)
        w = tensor(np.ones(4), "float64", grad=True)
        y, z = mul(x, w)
        (y.sum() + 3.0 * z.sum()).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
        np.testing.assert_array_equal(w.grad.numpy(), np.full(4, 3.0))
        report = opcheck(mul, [np.linspace(0, 1, 6).reshape(2, 3), np.linspace(1, 2, 4)])
        assert report["gradient"] == "ok"

        def loss(a, b):
            y, z = mul(a, b)
            return [y, z] + static.gradients([fastop.sum(y) + fastop.sum(z)], [a, b])
        main, names, outs = build(loss, [[None, 3], [4]], "float64")
        assert [v.shape for v in outs] == [[None, 3], [4], [None, 3], [4]]
    finally:
        registry.remove(f"{NS}::scale_shift_grad")
        registry.remove(f"{NS}::scale_shift")


def test_opcheck_fails_an_op_whose_shape_depends_on_values():
    with pytest.raises(AssertionError, match=rf"opcheck {NS}::positive sample 0 \[meta\]: "
                                             rf"output 'y'.*inferred by running the kernel"
                                             rf".*depend on the input values"):
        opcheck(f"{NS}::positive", [np.array([1.0, -1.0, 2.0])])


# ------------------------------------------------------------------------ errors

def test_kernel_that_cannot_run_on_zeros_names_the_op_and_the_fix():
    op = registry.define(f"{NS}::inverse", inputs=["x"], outputs=["y"],
                         kernels={"float64": np.linalg.inv})
    try:
        with pytest.raises(np.linalg.LinAlgError) as info:
            build(op, [[3, 3]], "float64")
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert f"{NS}::inverse" in notes and "on zeros of shapes [3, 3] float64" in notes
        assert "meta=" in notes
        y = op(tensor(np.eye(3) * 2, "float64"))        # eager runs on the real values
        np.testing.assert_array_equal(y.numpy(), np.eye(3) / 2)
    finally:
        registry.remove(op.name)


def test_rank_that_depends_on_unknown_dims_is_refused():
    op = registry.define(f"{NS}::odd_rank", inputs=["x"], outputs=["y"],
                         kernels={"*": lambda x: x.reshape(-1) if len(x) == PROBE_SIZES[0]
                                  else x})
    try:
        with pytest.raises(OpDefinitionError, match=rf"{NS}::odd_rank: output 'y' is "
                                                    rf"float32\[20\] in a dry run.*meta="):
            build(op, [[None, 4]])
    finally:
        registry.remove(op.name)


def test_outputs_varying_in_number_need_a_meta():
    op = registry.define(f"{NS}::split_all", inputs=["x"], outputs=["ys*"],
                         kernels={"*": lambda x: tuple(x)})
    try:
        with pytest.raises(OpDefinitionError, match=rf"{NS}::split_all: has no meta "
                                                    rf"function, and its outputs \(ys\*\) "
                                                    rf"vary in number.*meta="):
            op(tensor(X))
    finally:
        registry.remove(op.name)


def test_kernel_result_of_a_dtype_fastop_lacks_names_the_output():
    op = registry.define(f"{NS}::complex", inputs=["x"], outputs=["y"],
                         kernels={"*": lambda x: x.astype(np.complex64)})
    try:
        with pytest.raises(TypeError, match=rf"{NS}::complex: output 'y' is a complex64 "
                                            rf"array, which fastop has no dtype for"):
            op(tensor(X))
    finally:
        registry.remove(op.name)


def test_ops_with_a_meta_function_learn_nothing():
    op = registry.define(f"{NS}::with_meta", inputs=["x"], outputs=["y"],
                         meta=lambda x: x, kernels={"*": lambda x: x + 1})
    try:
        op(tensor(X))
        build(op, [[None, 4]])
        assert not op.inferred_metas
    finally:
        registry.remove(op.name)
