"""PyLayer: the examples of seed 004 verbatim (import line changed), values and gradients
against numpy and finite differences; several inputs/outputs, non-tensor arguments,
None gradients, mark_non_differentiable, set_materialize_grads, error paths, memory."""
import gc
import resource
import tracemalloc
import weakref

import numpy as np
import pytest

import fastop
from fastop._core import storage
from fastop.autograd import PyLayer, gradcheck, gradgradcheck


def leaf(values, dtype="float64"):
    return fastop.to_tensor(np.asarray(values, dtype=dtype), stop_gradient=False)


def T(array):
    """A constant tensor sharing a numpy array."""
    return fastop.from_numpy(np.ascontiguousarray(array))


X = np.array([[0.3, -1.2, 0.7], [1.5, 0.1, -0.4]])


# --------------------------------------------------------------------------- seed 004

def test_seed_example_class_with_callables_and_kwargs(capsys):
    import fastop as paddle
    from fastop.autograd import PyLayer

    # Inherit from PyLayer
    class cus_tanh(PyLayer):
        @staticmethod
        def forward(ctx, x, func1, func2=paddle.square):
            # ctx is a context object that store some objects for backward.
            ctx.func = func2
            y = func1(x)
            # Pass tensors to backward.
            ctx.save_for_backward(y)
            return y

        @staticmethod
        # forward has only one output, so there is only one gradient in the input of backward.
        def backward(ctx, dy):
            # Get the tensors passed by forward.
            y, = ctx.saved_tensor()
            grad = dy * (1 - ctx.func(y))
            # forward has only one input, so only one gradient tensor is returned.
            return grad


    data = paddle.randn([2, 3], dtype="float64")
    data.stop_gradient = False
    z = cus_tanh.apply(data, func1=paddle.tanh)
    z.mean().backward()

    print(data.grad)

    d = data.numpy()
    np.testing.assert_allclose(z.numpy(), np.tanh(d))
    np.testing.assert_allclose(data.grad.numpy(), (1 - np.tanh(d) ** 2) / 6)
    assert "Tensor(shape=[2, 3], dtype=float64" in capsys.readouterr().out
    assert gradcheck(lambda t: cus_tanh.apply(t, func1=paddle.tanh).mean(), [data])
    assert gradgradcheck(lambda t: cus_tanh.apply(t, func1=paddle.tanh), [data])


def test_seed_example_forward_backward_methods():
    import fastop as paddle
    from fastop.autograd import PyLayer

    class cus_tanh(PyLayer):
        @staticmethod
        def forward(ctx, x):
            y = paddle.tanh(x)
            # Pass tensors to backward.
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            # Get the tensors passed by forward.
            y, = ctx.saved_tensor()
            grad = dy * (1 - paddle.square(y))
            return grad

    x = leaf(X)
    y = cus_tanh.apply(x)
    np.testing.assert_allclose(y.numpy(), np.tanh(X))
    y.backward(T(np.arange(6.0).reshape(2, 3)))
    np.testing.assert_allclose(x.grad.numpy(), np.arange(6.0).reshape(2, 3) * (1 - np.tanh(X) ** 2))
    assert gradcheck(cus_tanh.apply, [x])


def test_seed_example_apply():
    import fastop as paddle
    from fastop.autograd import PyLayer

    class cus_tanh(PyLayer):
        @staticmethod
        def forward(ctx, x, func1, func2=paddle.square):
            ctx.func = func2
            y = func1(x)
            # Pass tensors to backward.
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            # Get the tensors passed by forward.
            y, = ctx.saved_tensor()
            grad = dy * (1 - ctx.func(y))
            return grad


    data = paddle.randn([2, 3], dtype="float64")
    data.stop_gradient = False
    # run custom Layer.
    z = cus_tanh.apply(data, func1=paddle.tanh)

    np.testing.assert_allclose(z.numpy(), np.tanh(data.numpy()))
    assert not z.stop_gradient and data.grad is None


# --------------------------------------------------------------------------- numpy PyLayers

