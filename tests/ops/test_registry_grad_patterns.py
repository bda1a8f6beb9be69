"""The documented gradient patterns of the op registry, defined as a plugin package
defines them (a ``fastop_register_ops(registry)`` hook run inside
``registry.providing(...)``): a backward kernel leaving out an integer output (top-k),
a floating output declared non-differentiable, variadic inputs (a list of gradients
back), optional inputs (None in, None back). Each is checked in eager backward against
numpy, in a static Program with ``append_backward``, saved and loaded back — and the
errors: a gradient into a left-out floating output, a backward kernel returning the wrong
structure, definitions with things that cannot be called."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import (OpDefinitionError, TensorMeta, UntakenGradientError, registry)
from fastop.testing import Sample, opcheck

NS = "gradpatterns"


def fastop_register_ops(registry):
    """As a plugin module's hook would: every pattern of this file."""
    topk = registry.define(f"{NS}::topk", inputs=["x"], outputs=["values", "indices"],
                           attrs={"k": int}, doc="the k largest entries of the last axis")

    @topk.meta
    def topk_meta(x, k):
        shape = x.shape[:-1] + [k]
        return [TensorMeta(shape, x.dtype), TensorMeta(shape, "int64")]

    @topk.kernel("float32", "float64")
    def topk_kernel(x, k):
        indices = np.argsort(-x, axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(x, indices, -1), indices.astype(np.int64)

    @topk.grad_kernel(needs=["x", "indices", "dvalues"])
    def topk_backward(x, indices, dvalues, k):
        dx = np.zeros_like(x)
        np.put_along_axis(dx, indices, dvalues, -1)
        return dx

    # y = 2x and a floating statistic declared non-differentiable
    for name, nondiff in (("scaled", ["energy"]), ("scaled_undeclared", [])):
        scaled = registry.define(f"{NS}::{name}", inputs=["x"], outputs=["y", "energy"],
                                 meta=lambda x: [x, TensorMeta([], x.dtype)])
        scaled.kernel("float32", "float64")(
            lambda x: (2 * x, np.asarray((x * x).sum(), x.dtype)))
        scaled.grad_kernel(needs=["dy"], nondifferentiable=nondiff)(lambda dy: 2 * dy)

    # y = scale * (xs[0] + 2 xs[1] + 3 xs[2] + ...): a variadic and a plain input
    wsum = registry.define(f"{NS}::weighted_sum", inputs=["xs*", "scale"], outputs=["y"],
                           meta=lambda xs, scale: xs[0])

    @wsum.kernel("float32", "float64")
    def wsum_kernel(xs, scale):
        return scale * sum((i + 1) * x for i, x in enumerate(xs))

    @wsum.grad_kernel(needs=["xs", "scale", "dy"])
    def wsum_backward(xs, scale, dy):
        dxs = [(i + 1) * scale * dy for i in range(len(xs))]
        dscale = np.asarray((wsum_kernel(xs, 1.0) * dy).sum(), dy.dtype).reshape(scale.shape)
        return dxs, dscale

    # y = x * w + b, with b optional
    affine = registry.define(f"{NS}::affine", inputs=["x", "w", "b?"], outputs=["y"],
                             meta=lambda x, w, b: x)

    @affine.kernel("float32", "float64")
    def affine_kernel(x, w, b):
        return x * w + (0 if b is None else b)

    @affine.grad_kernel(needs=["x", "w", "b", "dy"])
    def affine_backward(x, w, b, dy):
        return dy * w, dy * x, (None if b is None else dy.copy())


@pytest.fixture(scope="module", autouse=True)
def plugin_ops():
    before = {op.name for op in registry}
    with registry.providing("fastop-gradpatterns", "0.1") as reg:
        fastop_register_ops(reg)
    yield
    for name in {op.name for op in registry} - before:
        registry.remove(name)


def tensor(values, grad=True):
    return fastop.to_tensor(np.asarray(values, np.float64), stop_gradient=not grad)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 5))
SEED = RNG.standard_normal((2, 3))          # the gradient of topk's values


def topk_numpy_grad(x, seed, k):
    dx = np.zeros_like(x)
    np.put_along_axis(dx, np.argsort(-x, axis=-1, kind="stable")[..., :k], seed, -1)
    return dx


# ------------------------------------------------------------------------ eager

