"""The registered softmax ops (fastop::softmax, log_softmax, their _grad ops,
softmax_cross_entropy and its _grad op): definitions, meta with unknown dims, and
gradient rules (first and second order) run directly on DenseTensors against central
finite differences in float64."""
from functools import partial

import numpy as np
import pytest

from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import softmax as ref


check_rule = partial(check_grad_rule, wrt=(0,))


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def test_ops_are_defined_with_their_signatures():
    sig = lambda n: registry.get(f"fastop::{n}").signature()  # noqa: E731
    assert sig("softmax") == "fastop::softmax(x, axis=-1) -> (out)"
    assert sig("log_softmax_grad") == "fastop::log_softmax_grad(y, dy, axis=-1) -> (dx)"
    assert sig("softmax_cross_entropy") == \
        "fastop::softmax_cross_entropy(logits, label, ignore_index=-100) -> (loss, softmax)"
    assert sig("softmax_cross_entropy_grad") == ("fastop::softmax_cross_entropy_grad(label, "
                                                 "softmax, dloss, ignore_index=-100) -> (dlogits)")
    assert registry.get("fastop::softmax_cross_entropy").differentiable_inputs == ("logits",)


def test_meta_propagates_unknown_dims():
    ce = registry.get("fastop::softmax_cross_entropy")
    assert ce.infer_meta([TensorMeta([None, 10], "float32"), TensorMeta([None, 1], "int64")],
                         {"ignore_index": -100}) == \
        [TensorMeta([None, 1], "float32"), TensorMeta([None, 10], "float32")]
    sm = registry.get("fastop::softmax")
    assert sm.infer_meta([TensorMeta([None, 3, None], "float64")], {"axis": 1}) == \
        [TensorMeta([None, 3, None], "float64")]


def test_calling_the_ops_computes():
    x = rand(4, 5)
    label = np.array([0, 4, 1, 1])
    loss, sm = registry.get("fastop::softmax_cross_entropy")(x, label)
    want_loss, want_sm = ref.softmax_cross_entropy(x, label)
    np.testing.assert_allclose(np.asarray(loss), want_loss, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(sm), want_sm, rtol=1e-12)
    with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy: each label must "
                                         r"be a class in \[0, C\)"):
        registry.get("fastop::softmax_cross_entropy")(x, np.array([0, 5, 1, 1]))


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 4), -1), ((3, 4), 0),
                                        ((2, 3, 2), 1)], ids=str)
def test_softmax_and_log_softmax_grads(shape, axis):
    check_rule("fastop::softmax", [rand(*shape)], {"axis": axis})
    check_rule("fastop::log_softmax", [rand(*shape)], {"axis": axis})


@pytest.mark.parametrize("label_shape", [(4,), (4, 1)], ids=str)
def test_cross_entropy_grad(label_shape):
    label = np.array([0, 4, 2, 2]).reshape(label_shape)
    grads = check_rule("fastop::softmax_cross_entropy", [rand(4, 5), label], {},
                       douts=[rand(4, 1, seed=2), None])
    assert grads[1] is None


def test_cross_entropy_gradient_through_the_softmax_output():
    # unlike PaddlePaddle (which drops it), a gradient into the softmax output reaches
    # the logits; checked alone, and with the loss's
    label = np.array([1, 0, 3])
    check_rule("fastop::softmax_cross_entropy", [rand(3, 4), label], {}, wrt=(0,),
               douts=[None, rand(3, 4, seed=4)])
    check_rule("fastop::softmax_cross_entropy", [rand(3, 4), label], {}, wrt=(0,),
               douts=[rand(3, 1, seed=2), rand(3, 4, seed=4)])


def test_cross_entropy_rule_gets_none_for_an_unused_output():
    # the loss-only case (every training step) computes the one fused backward kernel
    ce = registry.get("fastop::softmax_cross_entropy")
    assert not ce.grad_rule.materialize_grads
    x, label = from_numpy(rand(3, 4)), from_numpy(np.array([1, 0, 3]))
    loss, sm = ce(x, label)
    dloss = from_numpy(rand(3, 1, seed=2))
    dlogits, dlabel = ce.grad_rule.fn(label, sm, dloss, None, ignore_index=-100)
    want = registry.get("fastop::softmax_cross_entropy_grad")(label, sm, dloss)
    np.testing.assert_array_equal(np.asarray(dlogits), np.asarray(want))
    assert dlabel is None
    assert ce.grad_rule.fn(label, sm, None, None, ignore_index=-100) == (None, None)


@pytest.mark.parametrize("label", [[1, 0, 3], [[2], [-100], [0]]], ids=["flat", "ignored"])
def test_cross_entropy_grad_is_differentiable_again(label):
    label = np.array(label)
    softmax = np.asarray(registry.get("fastop::softmax")(rand(3, 4)))
    check_rule("fastop::softmax_cross_entropy_grad",
               [label, softmax.copy(), rand(3, 1, seed=5)], {}, wrt=(1, 2))


@pytest.mark.parametrize("name", ["softmax_grad", "log_softmax_grad"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_backward_ops_are_differentiable_again(name, axis):
    forward = "softmax" if name == "softmax_grad" else "log_softmax"
    y = np.asarray(registry.get(f"fastop::{forward}")(rand(3, 4), axis=axis))
    check_rule(f"fastop::{name}", [y.copy(), rand(3, 4, seed=3)], {"axis": axis}, wrt=(0, 1))
