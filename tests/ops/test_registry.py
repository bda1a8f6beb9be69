"""The op registry: definitions, binding, meta, Python kernels and their checks."""
import numpy as np
import pytest

from fastop._core.storage import DenseTensor, from_numpy
from fastop.ops import (DuplicateOpError, OpDefinitionError, Registry, TensorMeta,
                        UnknownOpError)


@pytest.fixture
def registry():
    return Registry()


def define_scale(registry, name="test::scale"):
    op = registry.define(name, inputs=["x", "bias?"], outputs=["y"],
                         attrs={"alpha": 1.0, "axes": [0]}, doc="y = alpha * x + bias")

    @op.meta
    def _(x, bias, alpha, axes):
        return x

    @op.kernel("float32", "float64")
    def _(x, bias, alpha, axes):
        return alpha * x + (0 if bias is None else bias)
    return op


def run(op, *args, **kwargs):
    inputs, attrs = op.bind(args, kwargs)
    dense = [None if x is None else from_numpy(np.asarray(x)) for x in inputs]
    return op.invoke(dense, attrs)


def test_define_and_run_python_kernel(registry):
    op = define_scale(registry)
    x = np.arange(4.0)
    (y,) = run(op, x, alpha=3.0)
    assert isinstance(y, DenseTensor)
    np.testing.assert_array_equal(np.asarray(y), 3.0 * x)
    (y,) = run(op, x, x, 2)            # optional input given; int attr coerced to float
    np.testing.assert_array_equal(np.asarray(y), 3.0 * x)


def test_python_kernel_receives_zero_copy_arrays(registry):
    seen = {}
    op = registry.define("test::probe", inputs=["x"], outputs=["y"],
                         meta=lambda x: x)

    @op.kernel()
    def _(x):
        seen["x"] = x
        return x

    src = np.arange(3.0)
    (y,) = op.invoke([from_numpy(src)], {})
    assert np.shares_memory(seen["x"], src)
    assert np.shares_memory(np.asarray(y), src)


def test_signature_and_introspection(registry):
    op = define_scale(registry)
    assert op.signature() == "test::scale(x, bias?, alpha=1.0, axes=[0]) -> (y)"
    assert op.namespace == "test" and op.short_name == "scale"
    assert op.dtypes == ["float32", "float64"]
    assert registry.namespace("test").scale is op
    assert "scale" in dir(registry.namespace("test"))


def test_attribute_checks(registry):
    op = define_scale(registry)
    with pytest.raises(TypeError, match=r"test::scale: attribute 'alpha' expects float, got str"):
        op.bind((np.ones(2),), {"alpha": "big"})
    with pytest.raises(TypeError, match=r"did you mean 'alpha' for 'alpah'"):
        op.bind((np.ones(2),), {"alpah": 2.0})
    with pytest.raises(TypeError, match=r"test::scale: missing input 'x'"):
        op.bind((), {})
    assert op.bind((np.ones(2),), {"axes": (1, 2)})[1]["axes"] == [1, 2]


def test_required_attribute(registry):
    op = registry.define("test::req", inputs=["x"], attrs={"k": int}, meta=lambda x, k: x)
    with pytest.raises(TypeError, match="test::req: missing attribute 'k'"):
        op.bind((1,), {})


def test_kernel_result_count_is_checked(registry):
    op = registry.define("test::two", inputs=["x"], outputs=["a", "b"],
                         meta=lambda x: (x, x), kernels={"*": lambda x: x})
    with pytest.raises(ValueError, match=r"test::two: the Python kernel returned 1 value\(s\), "
                                         r"expected 2 \(a, b\)"):
        op.invoke([from_numpy(np.ones(2))], {})


def test_kernel_result_shape_and_dtype_are_checked(registry):
    op = registry.define("test::bad", inputs=["x"], outputs=["y"], attrs={"mode": "shape"},
                         meta=lambda x, mode: x)

    @op.kernel()
    def _(x, mode):
        return x[:1] if mode == "shape" else x.astype(np.int64)

    x = from_numpy(np.ones(3))
    with pytest.raises(ValueError, match=r"test::bad: output 'y' should have shape \[3\], "
                                         r"the kernel returned \[1\]"):
        op.invoke([x], {"mode": "shape"})
    with pytest.raises(TypeError, match=r"output 'y' should have dtype float64, the kernel "
                                        r"returned int64"):
        op.invoke([x], {"mode": "dtype"})
    # the op keeps working after an error
    op.kernel()(lambda x, mode: x * 2)
    np.testing.assert_array_equal(np.asarray(op.invoke([x], {"mode": "shape"})[0]), 2 * np.ones(3))