def test_topk_backward_kernel_leaves_out_its_integer_output():
    x = tensor(X)
    values, indices = fastop.ops.gradpatterns.topk(x, k=3)
    assert indices.dtype == fastop.int64 and indices.stop_gradient
    (values * tensor(SEED, grad=False)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), topk_numpy_grad(X, SEED, 3))
    assert registry.get(f"{NS}::topk").grad_rule.kernel_op == f"{NS}::topk_grad"


def test_declared_nondifferentiable_output_passes_no_gradient():
    x = tensor(X)
    y, energy = fastop.ops.gradpatterns.scaled(x)
    (y.sum() + energy * 10.0).backward()         # energy counts as a constant
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))


def test_gradient_into_an_undeclared_left_out_output_is_an_error():
    x = tensor(X)
    y, energy = fastop.ops.gradpatterns.scaled_undeclared(x)
    y.sum().backward()                            # energy unused: fine
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))
    y, energy = fastop.ops.gradpatterns.scaled_undeclared(x)
    for create_graph in (False, True):
        with pytest.raises(UntakenGradientError,
                           match=rf"{NS}::scaled_undeclared: a gradient flows into output "
                                 rf"'energy', but its backward op {NS}::scaled_undeclared_grad"
                                 rf" takes the gradients of \['y'\] only.*nondifferentiable"):
            fastop.grad([y.sum() + energy], [x], create_graph=create_graph,
                        retain_graph=True)


@pytest.mark.parametrize("n", [1, 3])
def test_variadic_input_gets_a_list_of_gradients(n):
    xs = [tensor(RNG.standard_normal(4)) for _ in range(n)]
    scale = tensor(np.array([1.5]))
    seed = RNG.standard_normal(4)
    y = fastop.ops.gradpatterns.weighted_sum(xs, scale)
    (y * tensor(seed, grad=False)).sum().backward()
    for i, x in enumerate(xs):
        np.testing.assert_allclose(x.grad.numpy(), (i + 1) * 1.5 * seed)
    total = sum((i + 1) * x.numpy() for i, x in enumerate(xs))
    np.testing.assert_allclose(scale.grad.numpy(), [(total * seed).sum()])


def test_variadic_gradients_with_create_graph():
    xs = [tensor(RNG.standard_normal(3)) for _ in range(2)]
    scale = tensor(np.array([2.0]))
    y = fastop.ops.gradpatterns.weighted_sum(xs, scale)
    dxs = fastop.grad([y.sum()], xs, create_graph=True)
    np.testing.assert_allclose(dxs[0].numpy(), np.full(3, 2.0))
    np.testing.assert_allclose(dxs[1].numpy(), np.full(3, 4.0))


@pytest.mark.parametrize("with_b", [False, True])
def test_optional_input_none_in_none_back(with_b):
    x, w = tensor(X), tensor(X[::-1].copy())
    b = tensor(np.ones_like(X)) if with_b else None
    y = fastop.ops.gradpatterns.affine(x, w, b)
    (y * tensor(X, grad=False)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), X * X[::-1])
    np.testing.assert_allclose(w.grad.numpy(), X * X)
    if with_b:
        np.testing.assert_allclose(b.grad.numpy(), X)


# ------------------------------------------------------------------------ static

def build_and_run(tmp_path, build, feed):
    """Build a Program with `build(data)` -> (loss, [inputs wanting gradients]), run it
    with append_backward's gradients, save it, load it back and run that: both results
    (they must agree)."""
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            data = {}
            for name, value in feed.items():
                data[name] = static.data(name, [None] + list(value.shape[1:]),
                                         value.dtype.name)
                data[name].stop_gradient = False
            loss, wanted = build(data)
            pairs = dict((v.name, g) for v, g in static.append_backward(
                loss, parameter_list=wanted))
        fetch = [loss.name] + [pairs[v.name].name for v in wanted]
        exe = static.Executor(static.CPUPlace())
        got = exe.run(main, feed=feed, fetch_list=fetch)
        path = str(tmp_path / "program")
        static.save(main, path)
        loaded = static.load_program(path)
        again = exe.run(loaded, feed=feed, fetch_list=fetch)
    finally:
        fastop.disable_static()
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    return got


