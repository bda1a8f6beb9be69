"""Backward-end hooks (fastop.autograd.register_backward_end_hook): when they run (after
Tensor.backward and autograd.backward, once per outermost pass, with the gradients
stored), when they do not (fastop.grad, a failed pass, a pass nested in a PyLayer's
backward), order, removal, errors."""
import numpy as np
import pytest

import fastop
from fastop.autograd import HookRemoveHelper, PyLayer, register_backward_end_hook


def leaf(values):
    return fastop.to_tensor(np.asarray(values, dtype="float64"), stop_gradient=False)


@pytest.fixture
def calls():
    """A list the registered hook appends to; the hook is removed afterwards."""
    seen = []
    handle = register_backward_end_hook(lambda: seen.append("end"))
    yield seen
    handle.remove()


def test_runs_after_tensor_backward_with_the_gradients_stored():
    x = leaf([1.0, 2.0])
    seen = []
    handle = register_backward_end_hook(lambda: seen.append(x.grad.numpy().tolist()))
    try:
        (x * x).sum().backward()
    finally:
        handle.remove()
    assert seen == [[2.0, 4.0]]


def test_runs_after_autograd_backward_once_per_pass(calls):
    x = leaf([1.0, 2.0])
    fastop.autograd.backward([(x * x).sum(), (x * 3.0).sum()])
    assert calls == ["end"]
    (x * x).sum().backward()
    assert calls == ["end", "end"]


def test_not_run_by_fastop_grad(calls):
    x = leaf([1.0, 2.0])
    (g,) = fastop.grad((x * x).sum(), x)
    assert g.numpy().tolist() == [2.0, 4.0] and calls == []


def test_not_run_after_a_backward_that_raised(calls):
    x = leaf([1.0])
    y = x * 2.0
    y.sum().backward()
    calls.clear()
    with pytest.raises(RuntimeError):
        y.sum().backward()                      # the graph was freed
    assert calls == []


def test_a_backward_inside_a_pylayer_backward_does_not_run_them(calls):
    inner_x = leaf([3.0])

    class Checkpointed(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, dy):
            with fastop.enable_grad():               # as gradient checkpointing does:
                (inner_x * inner_x).sum().backward()  # a pass of its own, nested
            return dy * 2.0

    x = leaf([1.0])
    Checkpointed.apply(x).sum().backward()
    assert calls == ["end"]
    assert x.grad.numpy().tolist() == [2.0] and inner_x.grad.numpy().tolist() == [6.0]


def test_hooks_run_in_registration_order_and_remove_is_idempotent():
    order = []
    first = register_backward_end_hook(lambda: order.append(1))
    second = register_backward_end_hook(lambda: order.append(2))
    x = leaf([1.0])
    (x * x).sum().backward()
    first.remove()
    first.remove()
    (x * x).sum().backward()
    second.remove()
    (x * x).sum().backward()
    assert order == [1, 2, 2]
    assert isinstance(first, HookRemoveHelper)


def test_a_hook_may_remove_itself_while_hooks_run():
    order = []
    handles = []

    def once():
        order.append("once")
        handles[0].remove()
    handles.append(register_backward_end_hook(once))
    other = register_backward_end_hook(lambda: order.append("other"))
    try:
        x = leaf([1.0])
        (x * x).sum().backward()
        (x * x).sum().backward()
    finally:
        other.remove()
    assert order == ["once", "other", "other"]


def test_an_exception_in_a_hook_reaches_the_caller_after_the_gradients_are_stored():
    def broken():
        raise ValueError("hook failed")
    handle = register_backward_end_hook(broken)
    x = leaf([1.0, 2.0])
    try:
        with pytest.raises(ValueError, match="hook failed"):
            (x * x).sum().backward()
    finally:
        handle.remove()
    assert x.grad.numpy().tolist() == [2.0, 4.0]
    (x * x).sum().backward()                   # the engine is usable afterwards
    assert x.grad.numpy().tolist() == [4.0, 8.0]


def test_a_hook_must_be_callable():
    with pytest.raises(TypeError, match="register_backward_end_hook: hook must be "
                                        "callable.*got int"):
        register_backward_end_hook(3)