def test_user_exception_keeps_type_and_gets_a_note(registry):
    op = registry.define("test::boom", inputs=["x"], meta=lambda x: x)

    @op.kernel()
    def _(x):
        raise ZeroDivisionError("user bug")

    with pytest.raises(ZeroDivisionError, match="user bug") as info:
        op.invoke([from_numpy(np.ones(1))], {})
    assert "raised inside the Python kernel of op 'test::boom'" in info.value.__notes__


def test_no_kernel_for_dtype(registry):
    op = define_scale(registry)
    with pytest.raises(TypeError, match=r"test::scale: no kernel for dtype int64; kernels exist "
                                        r"for \['float32', 'float64'\] \(the dtype of input 'x'\)"):
        op.invoke([from_numpy(np.ones(2, np.int64)), None], {"alpha": 1.0, "axes": [0]})


def test_meta_with_unknown_dims(registry):
    op = define_scale(registry)
    (m,) = op.infer_meta([TensorMeta([None, 3], "float32"), None], {"alpha": 1.0, "axes": [0]})
    assert m == TensorMeta([None, 3], "float32")


def test_variadic_inputs(registry):
    op = registry.define("test::stack", inputs=["xs*"], outputs=["y"],
                         meta=lambda xs: TensorMeta([len(xs), *xs[0].shape], xs[0].dtype),
                         kernels={"*": lambda xs: np.stack(xs)})
    xs = [from_numpy(np.full(2, float(i))) for i in range(3)]
    (y,) = op.invoke([xs], {})
    np.testing.assert_array_equal(np.asarray(y), [[0, 0], [1, 1], [2, 2]])
    with pytest.raises(TypeError, match="variadic input 'xs' expects a list"):
        op.bind((xs[0],), {})


def test_unknown_op_suggests_close_matches(registry):
    define_scale(registry)
    with pytest.raises(UnknownOpError, match=r"unknown op 'test::scal'; did you mean 'test::scale'"):
        registry.get("test::scal")
    with pytest.raises(UnknownOpError, match=r"did you mean 'test::scale'"):
        registry.get("scale")
    assert not hasattr(registry.namespace("test"), "nothing_like_it")
    with pytest.raises(AttributeError, match="no op namespace 'tset'; did you mean 'test'"):
        registry.namespace("tset")


def test_duplicate_definition_names_both_distributions(registry):
    with registry.providing("fastop-a", "1.0"):
        define_scale(registry)
    with registry.providing("fastop-b", "2.1"):
        with pytest.raises(DuplicateOpError, match=r"'test::scale' is defined twice: by "
                                                   r"fastop-a 1.0 and by fastop-b 2.1"):
            define_scale(registry)


@pytest.mark.parametrize("name", ["noname", "a::b::c", "bad-ns::op", "ns::1op"])
def test_bad_names_are_rejected(registry, name):
    with pytest.raises(OpDefinitionError, match="namespace::name"):
        registry.define(name, inputs=["x"])


def test_grad_kernel_becomes_a_registered_op(registry):
    op = registry.define("test::cube", inputs=["x"], outputs=["y"], meta=lambda x: x,
                         kernels={"*": lambda x: x ** 3})

    @op.grad_kernel(needs=["x", "dy"])
    def _(x, dy):
        return 3 * x ** 2 * dy

    grad_op = registry.get("test::cube_grad")
    assert grad_op.signature() == "test::cube_grad(x, dy) -> (dx)"
    assert op.grad_rule.needs == ("x",) and op.grad_rule.kernel_op == "test::cube_grad"
    x = from_numpy(np.array([1.0, 2.0]))
    dy = from_numpy(np.array([1.0, 0.5]))
    (dx,) = op.grad_rule.fn(x, dy)
    np.testing.assert_allclose(np.asarray(dx), [3.0, 6.0])


