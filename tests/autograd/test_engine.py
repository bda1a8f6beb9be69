"""The autograd engine: recording, backward order and accumulation, retain_graph,
fastop.grad (higher order, allow_unused), grad mode, error paths, no reference cycles."""
import gc
import threading
import weakref

import numpy as np
import pytest

import fastop
from fastop.autograd import GradcheckError, gradcheck, gradgradcheck
from fastop._core import storage
from fastop.ops import registry


def leaf(values, dtype="float64"):
    return fastop.to_tensor(np.asarray(values, dtype=dtype), stop_gradient=False)


X = np.array([[0.3, -1.2, 0.7], [1.5, 0.1, -0.4]])


# --------------------------------------------------------------------------- recording

def test_records_only_when_an_input_needs_grad(ops):
    a, b = fastop.to_tensor(X), fastop.to_tensor(X)
    assert ops.mul(a, b).stop_gradient and ops.mul(a, b).is_leaf
    b.stop_gradient = False
    out = ops.mul(a, b)
    assert not out.stop_gradient and not out.is_leaf


def test_no_grad_context_and_decorator(ops):
    x = leaf(X)
    with fastop.no_grad():
        assert not fastop.is_grad_enabled()
        assert ops.sin(x).stop_gradient
        with fastop.enable_grad():
            assert not ops.sin(x).stop_gradient
    assert fastop.is_grad_enabled()

    @fastop.no_grad()
    def f(t):
        return ops.sin(t)

    @fastop.no_grad
    def g(t):
        return ops.sin(t)
    assert f(x).stop_gradient and g(x).stop_gradient and fastop.is_grad_enabled()
    assert f.__name__ == "f" and g.__name__ == "g"


def test_grad_mode_is_per_thread(ops):
    x = leaf(X)
    seen = {}
    inside, release = threading.Event(), threading.Event()

    def worker():
        seen["start"] = fastop.is_grad_enabled()        # a new thread records
        seen["recorded"] = not ops.sin(x).stop_gradient
        with fastop.no_grad():                          # and its no_grad is its own
            inside.set()
            release.wait(5)
        seen["end"] = fastop.is_grad_enabled()

    with fastop.no_grad():
        thread = threading.Thread(target=worker)
        thread.start()
        inside.wait(5)
        assert ops.sin(x).stop_gradient and not fastop.is_grad_enabled()
    assert fastop.is_grad_enabled()                     # while the worker is in no_grad
    assert not ops.sin(x).stop_gradient
    release.set()
    thread.join(5)
    assert seen == {"start": True, "recorded": True, "end": True}


def test_one_no_grad_instance_shared_by_threads():
    """Each thread entering the same no_grad object restores its own previous mode (the
    main thread enters first and exits first)."""
    shared = fastop.no_grad()
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        fastop.set_grad_enabled(True).__enter__()       # this thread's mode: on
        with shared:
            entered.set()
            release.wait(5)
        seen["after"] = fastop.is_grad_enabled()

    thread = threading.Thread(target=worker)
    with fastop.set_grad_enabled(False):                # this thread's mode: off
        with shared:
            thread.start()
            entered.wait(5)
        assert not fastop.is_grad_enabled()
        release.set()
        thread.join(5)
    assert seen == {"after": True} and fastop.is_grad_enabled()


def test_a_no_grad_block_may_exit_on_another_thread():
    """A with-block in a generator resumed on a worker thread (as thread-pool streaming
    does) exits there without failing, and leaves that thread's own mode (here its own
    no_grad) alone: the block set its mode on the thread that entered it."""
    def stream():
        with fastop.no_grad():
            yield fastop.is_grad_enabled()
            yield fastop.is_grad_enabled()

    it = stream()
    assert next(it) is False                    # entered on this thread
    seen = {}

    def worker():
        fastop.set_grad_enabled(False).__enter__()
        seen["items"] = list(it)                # the block exits on this thread
        seen["after"] = fastop.is_grad_enabled()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(5)
    assert seen == {"items": [False], "after": False}
    fastop.set_grad_enabled(True).__enter__()   # this thread's mode, left off by the block


