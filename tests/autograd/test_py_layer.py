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
    assert not values.stop_gradient and as_float.stop_gradient   # marked
    assert not as_int.stop_gradient      # PaddlePaddle: any dtype carries a gradient
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


# --------------------------------------------------------------------------- Paddle's rules

class NumpyConcat(PyLayer):
    """concat of a list of tensors along axis 0, in numpy: one list input slot."""

    @staticmethod
    def forward(ctx, xs, scale=1.0):
        ctx.sizes = [x.shape[0] for x in xs]
        ctx.scale = scale
        ctx.needs = ctx.needs_input_grad
        return T(np.concatenate([x.numpy() for x in xs]) * scale)

    @staticmethod
    def backward(ctx, dy):
        cuts = np.cumsum(ctx.sizes)[:-1]
        return [T(g * ctx.scale) for g in np.split(dy.numpy(), cuts)]


def test_tensors_in_a_list_argument_are_inputs_and_get_a_list_of_gradients():
    a, b, c = leaf(X), leaf(X[:1]), leaf(np.cos(X))
    y = NumpyConcat.apply([a, b, c], scale=3.0)
    assert not y.stop_gradient and y.shape == [5, 3]
    y.backward(T(np.arange(15.0).reshape(5, 3)))
    rows = np.arange(15.0).reshape(5, 3) * 3
    np.testing.assert_array_equal(a.grad.numpy(), rows[:2])
    np.testing.assert_array_equal(b.grad.numpy(), rows[2:3])
    np.testing.assert_array_equal(c.grad.numpy(), rows[3:])
    assert gradcheck(lambda p, q: NumpyConcat.apply((p, q)), [leaf(X), leaf(X)])


def test_needs_input_grad_has_one_flag_per_input_slot():
    y = NumpyConcat.apply([T(X), T(X)])                 # nothing needs a gradient
    assert y.stop_gradient
    box = []

    class Slots(PyLayer):
        @staticmethod
        def forward(ctx, x, xs, n, *, z):
            box.append(ctx.needs_input_grad)
            return x + xs[0] + z

        @staticmethod
        def backward(ctx, dy):
            return dy, [dy, None], dy

    x, z = leaf(X), T(X)
    out = Slots.apply(x, [T(X), leaf(X)], 3, z=z)
    assert box == [(True, True, False)]
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


def test_a_list_slot_takes_a_list_of_its_length():
    class Concat(NumpyConcat):
        @staticmethod
        def backward(ctx, dy):
            return tuple(NumpyConcat.backward(ctx, dy))   # 3 entries for one slot

    with pytest.raises(ValueError, match=r"PyLayer 'Concat': backward returned 3 "
                                         r"gradient\(s\), expected 1"):
        Concat.apply([leaf(X), leaf(X), leaf(X)]).backward()

    class Short(NumpyConcat):
        @staticmethod
        def backward(ctx, dy):
            return ([dy],)

    with pytest.raises(ValueError, match=r"PyLayer 'Short': the gradient for input slot 0 "
                                         r"\(a list of 2 Tensors\) must be a list or tuple "
                                         r"of 2 Tensors or None, got list of \(Tensor\)"):
        Short.apply([leaf(X), leaf(X)]).backward()


def test_an_output_that_is_a_list_of_tensors_gets_a_list_of_gradients():
    received = []

    class Parts(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0, [x * 3.0, "label", x * 4.0]

        @staticmethod
        def backward(ctx, d2, d_parts):
            received.append(d_parts)
            return d2 * 2.0 + d_parts[0] * 3.0 + d_parts[1] * 4.0

    x = leaf(X)
    doubled, parts = Parts.apply(x)
    assert type(parts) is list and parts[1] == "label"
    assert not parts[0].stop_gradient and not parts[2].stop_gradient
    (doubled + parts[2]).sum().backward()
    assert type(received[0]) is list and len(received[0]) == 2
    np.testing.assert_array_equal(received[0][0].numpy(), np.zeros_like(X))  # materialized
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0 + 4.0))


def test_a_list_of_one_output_gets_a_list_of_one_gradient():
    received = []

    class Wrapped(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return ([x * 2.0],)

        @staticmethod
        def backward(ctx, d_list):
            received.append(d_list)
            return d_list[0] * 2.0

    x = leaf(X)
    (y,), = Wrapped.apply(x)
    y.sum().backward()
    assert type(received[0]) is list and len(received[0]) == 1
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))


def test_trailing_gradients_may_be_left_off_for_inputs_without_gradient():
    class FirstOnly(PyLayer):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, dy):
            return dy * 2.0                  # nothing for y

    x = leaf(X)
    FirstOnly.apply(x, T(X)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))
    with pytest.raises(ValueError, match=r"PyLayer 'FirstOnly': backward returned 1 "
                                         r"gradient\(s\), expected 2"):
        FirstOnly.apply(leaf(X), leaf(X)).sum().backward()