def test_topk_in_a_program(tmp_path):
    def build(d):
        values, indices = fastop.ops.gradpatterns.topk(d["x"], k=2)
        # the integer output used on the way to the loss carries no gradient
        return (values * d["s"]).sum() + fastop.cast(indices, "float64").sum(), [d["x"]]
    seed = RNG.standard_normal((2, 2))
    loss, dx = build_and_run(tmp_path, build, {"x": X, "s": seed})
    np.testing.assert_allclose(dx, topk_numpy_grad(X, seed, 2))
    top = np.sort(X, axis=-1)[..., ::-1][..., :2]
    idx = np.argsort(-X, axis=-1, kind="stable")[..., :2]
    np.testing.assert_allclose(loss, (top * seed).sum() + idx.sum())


def test_declared_nondifferentiable_output_in_a_program(tmp_path):
    def build(d):
        y, energy = fastop.ops.gradpatterns.scaled(d["x"])
        return y.sum() + energy, [d["x"]]
    loss, dx = build_and_run(tmp_path, build, {"x": X})
    np.testing.assert_allclose(dx, np.full_like(X, 2.0))
    np.testing.assert_allclose(loss, 2 * X.sum() + (X * X).sum())


def test_undeclared_left_out_output_in_a_program_is_an_error():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, 5], "float64")
            x.stop_gradient = False
            y, energy = fastop.ops.gradpatterns.scaled_undeclared(x)
            with pytest.raises(UntakenGradientError, match=rf"{NS}::scaled_undeclared: a "
                                                           rf"gradient flows into output "
                                                           rf"'energy'"):
                static.append_backward(y.sum() + energy, parameter_list=[x])
    finally:
        fastop.disable_static()


def test_variadic_input_in_a_program(tmp_path):
    def build(d):
        y = fastop.ops.gradpatterns.weighted_sum([d["a"], d["b"]], d["scale"])
        return (y * d["s"]).sum(), [d["a"], d["b"], d["scale"]]
    a, b, seed = RNG.standard_normal((3, 2, 4))
    scale = np.array([[0.5]])
    loss, da, db, dscale = build_and_run(tmp_path, build,
                                         {"a": a, "b": b, "scale": scale, "s": seed})
    np.testing.assert_allclose(loss, (0.5 * (a + 2 * b) * seed).sum())
    np.testing.assert_allclose(da, 0.5 * seed)
    np.testing.assert_allclose(db, 2 * 0.5 * seed)
    np.testing.assert_allclose(dscale, [[((a + 2 * b) * seed).sum()]])


@pytest.mark.parametrize("with_b", [False, True])
def test_optional_input_in_a_program(tmp_path, with_b):
    def build(d):
        y = fastop.ops.gradpatterns.affine(d["x"], d["w"], d["b"] if with_b else None)
        return y.sum(), [d["x"], d["w"]] + ([d["b"]] if with_b else [])
    feed = {"x": X, "w": X * 2, "b": np.ones_like(X)}
    got = build_and_run(tmp_path, build, feed)
    np.testing.assert_allclose(got[0], (2 * X * X).sum() + (X.size if with_b else 0))
    np.testing.assert_allclose(got[1], 2 * X)
    np.testing.assert_allclose(got[2], X)
    if with_b:
        np.testing.assert_allclose(got[3], np.ones_like(X))


# ------------------------------------------------------------------------ errors

@pytest.fixture
def scratch():
    """Ops defined by one test, removed after it."""
    before = {op.name for op in registry}
    yield registry
    for name in {op.name for op in registry} - before:
        registry.remove(name)


def variadic_op(reg, backward):
    op = reg.define("gradscratch::vsum", inputs=["xs*"], outputs=["y"],
                    meta=lambda xs: xs[0], kernels={"*": lambda xs: sum(xs)})
    op.grad_kernel(needs=["xs", "dy"])(backward)
    return op


@pytest.mark.parametrize("returned, message", [
    (lambda xs, dy: dy, r"returned a float64 array of shape \[3\] for the gradient of "
                        r"variadic input 'xs', expected a list of 2 arrays"),
    (lambda xs, dy: [dy], r"returned a list of 1 \(a float64 array of shape \[3\]\) for "
                          r"the gradient of variadic input 'xs', expected a list of 2"),
])
def test_wrong_variadic_gradients_name_op_and_what_the_kernel_returned(
        scratch, returned, message):
    op = variadic_op(scratch, returned)
    xs = [tensor(np.ones(3)), tensor(np.ones(3))]
    with pytest.raises(TypeError, match=r"gradscratch::vsum: the backward kernel .*"
                                        + message) as info:
        op(xs).sum().backward()
    assert "gradient rule of op 'gradscratch::vsum'" in "\n".join(info.value.__notes__)