def test_an_exit_on_a_thread_that_did_not_enter_is_refused_when_ambiguous():
    """With two threads inside one shared grad-mode object, an exit on a third thread
    cannot know whose mode to restore: it raises, and the others keep their own."""
    shared = fastop.set_grad_enabled(False)

    def stream():
        with shared:
            yield 1
            yield 2

    it = stream()
    next(it)                                    # entered on this thread
    inside, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        with shared:                            # a second thread inside the object
            inside.set()
            done.wait(5)
        seen["other after"] = fastop.is_grad_enabled()

    def resumer():
        inside.wait(5)
        try:
            list(it)                            # the generator's block exits here
        except RuntimeError as exc:
            seen["error"] = str(exc)
        done.set()

    threads = [threading.Thread(target=other), threading.Thread(target=resumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert "did not enter it while 2 threads are inside it" in seen["error"]
    assert seen["other after"] is True
    fastop.set_grad_enabled(True).__enter__()   # this thread's mode, left off by the block


def test_no_grad_on_a_generator_holds_while_its_code_runs(ops):
    x = leaf(X)

    @fastop.no_grad()
    def batches(n):
        for _ in range(n):
            got = yield ops.sin(x)
            assert got is None or got == "ping"
        return "done"

    gen = batches(2)
    first = next(gen)
    assert first.stop_gradient and fastop.is_grad_enabled()
    assert not ops.sin(x).stop_gradient                 # the caller still records
    assert gen.send("ping").stop_gradient
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done" and fastop.is_grad_enabled()
    assert [t.stop_gradient for t in batches(3)] == [True] * 3


def test_integer_tensors_take_gradients_in_their_dtype_as_in_paddle():
    """PaddlePaddle lets an integer tensor have stop_gradient=False: integer results of
    it take gradients too, in their dtype; a cast to float passes the float gradient
    back cast (truncated) to the integer dtype; an integer result of float inputs
    (argmax, top-k's indices) takes none."""
    t = fastop.to_tensor([1, 2, 3], stop_gradient=False)
    y = t * 2
    assert not y.stop_gradient and y.dtype == fastop.int64
    y.retain_grads()
    (y * y).sum().backward()
    assert t.grad.dtype == fastop.int64
    np.testing.assert_array_equal(t.grad.numpy(), [8, 16, 24])        # 2 * 2y
    np.testing.assert_array_equal(y.grad.numpy(), [4, 8, 12])
    u = fastop.to_tensor([1, 2], stop_gradient=False)
    w = fastop.to_tensor([0.5, 1.5], stop_gradient=False)
    (u.astype("float32") * w).sum().backward()
    np.testing.assert_array_equal(u.grad.numpy(), [0, 1])             # int64([0.5, 1.5])
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0])
    f = fastop.to_tensor([0.5, 2.0], stop_gradient=False)
    assert f.argmax().stop_gradient and fastop.topk(f, 1)[1].stop_gradient
    assert not fastop.to_tensor(np.ones(2, np.float16), stop_gradient=False).stop_gradient
    b = fastop.to_tensor([True, False])
    b.stop_gradient = False
    assert not b.stop_gradient
    b.stop_gradient = True
    assert b.stop_gradient


def test_a_cast_to_an_integer_dtype_takes_gradients_as_in_paddle():
    """cast is defined with integer_grads: its int32 result of a float input that takes
    gradients records (PaddlePaddle's test_zero_dim_sundry_dygraph_api test_cast), and
    the gradient comes back cast to float; argmax's int64 result still takes none."""
    x = fastop.full([], 1.0, "float32")
    x.stop_gradient = False
    out = fastop.cast(x, "int32")
    assert not out.stop_gradient
    out.retain_grads()
    out.backward()
    assert out.shape == [] and out.grad.shape == [] and out.grad.dtype == fastop.int32
    assert x.grad.shape == [] and x.grad.dtype == fastop.float32 and float(x.grad) == 1.0
    y = fastop.to_tensor([1.5, -2.7], stop_gradient=False)
    ((y.astype("int64") * 3).astype("float32") * fastop.to_tensor([1.0, 2.0])).sum() \
        .backward()
    np.testing.assert_array_equal(y.grad.numpy(), [3.0, 6.0])
    assert y.argmax().stop_gradient
    assert registry.get("fastop::cast").integer_grads
    assert not registry.get("fastop::argmax").integer_grads