def test_grad_rule_maps_gradients_to_inputs(registry):
    op = registry.define("test::mul2", inputs=["a", "b"], outputs=["y"], meta=lambda a, b: a,
                         kernels={"*": lambda a, b: a * b}, differentiable=["a"])

    @op.grad_kernel(needs=["b", "dy"])
    def _(b, dy):
        return b * dy

    a, b, dy = (from_numpy(np.array([v])) for v in (2.0, 5.0, 1.5))
    da, db = op.grad_rule.fn(b, dy)
    np.testing.assert_allclose(np.asarray(da), [7.5])
    assert db is None


def test_grad_needs_must_be_known(registry):
    op = define_scale(registry)
    with pytest.raises(OpDefinitionError, match=r"needs unknown value\(s\) \['z'\]"):
        op.grad(needs=["z"])(lambda z, dy: None)


def test_grad_reads_must_name_differentiable_inputs_and_needed_values(registry):
    op = define_scale(registry)
    with pytest.raises(OpDefinitionError, match=r"reads declared for \['y'\].*\['x', 'bias'\]"):
        op.grad(needs=["x"], reads={"y": ["x"]})(lambda x, dy: None)
    with pytest.raises(OpDefinitionError, match=r"reads \['y'\], which the rule does not"):
        op.grad(needs=["x"], reads={"x": ["y"]})(lambda x, dy: None)
    op.grad(needs=["x", "y"], reads={"x": ["y"]})(lambda x, y, dy: (dy, None))
    assert op.grad_rule.reads == {"x": ("y",)}


def test_registry_version_changes_on_define_and_remove(registry):
    v0 = registry.version
    define_scale(registry)
    assert registry.version > v0
    v1 = registry.version
    registry.remove("test::scale")
    assert registry.version > v1 and "test::scale" not in registry


def test_ops_defined_outside_a_plugin_are_attributed_to_the_calling_module(registry):
    op = define_scale(registry)
    assert (op.plugin, op.version) == (__name__, "")

    @op.grad_kernel(needs=["dy"])
    def scale_backward(dy, alpha, axes):      # its op is defined from inside the registry
        return alpha * dy
    assert registry.get("test::scale_grad").plugin == __name__
    with registry.providing("fastop-a", "1.0"):
        assert define_scale(registry, "test::inside").plugin == "fastop-a"
    assert define_scale(registry, "test::after").plugin == __name__


def test_namespaces_are_computed_once_per_version(registry):
    define_scale(registry, "b::x")
    define_scale(registry, "a::x")
    assert registry.namespaces() == ["a", "b"]
    registry.namespaces().append("changed")       # a copy: the cache stays intact
    assert registry.namespaces() == ["a", "b"]
    registry.remove("a::x")
    assert registry.namespaces() == ["b"]


def test_help_and_doc_of_an_op_show_its_doc_and_signature(registry):
    """Issue 26: help(op) and op.__doc__ show the op's doc= and call signature, not the
    OpDef class's docstring (which the class itself keeps)."""
    import inspect
    import pydoc
    from fastop.ops import OpDef
    op = define_scale(registry)
    op.version = "1.2"
    assert op.__doc__ == ("scale(x, bias?, alpha=1.0, axes=[0]) -> (y)\n\n"
                          f"y = alpha * x + bias\n\nOp 'test::scale' from {op.plugin} 1.2.")
    text = pydoc.render_doc(op, renderer=pydoc.plaintext)
    assert "y = alpha * x + bias" in text and "One op definition" not in text
    assert OpDef.__doc__.startswith("One op definition.")
    assert str(inspect.signature(op)) == "(x, bias=None, alpha=1.0, axes=[0])"
    bare = registry.define("test::bare", inputs=["x"], outputs=["y"],
                           attrs={"k": 2, "mode": str})
    assert "(this op has no doc=)" in bare.__doc__
    assert str(inspect.signature(bare)) == "(x, k=2, *, mode)"   # required after default
    keyword = registry.define("test::kw", inputs=["x"], outputs=["y"], attrs={"in": 1})
    with pytest.raises(ValueError):          # 'in' is no Python parameter name: none
        inspect.signature(keyword)
