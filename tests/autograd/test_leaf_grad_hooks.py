"""Leaf grad hooks (fastop.autograd.register_leaf_grad_hook): a leaf's gradient written
into a fixed buffer (in place when .grad is the buffer; clear_grad's meanings kept), the
ready callback called once per outermost backward, as soon as the last node feeding the
leaf has run and before the rest of the pass; not in fastop.grad, nor with
create_graph's buffer; removal and replacement; bad arguments."""
import numpy as np
import pytest

import fastop
from fastop.autograd import register_leaf_grad_hook
from fastop.autograd._backward import leaf_grad_hooks


def leaf(values, dtype="float32"):
    return fastop.to_tensor(np.asarray(values, dtype=dtype), stop_gradient=False)


@pytest.fixture(autouse=True)
def no_hooks_left():
    yield
    assert not leaf_grad_hooks, "a test left a leaf grad hook registered"


def test_the_gradient_accumulates_in_the_buffer_and_grad_is_the_buffer():
    w = leaf([1.0, 2.0])
    buf = fastop.zeros([2])
    handle = register_leaf_grad_hook(w, buffer=buf)
    try:
        memory = np.asarray(buf)
        (w * w).sum().backward()                        # 2w
        assert w.grad is buf and buf.numpy().tolist() == [2.0, 4.0]
        (w * 3.0).sum().backward()                      # accumulates in place
        assert w.grad is buf and buf.numpy().tolist() == [5.0, 7.0]
        assert np.shares_memory(w.grad.numpy(), memory)
        w.clear_grad()                                  # zeros: overwritten, not added to
        (w * 3.0).sum().backward()
        assert w.grad is buf and buf.numpy().tolist() == [3.0, 3.0]
        w.clear_grad(set_to_zero=False)
        assert w.grad is None
        (w * 2.0).sum().backward()
        assert w.grad is buf and buf.numpy().tolist() == [2.0, 2.0]
        w.grad = fastop.to_tensor(np.array([10.0, 20.0], np.float32))   # set by the user
        (w * 1.0).sum().backward()                      # .grad + new, into the buffer
        assert w.grad is buf and buf.numpy().tolist() == [11.0, 21.0]
    finally:
        handle.remove()
    (w * 1.0).sum().backward()                          # unhooked: a new tensor again
    assert w.grad is not buf and w.grad.numpy().tolist() == [12.0, 22.0]


def test_ready_runs_once_when_the_last_feeding_node_has_run_before_the_rest():
    """w2 is used twice near the loss; w1 only at the start of the graph: w2's ready
    sees its complete gradient while w1 has none yet."""
    w1, w2 = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    seen = []
    hooks = [register_leaf_grad_hook(w2, lambda t: seen.append(
        ("w2", t.grad.numpy().tolist(), w1.grad))),
        register_leaf_grad_hook(w1, lambda t: seen.append(("w1", t.grad.numpy().tolist())))]
    try:
        h = fastop.tanh(w1 * 1.0)
        ((h * w2) + w2 * w2).sum().backward()   # d/dw2 = h + 2 w2
        want_w2 = (np.tanh([1.0, 2.0]) + 2 * np.array([3.0, 4.0])).astype(np.float32)
        assert [s[0] for s in seen] == ["w2", "w1"]
        assert np.allclose(seen[0][1], want_w2) and seen[0][2] is None
        assert np.allclose(seen[1][1], np.array([3.0, 4.0]) * (1 - np.tanh([1.0, 2.0]) ** 2),
                           rtol=1e-6)
    finally:
        for handle in hooks:
            handle.remove()


def test_ready_is_not_called_for_a_leaf_the_pass_does_not_reach_nor_by_fastop_grad():
    a, b = leaf([1.0]), leaf([2.0])
    seen = []
    hooks = [register_leaf_grad_hook(t, lambda t: seen.append(t)) for t in (a, b)]
    try:
        (a * 2.0).sum().backward()
        assert len(seen) == 1 and seen[0] is a
        seen.clear()
        fastop.grad((a * b).sum(), [a, b])
        assert seen == []
    finally:
        for handle in hooks:
            handle.remove()


def test_a_pass_nested_in_a_pylayer_backward_calls_no_ready():
    inner_leaf = leaf([2.0])
    seen = []

    class Twice(fastop.autograd.PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            with fastop.enable_grad():
                (inner_leaf * 3.0).sum().backward()     # a pass inside the pass
            return g * 2.0
    x = leaf([1.0])
    hooks = [register_leaf_grad_hook(inner_leaf, lambda t: seen.append("inner")),
             register_leaf_grad_hook(x, lambda t: seen.append("x"))]
    try:
        Twice.apply(x).sum().backward()
        assert seen == ["x"]
        assert inner_leaf.grad.numpy().tolist() == [3.0]
    finally:
        for handle in hooks:
            handle.remove()


def test_create_graph_keeps_the_graph_instead_of_the_buffer():
    w = leaf([3.0], "float64")
    buf = fastop.zeros([1], "float64")
    handle = register_leaf_grad_hook(w, buffer=buf)
    try:
        g, = fastop.grad((w * w * w).sum(), [w], create_graph=True)
        assert g.numpy().tolist() == [27.0] and buf.numpy().tolist() == [0.0]
        fastop.autograd.backward([(w * w).sum()])
        assert w.grad is buf and buf.numpy().tolist() == [6.0]
    finally:
        handle.remove()


def test_a_second_registration_replaces_the_first_and_the_old_handle_leaves_it():
    w = leaf([1.0])
    seen = []
    first = register_leaf_grad_hook(w, lambda t: seen.append(1))
    second = register_leaf_grad_hook(w, lambda t: seen.append(2))
    first.remove()                                      # not the registered one any more
    (w * 1.0).sum().backward()
    assert seen == [2]
    second.remove()
    second.remove()                                     # idempotent
    (w * 1.0).sum().backward()
    assert seen == [2]


@pytest.mark.parametrize("args,error,message", [
    (lambda w: (np.ones(2),), TypeError, "'leaf' must be a leaf Tensor"),
    (lambda w: (w * 2.0,), TypeError, "'leaf' must be a leaf Tensor .*non-leaf"),
    (lambda w: (w, 3), TypeError, "'ready' must be callable"),
    (lambda w: (w, None, np.zeros(2)), TypeError, "'buffer' must be a Tensor or None"),
    (lambda w: (w, None, fastop.zeros([3])), ValueError,
     r"'buffer' must be a writable contiguous tensor of the leaf's shape \[2\] and dtype "
     r"float32, got float32\[3\]"),
    (lambda w: (w, None, fastop.zeros([2], "float64")), ValueError, r".* got float64\[2\]"),
])
def test_bad_arguments_are_refused(args, error, message):
    w = leaf([1.0, 2.0])
    values = args(w)
    kwargs = {"buffer": values[2]} if len(values) > 2 else {}
    with pytest.raises(error, match=f"register_leaf_grad_hook: {message}"):
        register_leaf_grad_hook(*values[:2], **kwargs)