def test_a_leaf_set_to_stop_gradient_after_recording_gets_no_grad(ops):
    x, y = leaf(X), leaf(X)
    out = ops.mul(x, y)
    y.stop_gradient = True
    out.backward()
    assert y.grad is None
    np.testing.assert_allclose(x.grad.numpy(), X)


def test_grad_mode_restored_after_exception(ops):
    with pytest.raises(KeyError):
        with fastop.no_grad():
            raise KeyError
    assert fastop.is_grad_enabled()


def test_repeated_keyword_attributes_are_rebound_when_they_change(ops):
    # The dispatcher reuses the last call's bound attributes when they compare equal;
    # a changed value, type or mutated list must be bound again.
    x = leaf(X)
    for alpha, want in [(2.0, 2 * X), (2.0, 2 * X), (3.0, 3 * X), (2, 2 * X)]:
        np.testing.assert_allclose(ops.scale(x, alpha=alpha).numpy(), want)
    if "fastop::sum" in fastop.ops.registry:
        axes = [0]
        np.testing.assert_allclose(fastop.sum(x, axis=axes).numpy(), X.sum(0))
        axes[0] = 1
        np.testing.assert_allclose(fastop.sum(x, axis=axes).numpy(), X.sum(1))


def test_python_kernel_results_wrap_without_copy(ops):
    x = leaf(X)
    y = ops.scale(x, alpha=2.0)
    assert type(y) is fastop.Tensor and y.dtype == fastop.float64
    np.testing.assert_array_equal(y.numpy(), 2 * X)


# --------------------------------------------------------------------------- backward

def test_chain_rule_through_python_ops_matches_numpy(ops):
    x, c = leaf(X), fastop.to_tensor(np.cos(X))
    ops.sin(ops.mul(x, c)).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X * np.cos(X)) * np.cos(X))
    assert x.grad.stop_gradient


def test_backward_default_grad_is_ones_and_weights_apply(ops):
    x = leaf(X)
    w = np.arange(6.0).reshape(2, 3)
    ops.scale(x, alpha=3.0).backward(fastop.to_tensor(w))
    np.testing.assert_allclose(x.grad.numpy(), 3 * w)


def test_diamond_graph_runs_each_node_once_after_all_consumers(ops):
    # y feeds two branches that meet again: y's rule must run once with the sum.
    x = leaf(X)
    y = ops.sin(x)
    out = ops.plus(ops.mul(y, y), ops.scale(y, alpha=5.0))
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), (2 * np.sin(X) + 5) * np.cos(X))


def test_leaf_grads_accumulate_across_uses_and_backward_calls(ops):
    x = leaf(X)
    ops.mul(x, x).backward()
    ops.scale(x, alpha=1.0).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * X + 1)
    x.clear_grad()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(X))
    x.clear_grad(set_to_zero=False)
    assert x.grad is None


@pytest.mark.parametrize("read_zeros_first", [False, True])
def test_backward_after_clear_grad_gives_the_gradient(ops, read_zeros_first):
    # clear_grad makes its zeros when .grad is read; a backward pass that comes first
    # gives the gradient as is — the same values either way
    x = leaf(X)
    ops.mul(x, x).backward()
    x.clear_grad()
    if read_zeros_first:
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(X))
    ops.scale(x, alpha=3.0).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 3.0))
    ops.scale(x, alpha=1.0).backward()          # and accumulates from there
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(X, 4.0))
    x.clear_grad(set_to_zero=False)
    x.clear_grad()                              # no gradient: stays None
    assert x.grad is None


def test_leaves_never_share_a_gradient_tensor(ops):
    # plus's rule returns the same dout for both inputs: each leaf must own its .grad.
    a, b = leaf(X), leaf(X)
    ops.plus(a, b).backward()
    assert a.grad is not b.grad
    a.grad.numpy()[...] = 7.0
    np.testing.assert_array_equal(b.grad.numpy(), np.ones_like(X))