def test_gradient_for_an_absent_optional_input_must_be_none(scratch):
    op = scratch.define("gradscratch::shift", inputs=["x", "b?"], outputs=["y"],
                        meta=lambda x, b: x,
                        kernels={"*": lambda x, b: x + (0 if b is None else b)})
    op.grad_kernel(needs=["b", "dy"])(lambda b, dy: (dy, dy))
    with pytest.raises(TypeError, match=r"gradscratch::shift: the backward kernel .* "
                                        r"returned a float64 array of shape \[2\] for the "
                                        r"gradient of optional input 'b', which is absent: "
                                        r"return None"):
        op(tensor(np.ones(2))).sum().backward()


def test_wrong_gradient_shape_names_the_output(scratch):
    op = scratch.define("gradscratch::short", inputs=["x"], outputs=["y"],
                        meta=lambda x: x, kernels={"*": lambda x: x * 2})
    op.grad_kernel(needs=["dy"])(lambda dy: dy[:1])
    with pytest.raises(ValueError, match=r"gradscratch::short_grad: output 'dx' should "
                                         r"have shape \[3\], the kernel returned \[1\]"):
        op(tensor(np.ones(3))).sum().backward()


def test_variadic_input_must_be_needed(scratch):
    op = scratch.define("gradscratch::needy", inputs=["xs*"], outputs=["y"],
                        meta=lambda xs: xs[0])
    with pytest.raises(OpDefinitionError, match=r"gradscratch::needy: the backward kernel "
                                                r"must take variadic input 'xs' \(add it to "
                                                r"needs\): it returns one gradient per entry"):
        op.grad_kernel(needs=["dy"])(lambda dy: [dy])
    assert "gradscratch::needy_grad" not in scratch and op.grad_rule is None


@pytest.mark.parametrize("with_b", [False, True])
def test_optional_input_the_backward_kernel_does_not_take(scratch, with_b):
    """A bias gradient needs no bias: the kernel makes it always; it is dropped when the
    bias is absent."""
    op = scratch.define("gradscratch::bias_add", inputs=["x", "b?"], outputs=["y"],
                        meta=lambda x, b: x,
                        kernels={"*": lambda x, b: x + (0 if b is None else b)})
    op.grad_kernel(needs=["dy"], meta=lambda dy: [dy, TensorMeta(dy.shape[-1:], dy.dtype)])(
        lambda dy: (dy, dy.sum(0)))
    x = tensor(X)
    b = tensor(np.ones(5)) if with_b else None
    (op(x, b) * tensor(X, grad=False)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), X)
    if with_b:
        np.testing.assert_allclose(b.grad.numpy(), X.sum(0))


def test_an_op_with_varying_outputs_takes_no_gradient_rule(scratch):
    """The backward op of a variadic input's op has a variadic output; a gradient rule of
    its own would get one gradient per output, which it cannot have."""
    grad_op = scratch.get(f"{NS}::weighted_sum_grad")
    assert [str(o) for o in grad_op.outputs] == ["dxs*", "dscale"]
    for define in (lambda: grad_op.grad(needs=["xs"])(lambda xs, g, h: None),
                   lambda: grad_op.grad_kernel(needs=["xs"])(lambda xs: None)):
        with pytest.raises(OpDefinitionError, match=rf"{NS}::weighted_sum_grad: an op with "
                                                    rf"variadic or optional outputs \(dxs\*\) "
                                                    rf"cannot have a gradient rule"):
            define()
    assert grad_op.grad_rule is None and f"{NS}::weighted_sum_grad_grad" not in scratch


def test_nondifferentiable_must_name_a_left_out_output(scratch):
    op = scratch.define("gradscratch::two", inputs=["x"], outputs=["y", "z"],
                        meta=lambda x: [x, x], kernels={"*": lambda x: (x, x)})
    with pytest.raises(OpDefinitionError, match=r"gradscratch::two: nondifferentiable="
                                                r"\['y'\]: \['y'\] is not among"):
        op.grad_kernel(needs=["dy"], nondifferentiable=["y"])(lambda dy: dy)


