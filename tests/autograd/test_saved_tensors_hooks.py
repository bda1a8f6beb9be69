"""saved_tensors_hooks: what ops and PyLayers save for backward goes through pack/unpack
(counted and checked against the values), gradients equal those without hooks, the hooks
nest, are per thread, and run without recording."""
import threading

import numpy as np
import pytest

import fastop
from fastop.autograd import PyLayer, saved_tensors_hooks

X = np.array([[0.3, -1.2, 0.7], [1.5, 0.1, -0.4]])


def leaf(values):
    return fastop.to_tensor(np.asarray(values, dtype="float64"), stop_gradient=False)


class Recorder:
    """pack: a numpy copy, remembered; unpack: a Tensor from it, counted."""

    def __init__(self):
        self.packed, self.unpacked = [], 0

    def pack(self, t):
        assert isinstance(t, fastop.Tensor)
        self.packed.append(t.numpy().copy())
        return ("kept", len(self.packed) - 1)

    def unpack(self, key):
        self.unpacked += 1
        return fastop.to_tensor(self.packed[key[1]])

    def hooks(self):
        return saved_tensors_hooks(self.pack, self.unpack)


def test_an_op_saves_its_inputs_through_the_hooks():
    rec = Recorder()
    a, b = leaf(X), leaf(np.cos(X))
    with rec.hooks():
        y = fastop.multiply(a, b)
    assert len(rec.packed) == 2 and rec.unpacked == 0
    np.testing.assert_array_equal(rec.packed[0], X)
    y.sum().backward()
    assert rec.unpacked == 2
    np.testing.assert_array_equal(a.grad.numpy(), np.cos(X))
    np.testing.assert_array_equal(b.grad.numpy(), X)


def test_a_rule_run_as_its_backward_kernel_reads_the_unpacked_values():
    rec = Recorder()
    x = leaf(X)
    with rec.hooks():
        y = fastop.tanh(x)                   # saves its output
    y.backward(fastop.to_tensor(np.full_like(X, 2.0)))
    assert rec.unpacked == 1
    np.testing.assert_allclose(x.grad.numpy(), 2 * (1 - np.tanh(X) ** 2))


def test_unpacked_values_are_what_backward_uses():
    x = leaf(X)
    with saved_tensors_hooks(lambda t: t.numpy().copy(),
                             lambda a: fastop.to_tensor(np.zeros_like(a))):
        y = fastop.tanh(x)                   # backward will see tanh(x) = 0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


class Scale(PyLayer):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, [b, None], 3)
        return a * b

    @staticmethod
    def backward(ctx, dy):
        a, (b, none), three = ctx.saved_tensor()
        assert none is None and three == 3
        return dy * b, dy * a


def test_a_pylayer_saves_through_the_hooks_lists_included():
    rec = Recorder()
    a, b = leaf(X), leaf(np.cos(X))
    with rec.hooks():
        y = Scale.apply(a, b)
    assert len(rec.packed) == 2                # the two tensors; None and 3 kept as they are
    y.sum().backward()
    assert rec.unpacked == 2
    np.testing.assert_array_equal(a.grad.numpy(), np.cos(X))
    np.testing.assert_array_equal(b.grad.numpy(), X)


def test_hooks_nest_and_are_removed_on_exit():
    outer, inner = Recorder(), Recorder()
    a = leaf(X)
    with outer.hooks():
        with inner.hooks():
            fastop.multiply(a, a)
        fastop.multiply(a, a)
    fastop.multiply(a, a)
    assert len(inner.packed) == 2 and len(outer.packed) == 2


def test_hooks_apply_to_the_thread_that_entered_them():
    rec = Recorder()
    a = leaf(X)
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        fastop.multiply(a, a)                 # recorded without this thread's hooks
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with rec.hooks():
        entered.set()
        done.wait(10)
    t.join(10)
    assert rec.packed == []


def test_hooks_run_without_recording():
    a = leaf(X)
    seen = []

    def pack(t):
        doubled = t * 2.0                     # an op inside the hook: not recorded
        seen.append(doubled.stop_gradient)
        return doubled

    with saved_tensors_hooks(pack, lambda t: t * 0.5):
        y = fastop.multiply(a, a)
    y.sum().backward()
    assert seen == [True, True]
    np.testing.assert_allclose(a.grad.numpy(), 2 * X)


def test_an_unpack_hook_must_give_a_tensor():
    a = leaf(X)
    with saved_tensors_hooks(lambda t: t.numpy(), lambda arr: arr):
        y = fastop.multiply(a, a)
    with pytest.raises(TypeError, match="saved_tensors_hooks: unpack_hook must return a "
                                        "Tensor, got ndarray"):
        y.sum().backward()


def test_hooks_must_be_callable():
    with pytest.raises(TypeError, match="saved_tensors_hooks: unpack_hook must be "
                                        "callable, got int"):
        saved_tensors_hooks(lambda t: t, 3)