class NumpyTanh(PyLayer):
    """tanh computed with numpy (the benchmark's layer)."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.from_numpy(np.tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, = ctx.saved_tensor()
        return fastop.from_numpy(dy.numpy() * (1 - y.numpy() ** 2))


class ScaledProducts(PyLayer):
    """(x * y * alpha, x + shift(y)): two tensor inputs, a keyword tensor, non-tensor args."""

    @staticmethod
    def forward(ctx, x, y, alpha, shift=np.negative, *, z=None):
        ctx.alpha = alpha
        ctx.save_for_backward(x, y)
        ctx.seen_needs = ctx.needs_input_grad
        out1 = x.numpy() * y.numpy() * alpha
        out2 = x.numpy() + shift(y.numpy()) + (0 if z is None else z.numpy())
        return T(out1), T(out2)

    @staticmethod
    def backward(ctx, d1, d2):
        x, y = ctx.saved_tensor()
        d1, d2 = d1.numpy(), d2.numpy()
        dx = d1 * y.numpy() * ctx.alpha + d2
        dy = d1 * x.numpy() * ctx.alpha - d2
        return T(dx), T(dy), T(d2)


def test_several_inputs_outputs_non_tensor_and_keyword_arguments():
    x, y, z = leaf(X), leaf(np.cos(X)), leaf(np.ones_like(X))
    a, b = ScaledProducts.apply(x, y, 3.0, shift=np.negative, z=z)
    np.testing.assert_allclose(a.numpy(), X * np.cos(X) * 3)
    np.testing.assert_allclose(b.numpy(), X - np.cos(X) + 1)
    assert not a.stop_gradient and not b.stop_gradient
    fastop.autograd.backward([a, b], [T(np.ones_like(X)), T(np.full_like(X, 2.0))])
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X) * 3 + 2)
    np.testing.assert_allclose(y.grad.numpy(), X * 3 - 2)
    np.testing.assert_allclose(z.grad.numpy(), np.full_like(X, 2.0))
    assert gradcheck(lambda p, q, r: ScaledProducts.apply(p, q, 3.0, z=r), [x, y, z])


def test_needs_input_grad_and_none_gradients():
    x, y = leaf(X), T(np.cos(X))           # y does not need a gradient

    class Probe(PyLayer):
        @staticmethod
        def forward(ctx, a, b):
            ctx.needs = ctx.needs_input_grad
            return T(a.numpy() * b.numpy())

        @staticmethod
        def backward(ctx, d):
            assert ctx.needs == (True, False)
            return None, None                  # None: no gradient (for either input)

    out = Probe.apply(x, y)
    out.backward()
    assert x.grad is None


def test_output_only_recorded_when_an_input_needs_grad():
    y = NumpyTanh.apply(T(X))
    assert y.stop_gradient and y.is_leaf
    with fastop.no_grad():
        assert NumpyTanh.apply(leaf(X)).stop_gradient


class ValuesAndIndices(PyLayer):
    """(sorted values, argsort indices as float, int indices): the float indices are
    marked non-differentiable; backward records what it received."""

    received = []

    @staticmethod
    def forward(ctx, x, materialize=True):
        order = np.argsort(x.numpy(), axis=-1)
        ctx.order = order
        ctx.set_materialize_grads(materialize)
        values = T(np.take_along_axis(x.numpy(), order, axis=-1))
        as_float = T(order.astype(np.float64))
        ctx.mark_non_differentiable(as_float)
        return values, as_float, T(order)

    @staticmethod
    def backward(ctx, d_values, d_float, d_int):
        ValuesAndIndices.received = [d_values, d_float, d_int]
        grad = np.zeros(ctx.order.shape)
        np.put_along_axis(grad, ctx.order, d_values.numpy(), axis=-1)
        return T(grad)


def test_mark_non_differentiable_outputs_get_zero_gradients():
    x = leaf(X)
    values, as_float, as_int = ValuesAndIndices.apply(x)
    assert not values.stop_gradient
    assert as_float.stop_gradient and as_int.stop_gradient   # marked / integer
    values.backward(T(np.arange(6.0).reshape(2, 3)))
    d_values, d_float, d_int = ValuesAndIndices.received
    np.testing.assert_array_equal(d_float.numpy(), np.zeros_like(X))
    assert d_int.dtype == fastop.int64 and not d_int.numpy().any()
    expected = np.zeros_like(X)
    np.put_along_axis(expected, np.argsort(X, axis=-1), np.arange(6.0).reshape(2, 3), axis=-1)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_backward_gets_one_gradient_per_tensor_output():
    # seed 004, rule 2: `return y1, 1, y2, None` gives backward(ctx, dy1, dy2)
    seen = []

    class WithExtras(PyLayer):
        @staticmethod
        def forward(ctx, x1, x2):
            return x1 * 2.0, 1, x2 * 3.0, None

        @staticmethod
        def backward(ctx, dy1, dy2):
            seen.append((dy1 is None, dy2 is None))
            return dy1 * 2.0, dy2 * 3.0

    x1, x2 = leaf(X), leaf(X)
    y1, one, y2, nothing = WithExtras.apply(x1, x2)
    assert one == 1 and nothing is None
    (y1 + y2).sum().backward()
    assert seen == [(False, False)]
    np.testing.assert_array_equal(x1.grad.numpy(), np.full_like(X, 2.0))
    np.testing.assert_array_equal(x2.grad.numpy(), np.full_like(X, 3.0))


def test_set_materialize_grads_false_passes_none():
    x = leaf(X)
    values, _, _ = ValuesAndIndices.apply(x, materialize=False)
    values.backward()
    d_values, d_float, d_int = ValuesAndIndices.received
    assert d_float is None and d_int is None
    np.testing.assert_array_equal(d_values.numpy(), np.ones_like(X))


def test_saved_output_is_not_a_reference_cycle():
    x = leaf(X)
    gc.collect()
    gc.disable()
    try:
        y = NumpyTanh.apply(x)
        ref = weakref.ref(y)
        del y
        assert ref() is None
        for _ in range(10):
            NumpyTanh.apply(x).backward()
            x.clear_grad(set_to_zero=False)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_saved_tensor_after_backward_needs_retain_graph():
    x = leaf(X)
    y = NumpyTanh.apply(x)
    y.backward(retain_graph=True)
    x.clear_grad(set_to_zero=False)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(X) ** 2)
    with pytest.raises(RuntimeError, match=r"PyLayer 'NumpyTanh' a second time.*retain_graph=True"):
        y.backward()


def test_fresh_numpy_gradient_becomes_the_leaf_grad_without_a_copy():
    made = []

    class Double(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            grad = T(dy.numpy() * 2)
            made.append(weakref.ref(grad))
            return grad

    x = leaf(X)
    Double.apply(x).backward()
    assert x.grad is made[0]()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))


def test_gradcheck_of_a_numpy_pylayer():
    assert gradcheck(NumpyTanh.apply, [leaf(X)])


def test_output_that_also_feeds_another_output_gets_both_gradients():
    # y is a backward root and also upstream of z: its node must wait for z's gradient
    x = leaf(X)
    y = NumpyTanh.apply(x)
    z = y * 3.0
    fastop.autograd.backward([y, z], [T(np.ones_like(X)), T(np.full_like(X, 2.0))])
    np.testing.assert_allclose(x.grad.numpy(), (1 + 2 * 3) * (1 - np.tanh(X) ** 2))


def test_both_outputs_of_one_layer_as_roots_run_its_backward_once():
    calls = []

    class Split(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2), T(x.numpy() * 5)

        @staticmethod
        def backward(ctx, da, db):
            calls.append(1)
            return T(da.numpy() * 2 + db.numpy() * 5)

    x = leaf(X)
    a, b = Split.apply(x)
    fastop.autograd.backward([b, a, b], [T(np.ones_like(X))] * 3)
    assert len(calls) == 1
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(X, 2 + 5 * 2))


def test_backward_may_return_numpy_arrays_and_fastop_storage():
    class Mixed(PyLayer):
        @staticmethod
        def forward(ctx, x, y):
            return T(x.numpy() + y.numpy())

        @staticmethod
        def backward(ctx, d):
            return d.numpy() * 2, storage.from_numpy(d.numpy() * 3)

    x, y = leaf(X), leaf(X)
    Mixed.apply(x, y).backward()
    assert type(x.grad) is fastop.Tensor and type(y.grad) is fastop.Tensor
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))
    np.testing.assert_array_equal(y.grad.numpy(), np.full_like(X, 3.0))


def test_single_input_needs_input_grad_follows_grad_mode():
    seen = []

    class Probe(PyLayer):
        @staticmethod
        def forward(ctx, x):
            seen.append(ctx.needs_input_grad)
            return T(x.numpy())

        @staticmethod
        def backward(ctx, d):
            return d

    x = leaf(X)
    Probe.apply(x)
    Probe.apply(T(X))
    with fastop.no_grad():
        Probe.apply(x)
    assert seen == [(True,), (False,), (False,)]


# --------------------------------------------------------------------------- errors

def test_backward_returning_the_wrong_count_names_the_layer():
    class TwoGrads(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            return dy, dy

    with pytest.raises(TypeError, match=r"PyLayer 'TwoGrads': backward returned 2 gradient"
                                        r"\(s\), expected 1"):
        TwoGrads.apply(leaf(X)).backward()


def test_gradient_of_the_wrong_shape_is_never_broadcast():
    class RowGrad(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            return T(np.ones(3))

    with pytest.raises(ValueError, match=r"PyLayer 'RowGrad'.*Tensor input 0 has shape "
                                         r"\[3\], expected \[2, 3\]"):
        RowGrad.apply(leaf(X)).backward()


def test_gradient_of_the_wrong_dtype_names_the_layer():
    class Float32Grad(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            return T(dy.numpy().astype(np.float32))

    with pytest.raises(TypeError, match=r"PyLayer 'Float32Grad'.*Tensor input 0 has dtype "
                                        r"float32, expected float64"):
        Float32Grad.apply(leaf(X)).backward()


def test_context_type_must_be_a_pylayer_node():
    from fastop.autograd import _py_layer
    with pytest.raises(TypeError, match="set_context_type: expected a subclass of "
                                        "PyLayerNode, got dict"):
        _py_layer.set_context_type(dict)

    class WithInit(fastop.autograd.PyLayerContext):
        def __init__(self):
            self.ready = True

    with pytest.raises(TypeError, match="WithInit defines __init__, which would never run"):
        _py_layer.set_context_type(WithInit)
    assert type(_captured_context()) is fastop.autograd.PyLayerContext


def _captured_context():
    box = []

    class Capture(PyLayer):
        @staticmethod
        def forward(ctx, x):
            box.append(ctx)
            return T(x.numpy())

    Capture.apply(leaf(X))
    return box[0]


def test_forward_returning_no_tensor_names_the_layer():
    class NoTensor(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x.numpy(), 3

    with pytest.raises(TypeError, match=r"PyLayer 'NoTensor': forward must return a Tensor.*"
                                        r"got tuple of \(ndarray, int\)"):
        NoTensor.apply(leaf(X))


def test_exceptions_keep_type_traceback_and_name_the_layer():
    class Fails(PyLayer):
        @staticmethod
        def forward(ctx, x, where):
            if where == "forward":
                raise KeyError("in forward")
            return T(x.numpy())

        @staticmethod
        def backward(ctx, dy):
            raise ZeroDivisionError("in backward")

    with pytest.raises(KeyError) as info:
        Fails.apply(leaf(X), "forward")
    assert "raised in forward of PyLayer 'Fails'" in info.value.__notes__
    assert info.traceback[-1].name == "forward"
    with pytest.raises(ZeroDivisionError) as info:
        Fails.apply(leaf(X), "backward").backward()
    assert "raised in backward of PyLayer 'Fails'" in info.value.__notes__
    assert info.traceback[-1].name == "backward"


# --------------------------------------------------------------------------- memory

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_memory_stays_flat_over_1e5_apply_and_backward():
    x = leaf(np.random.default_rng(0).standard_normal((2, 3)))
    g = T(np.ones((2, 3)))

    def step():
        NumpyTanh.apply(x).backward(g)
        x.clear_grad(set_to_zero=False)

    for _ in range(5_000):
        step()
    tracemalloc.start()
    rss_before = _rss_bytes()
    traced_before = tracemalloc.get_traced_memory()[0]
    for _ in range(100_000):
        step()
    traced_growth = tracemalloc.get_traced_memory()[0] - traced_before
    rss_growth = _rss_bytes() - rss_before
    tracemalloc.stop()
    assert traced_growth < 64 * 1024, traced_growth
    assert rss_growth < 4 * 1024 * 1024, rss_growth