def test_leaf_takes_a_fresh_gradient_without_copying():
    from fastop.ops import registry
    op = registry.get("fastop::multiply")
    rule, made = op.grad_rule.fn, []

    def spy(*args, **attrs):
        grads = rule(*args, **attrs)
        made.extend(weakref.ref(g) for g in grads if g is not None)
        return grads
    op.grad_rule.fn = spy
    try:
        x = leaf(X)
        (x * fastop.to_tensor(np.cos(X))).backward()
    finally:
        op.grad_rule.fn = rule
    assert x.grad is made[0]()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X))


def test_user_grad_tensor_is_not_aliased_into_leaf_grad():
    x = leaf(X)
    g = fastop.to_tensor(np.ones_like(X))
    x.backward(g)
    g.numpy()[...] = 5.0
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


def test_multi_output_op_zero_fills_missing_output_grads(ops):
    x = leaf(X)
    a, b = ops.two_three(x)
    b.backward()                    # `a` gets no gradient: the rule sees zeros for it
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(X, 3.0))


def test_rule_without_materialized_grads_gets_none_for_a_missing_output_grad(ops):
    op = registry.get("eagertest::two_three_sparse")
    op.seen.clear()
    x = leaf(X)
    a, b = ops.two_three_sparse(x)
    b.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(X, 3.0))
    x.clear_grad()
    a, b = ops.two_three_sparse(x)
    (a + b).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(X, 5.0))
    assert op.seen == [(True, False), (False, False)]


def test_variadic_input_gradients(ops):
    xs = [leaf(X), leaf(2 * X), leaf(3 * X)]
    ops.total(xs).backward()
    for x in xs:
        np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))


def test_second_backward_without_retain_graph_raises(ops):
    x = leaf(X)
    y = ops.sin(x)
    y.backward(retain_graph=True)
    x.clear_grad(set_to_zero=False)
    y.backward()
    with pytest.raises(RuntimeError, match=r"op 'eagertest::sin' a second time.*retain_graph=True"):
        y.backward()


def test_backward_of_a_stop_gradient_tensor_warns_and_does_nothing():
    # PaddlePaddle skips such a tensor silently; fastop says why no .grad appears
    y = fastop.to_tensor(X)
    with pytest.warns(UserWarning, match=r"backward: nothing to do: output 0 \(shape "
                                         r"\[2, 3\]\) has stop_gradient=True") as record:
        y.backward()
    assert y.grad is None
    assert record[0].filename == __file__          # the caller's line


def test_grad_of_a_stop_gradient_output_raises():
    x = leaf(X)
    with pytest.raises(RuntimeError, match=r"fastop.grad: output 0 .* stop_gradient=True"):
        fastop.grad(fastop.to_tensor(X), [x])


def test_backward_grad_tensor_shape_is_checked(ops):
    y = ops.sin(leaf(X))
    with pytest.raises(ValueError, match=r"has shape \[3\], expected \[2, 3\]"):
        y.backward(fastop.to_tensor(np.ones(3)))


# --------------------------------------------------------------------------- errors of rules

def test_gradient_of_the_wrong_shape_names_the_op(ops):
    with pytest.raises(ValueError, match=r"op 'eagertest::wrong_shape'.*input 'x' has shape "
                                         r"\[2, 3, 1\], expected \[2, 3\].*never broadcast"):
        ops.wrong_shape(leaf(X)).backward()


def test_wrong_number_of_gradients_names_the_op(ops):
    with pytest.raises(TypeError, match=r"eagertest::wrong_count: the gradient rule returned 2 "
                                        r"gradient\(s\), expected 1"):
        ops.wrong_count(leaf(X)).backward()


def test_exception_in_a_rule_keeps_type_and_gets_a_note(ops):
    with pytest.raises(ZeroDivisionError) as info:
        ops.raising(leaf(X)).backward()
    assert any("eagertest::raising" in n for n in info.value.__notes__)
    assert any(frame.name == "_" for frame in info.traceback)   # the rule's own frame


# --------------------------------------------------------------------------- fastop.grad