def test_wrong_gradient_count_names_the_op_and_what_came(scratch):
    op = scratch.define("gradscratch::mul", inputs=["x", "w"], outputs=["y"],
                        meta=lambda x, w: x, kernels={"*": lambda x, w: x * w})
    op.grad_kernel(needs=["x", "w", "dy"])(lambda x, w, dy: dy * w)     # dw forgotten
    x = tensor(np.ones(3))
    with pytest.raises(ValueError, match=r"gradscratch::mul_grad: the Python kernel "
                                         r"returned 1 value\(s\), expected 2 \(dx, dw\): a "
                                         r"float64 array of shape \[3\]") as info:
        op(x, x).sum().backward()
    assert "raised in the gradient rule of op 'gradscratch::mul'" in info.value.__notes__


def test_wrong_backward_meta_names_the_output_and_what_came(scratch):
    op = scratch.define("gradscratch::neg", inputs=["x"], outputs=["y"],
                        meta=lambda x: x, kernels={"*": lambda x: -x})
    op.grad_kernel(needs=["dy"], meta=lambda dy: "like dy")(lambda dy: -dy)
    with pytest.raises(TypeError, match=r"gradscratch::neg_grad: the meta function "
                                        r"returned 'like dy' for output 'dx'") as info:
        op(tensor(np.ones(3))).sum().backward()
    assert "raised inside the meta function of op 'gradscratch::neg_grad'" in \
        info.value.__notes__


@pytest.mark.parametrize("define", [
    lambda op: op.kernel("float32")(42),
    lambda op: op.kernel()("not a function"),
    lambda op: op.meta(None),
    lambda op: op.grad(needs=["x"])(3.0),
    lambda op: op.grad_kernel(needs=["dy"])([]),
    lambda op: op.grad_kernel(needs=["dy"], meta=1)(lambda dy: dy),
])
def test_definitions_refuse_what_cannot_be_called(scratch, define):
    op = scratch.define("gradscratch::plain", inputs=["x"], outputs=["y"])
    with pytest.raises(OpDefinitionError, match=r"gradscratch::plain: .* must be callable"):
        define(op)
    assert not op.kernels and op.meta_fn is None and op.grad_rule is None
    assert "gradscratch::plain_grad" not in scratch


def test_define_refuses_a_meta_that_cannot_be_called(scratch):
    with pytest.raises(OpDefinitionError, match=r"gradscratch::m: the meta function "
                                                r"\(meta=\) must be callable, got str"):
        scratch.define("gradscratch::m", inputs=["x"], meta="x")
    with pytest.raises(OpDefinitionError, match=r"gradscratch::k: the kernel for float64 "
                                                r"must be callable, got int"):
        scratch.define("gradscratch::k", inputs=["x"], kernels={"float64": 1})


# ------------------------------------------------------------------------ opcheck

SAMPLES = {
    f"{NS}::topk": [Sample(RNG.standard_normal((2, 5)), k=2),
                    Sample(RNG.standard_normal((3, 4)).astype("float32"), k=3)],
    f"{NS}::scaled": [[RNG.standard_normal((2, 3))]],
    f"{NS}::weighted_sum": [[[RNG.standard_normal(3), RNG.standard_normal(3)],
                             np.array([1.5])]],
    f"{NS}::affine": [[RNG.standard_normal(3), RNG.standard_normal(3), None],
                      [RNG.standard_normal(3), RNG.standard_normal(3),
                       RNG.standard_normal(3)]],
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_opcheck_passes_for_each_pattern(name):
    report = opcheck(name, SAMPLES[name])
    assert report["meta"] == report["gradient"] == report["eager_static"] == "ok", report


def test_opcheck_of_an_undeclared_left_out_output_names_it():
    # opcheck reports it as a failure of the check that met it, naming the error
    with pytest.raises(AssertionError, match=r"\[gradient\]: UntakenGradientError: "
                                             r".*scaled_undeclared: a gradient flows "
                                             r"into output 'energy'"):
        opcheck(f"{NS}::scaled_undeclared", SAMPLES[f"{NS}::scaled"])