def test_a_gradient_that_is_not_a_tensor_names_the_input():
    class ReturnsInt(PyLayer):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, dy):
            return dy, 1

    # refused even for an input that takes no gradient: the value is wrong either way
    with pytest.raises(ValueError, match=r"PyLayer 'ReturnsInt': the gradient for Tensor "
                                         r"input 1 must be a Tensor or None, got int"):
        ReturnsInt.apply(leaf(X), T(X)).sum().backward()


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "uint8", "float16", "float32"])
def test_outputs_of_every_dtype_carry_gradients(dtype):
    received = []

    class Cast(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return fastop.cast(x, dtype)

        @staticmethod
        def backward(ctx, dy):
            received.append(dy)
            return dy

    x = leaf(X)
    y = Cast.apply(x)
    assert y.dtype == dtype and not y.stop_gradient
    fastop.cast(y, "float64").sum().backward()
    assert received[0].dtype == dtype          # cast's gradient casts back
    assert x.grad.dtype == fastop.float64      # cast to the input's dtype
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


class Identity(PyLayer):
    """Returns its input itself: in place unless ctx.mark_not_inplace(x)."""

    @staticmethod
    def forward(ctx, x, not_inplace=False):
        if not_inplace:
            ctx.mark_not_inplace(x)
        return x

    @staticmethod
    def backward(ctx, dy):
        return dy * 5.0


def test_returning_an_input_modifies_it_in_place():
    x = leaf(X)
    b = x ** 2                              # saved by the next op ...
    c = b ** 2
    out = Identity.apply(b)                 # ... then written in place (Paddle's rule)
    assert out is not b and out.numpy().ctypes.data == b.numpy().ctypes.data
    out.sum().backward()                    # what out needs is intact
    np.testing.assert_allclose(x.grad.numpy(), 5.0 * 2 * X)
    with pytest.raises(RuntimeError, match=r"op 'fastop::pow'.*modified in place.*"
                                           r"received tensor_version:1 != "
                                           r"wrapper_version_snapshot:0"):
        c.sum().backward()


def test_mark_not_inplace_returns_a_new_tensor_without_a_write():
    x = leaf(X)
    b = x ** 2
    c = b ** 2
    out = Identity.apply(b, not_inplace=True)
    assert out is not b and not out.stop_gradient
    (out.sum() + c.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 5.0 * 2 * X + 4 * X ** 3)


def test_a_leaf_needing_a_gradient_cannot_be_returned_in_place():
    x = leaf(X)
    with pytest.raises(ValueError, match=r"PyLayer 'Identity': forward returned its input "
                                         r"\(shape \[2, 3\]\) itself, a leaf Tensor with "
                                         r"stop_gradient=False.*mark_not_inplace"):
        Identity.apply(x)
    out = Identity.apply(x, not_inplace=True)
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 5.0))
    assert Identity.apply(T(X)).stop_gradient            # nothing recorded, no check


class CastGrad(PyLayer):
    """Identity whose backward returns the gradient in `grad_dtype` (its input:
    float64)."""

    @staticmethod
    def forward(ctx, x, grad_dtype):
        ctx.grad_dtype = grad_dtype
        return x * 1.0

    @staticmethod
    def backward(ctx, dy):
        return fastop.cast(dy, ctx.grad_dtype)


@pytest.mark.parametrize("grad_dtype", ["float32", "float16"])
@pytest.mark.parametrize("consistent", [True, False])
def test_set_grad_in_dtype_consistent_decides_the_received_dtype(consistent, grad_dtype):
    received = []

    class Producer(PyLayer):
        @staticmethod
        def forward(ctx, x):
            ctx.set_grad_in_dtype_consistent(consistent)
            return x * 2.0

        @staticmethod
        def backward(ctx, dy):
            received.append(dy.dtype)
            return dy * 2.0

    x = leaf(X)
    CastGrad.apply(Producer.apply(x), grad_dtype).sum().backward()
    assert received == [fastop.float64 if consistent else grad_dtype]
    assert x.grad.dtype == fastop.float64      # the leaf's own dtype either way
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 2.0))


def test_a_layer_without_backward_raises_when_differentiated():
    from fastop.autograd.py_layer import BackwardNotImplementedError

    class ForwardOnly(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

    y = ForwardOnly.apply(leaf(X))           # forward alone works
    with pytest.raises(BackwardNotImplementedError, match="must define a static backward") \
            as info:
        y.backward()
    # both what Python code expects and what PaddlePaddle raises (OSError)
    assert isinstance(info.value, NotImplementedError) and isinstance(info.value, OSError)
    assert "raised in backward of PyLayer 'ForwardOnly'" in info.value.__notes__


# --------------------------------------------------------------------------- errors

def test_backward_returning_the_wrong_count_names_the_layer():
    class TwoGrads(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            return dy, dy

    with pytest.raises(ValueError, match=r"PyLayer 'TwoGrads': backward returned 2 "
                                         r"gradient\(s\), expected 1"):
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


def test_gradient_of_another_dtype_is_cast_to_the_input_dtype():
    class Float32Grad(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return T(x.numpy() * 2)

        @staticmethod
        def backward(ctx, dy):
            return T(dy.numpy().astype(np.float32) * 2)

    x = leaf(X)
    Float32Grad.apply(x).backward(T(np.full_like(X, 0.1)))
    assert x.grad.dtype == fastop.float64
    np.testing.assert_array_equal(x.grad.numpy(), np.float32(0.1) * np.float32(2))


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

    with pytest.raises(ValueError, match=r"PyLayer 'NoTensor': forward must return a "
                                         r"Tensor.*got tuple of \(ndarray, int\)"):
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