def test_grad_returns_gradients_without_touching_leaves(ops):
    x, y = leaf(X), leaf(2 * X)
    gx, gy = fastop.grad(ops.mul(x, y), [x, y])
    np.testing.assert_allclose(gx.numpy(), 2 * X)
    np.testing.assert_allclose(gy.numpy(), X)
    assert x.grad is None and y.grad is None


def test_grad_wrt_an_intermediate_tensor(ops):
    x = leaf(X)
    h = ops.sin(x)
    (gh,) = fastop.grad(ops.mul(h, fastop.to_tensor(X)), [h])
    np.testing.assert_allclose(gh.numpy(), X)


def test_grad_walks_only_the_graph_between_outputs_and_inputs(ops):
    """fastop.grad(y, [h]) neither runs nor frees what lies beyond h: a later backward
    through it still works (and is right)."""
    x = leaf(X)
    h = ops.sin(x)
    (gh,) = fastop.grad(ops.mul(h, h), [h])
    np.testing.assert_allclose(gh.numpy(), 2 * np.sin(X))
    assert x.grad is None
    ops.mul(h, fastop.to_tensor(X)).backward()          # through sin, never freed
    np.testing.assert_allclose(x.grad.numpy(), X * np.cos(X))


def test_grad_through_one_input_to_another(ops):
    x = leaf(X)
    h = ops.sin(x)
    gh, gx = fastop.grad(ops.mul(h, h), [h, x])
    np.testing.assert_allclose(gh.numpy(), 2 * np.sin(X))
    np.testing.assert_allclose(gx.numpy(), 2 * np.sin(X) * np.cos(X))


def test_backward_nested_in_a_pylayer_backward_leaves_the_outer_pass_intact():
    """A backward pass run inside a PyLayer's backward over nodes the outer pass is
    walking too does not disturb the outer pass's bookkeeping."""
    from fastop.autograd import PyLayer
    w = leaf([2.0, 3.0])
    shared = w * 2.0

    class Inner(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, dy):
            with fastop.enable_grad():
                (g,) = fastop.grad((shared * shared).sum(), [w], retain_graph=True)
            return dy * g

    (Inner.apply(shared) + shared).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * 8 * np.array([2.0, 3.0]) + 2)


def test_leaf_grad_is_never_a_tensor_someone_else_holds():
    from fastop.autograd import PyLayer
    held = fastop.to_tensor(np.full(3, 4.0))

    class ReturnsHeld(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, dy):
            return held

    x = leaf(np.ones(3))
    ReturnsHeld.apply(x).sum().backward()
    assert x.grad is not held
    held.numpy()[...] = 0.0
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 4.0))


def test_a_saved_tensor_modified_in_place_makes_backward_raise():
    """Gradients from values changed after the forward pass would be silently wrong:
    in-place writes (set_value, item assignment, optimizer steps) bump the memory's
    version, and backward through an op that saved it raises, naming the op."""
    x, c = leaf(X), fastop.to_tensor(np.cos(X))
    y = x * c                                   # multiply saves x and c
    c.set_value(np.zeros_like(X))
    with pytest.raises(RuntimeError, match=r"op 'fastop::multiply'.*modified in place"):
        y.sum().backward()
    t = fastop.tanh(x)                          # tanh saves its output: the user's view
    with fastop.no_grad():
        t[0, 0] = 5.0
    with pytest.raises(RuntimeError, match=r"op 'fastop::tanh'.*modified in place"):
        t.sum().backward()
    w = fastop.to_tensor(np.ones_like(X), stop_gradient=False)
    z = w * w
    w.grad = fastop.to_tensor(np.ones_like(X))
    fastop.optimizer.SGD(0.1, parameters=[w]).step()
    with pytest.raises(RuntimeError, match="modified in place"):
        z.sum().backward()
    s = x + c                                   # add saves nothing: no version to check
    c.set_value(np.ones_like(X))
    s.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(X))
    (x * c).sum().backward()                    # a new forward pass reads the new values
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.ones_like(X))


def test_a_value_no_needed_gradient_reads_may_change_before_backward():
    """Only the values read by the gradients of inputs that take one are checked (as in
    PyTorch): dW of x @ W reads x, not W; gather's gradient reads only the table's
    shape; fc's db reads no input."""
    rng = np.random.default_rng(0)
    x = fastop.to_tensor(rng.standard_normal((3, 2)))
    w = fastop.to_tensor(rng.standard_normal((2, 2)), stop_gradient=False)
    y = fastop.matmul(x, w)
    w.set_value(np.zeros((2, 2)))
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ np.ones((3, 2)))
    table = fastop.to_tensor(np.arange(6.0).reshape(3, 2), stop_gradient=False)
    idx = fastop.to_tensor(np.array([2, 0, 2]))
    picked = registry.get("fastop::gather")(table, idx, axis=0)
    table.set_value(np.zeros((3, 2)))
    picked.sum().backward()
    np.testing.assert_array_equal(table.grad.numpy(), [[1, 1], [0, 0], [2, 2]])
    b = fastop.to_tensor(np.ones(2), stop_gradient=False)
    out = registry.get("fastop::fc")(x, fastop.to_tensor(np.eye(2)), b)
    b.set_value(np.zeros(2))
    out.sum().backward()
    np.testing.assert_array_equal(b.grad.numpy(), [3, 3])
    x.stop_gradient = False                     # now dx reads W: W changing is refused
    y = fastop.matmul(x, w)
    w.set_value(np.ones((2, 2)))
    with pytest.raises(RuntimeError, match="op 'fastop::matmul'.*modified in place"):
        y.sum().backward()


def test_a_read_value_past_the_64th_needed_one_is_checked(ops):
    x0 = leaf(np.ones(3))
    rest = [fastop.to_tensor(np.full(3, 2.0)) for _ in range(69)]
    y = ops.wide(x0, *rest)
    rest[-1].set_value(np.full(3, 5.0))         # x69: what dx0 reads
    with pytest.raises(RuntimeError, match="op 'eagertest::wide'.*modified in place"):
        y.sum().backward()
    ops.wide(x0, *rest).sum().backward()         # unchanged since the forward pass
    np.testing.assert_array_equal(x0.grad.numpy(), [5, 5, 5])


VIEW_MAKERS = {
    "reshape": lambda a: a.reshape([3, 2]),
    "transpose": lambda a: registry.get("fastop::transpose")(a, perm=[1, 0]),
    "unsqueeze": lambda a: registry.get("fastop::unsqueeze")(a, axis=[0]),
    "slice": lambda a: registry.get("fastop::slice")(a, axes=[1], starts=[0], ends=[2]),
    "broadcast_to": lambda a: registry.get("fastop::broadcast_to")(a, shape=[4, 2, 3]),
    "getitem": lambda a: a[1:],
    "detach": lambda a: a.detach(),
    "from_numpy": lambda a: fastop.from_numpy(a.numpy()),
    "memoryview": lambda a: fastop.from_numpy(memoryview(a)),
    "frombuffer": lambda a: fastop.from_numpy(np.frombuffer(a).reshape(a.shape)),
    "numpy_from_dlpack": lambda a: fastop.from_numpy(np.from_dlpack(a)),
}


@pytest.mark.parametrize("make_view", VIEW_MAKERS.values(), ids=VIEW_MAKERS.keys())
def test_views_share_the_version_of_the_memory_they_view(make_view):
    """A view made by any op (numpy-backed views included) and its base are one memory:
    a write through either is seen by a node that saved the other."""
    x = leaf(X)
    v = make_view(x)
    y = leaf(np.ones(v.shape)) * v              # saves the view
    with fastop.no_grad():
        x[0, 0] = 100.0                         # write the base
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()
    x = leaf(X)
    y = x * x                                   # saves the base
    v = make_view(x)
    if not v.numpy().flags.writeable:           # a broadcast view cannot be written
        return
    with fastop.no_grad():
        v.set_value(np.zeros(v.shape))          # write the view
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


@pytest.mark.parametrize("alias", [lambda t: t.numpy(), memoryview,
                                   lambda t: storage.from_dlpack(t)],
                         ids=["numpy", "memoryview", "from_dlpack"])
def test_a_raw_kernel_writing_a_tensors_memory_bumps_its_version(alias):
    from fastop._core import elementwise
    x = leaf(X)
    y = x * x
    elementwise.exp(X, out=alias(x))
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


def test_a_pylayer_saved_tensor_modified_in_place_raises_in_saved_tensor():
    from fastop.autograd import PyLayer

    class Square(PyLayer):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return fastop.to_tensor(x.numpy() ** 2)

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensor()
            return fastop.to_tensor(2 * x.numpy() * dy.numpy())

    x = leaf(X)
    y = Square.apply(x)
    with fastop.no_grad():
        x[...] = 0.0
    with pytest.raises(RuntimeError, match="PyLayer 'Square'.*modified in place"):
        y.sum().backward()


def test_grad_unused_input(ops):
    x, unused = leaf(X), leaf(X)
    with pytest.raises(RuntimeError, match="input 1 .* not used.*allow_unused=True"):
        fastop.grad(ops.sin(x), [x, unused])
    gx, gu = fastop.grad(ops.sin(x), [x, unused], allow_unused=True)
    assert gu is None and gx is not None


def test_grad_create_graph_gives_higher_order_derivatives(ops):
    x = leaf(X)
    y = ops.sin(x)
    (g1,) = fastop.grad(y, x, create_graph=True)
    assert not g1.stop_gradient
    (g2,) = fastop.grad(g1, x, create_graph=True)
    (g3,) = fastop.grad(g2, x)
    np.testing.assert_allclose(g1.numpy(), np.cos(X))
    np.testing.assert_allclose(g2.numpy(), -np.sin(X))
    np.testing.assert_allclose(g3.numpy(), -np.cos(X))


def test_second_order_through_a_saved_output(ops):
    # tanh_k saves its output; with create_graph the saved output rejoins the graph.
    # Its rule is a Python backward kernel (not differentiable): the first-order
    # gradient is recorded only as far as the rule goes, which gradgradcheck reports.
    x = leaf(X)
    with pytest.raises(GradcheckError, match="was not recorded"):
        gradgradcheck(ops.tanh_k, [x])
    gradcheck(ops.tanh_k, [x])


def test_gradcheck_and_gradgradcheck_of_composite_rules(ops):
    x, y = leaf(X), leaf(np.cos(X))
    assert gradcheck(ops.mul, [x, y])
    assert gradgradcheck(ops.mul, [x, y])
    assert gradgradcheck(lambda t: ops.cos(ops.sin(t)), [x])


def test_gradcheck_catches_a_wrong_rule(ops):
    from fastop.ops import registry
    op = registry.get("eagertest::scale")
    rule = op.grad_rule.fn
    try:
        op.grad_rule.fn = lambda dout, alpha: ops.scale(dout, alpha=alpha + 0.5)
        with pytest.raises(GradcheckError, match=r"d\(output 0\)/d\(input 0\)"):
            gradcheck(lambda t: ops.scale(t, alpha=2.0), [leaf(X)])
        assert not gradcheck(lambda t: ops.scale(t, alpha=2.0), [leaf(X)],
                             raise_exception=False)
    finally:
        op.grad_rule.fn = rule


# --------------------------------------------------------------------------- memory

def test_graph_is_freed_when_the_output_is_dropped_without_gc(ops):
    x = leaf(X)
    y = ops.tanh_k(ops.sin(x))        # tanh_k saves its output
    node_probe = weakref.ref(ops.sin(y))
    ref = weakref.ref(y)
    gc.collect()
    gc.disable()
    try:
        del y
        assert ref() is None and node_probe() is None
    finally:
        gc.enable()


def test_backward_creates_no_garbage_cycles(ops):
    x = leaf(X)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            ops.tanh_k(ops.sin(ops.scale(x, alpha=2.0))).backward(retain_graph=True)
            x.clear_grad(set_to_zero=False)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_saved_tensors_are_freed_after_backward(ops):
    x = leaf(X)
    inner = ops.sin(x)
    probe = weakref.ref(inner)
    y = ops.mul(inner, fastop.to_tensor(X))     # mul saves both inputs
    del inner
    assert probe() is not None
    y.backward()
    assert probe() is None            # released by backward, though y is alive
