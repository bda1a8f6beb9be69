"""fastop::dropout and fastop::dropout_grad as registry ops: the rules against finite
differences (a fixed seed fixes the mask), eager against static, a fresh mask on every
Executor.run, fastop.seed reproducibility in both modes."""
import numpy as np

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import random as ref

dropout = registry.get("fastop::dropout")


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def test_signature_and_meta():
    assert dropout.signature() == ("fastop::dropout(x, p=0.5, mode='upscale_in_train', "
                                   "seed=0) -> (out, mask)")
    assert dropout.infer_meta([TensorMeta([None, 4], "float32")], dropout.check_attrs({})) \
        == [TensorMeta([None, 4], "float32"), TensorMeta([None, 4], "bool")]
    assert dropout.differentiable_inputs == ("x",)


def test_rules_match_finite_differences():
    for mode in ("upscale_in_train", "downscale_in_infer"):
        check_grad_rule("fastop::dropout", [rand(4, 5)], {"p": 0.3, "mode": mode, "seed": 9})
        mask = rand(4, 5, seed=2) > 0
        check_grad_rule("fastop::dropout_grad", [mask, rand(4, 5)], {"p": 0.3, "mode": mode},
                        wrt=[1])


def test_fixed_seed_eager_equals_static_and_numpy(run_static):
    x = rand(6, 7).astype("float32")
    out, mask = dropout(fastop.to_tensor(x), p=0.2, seed=4)
    want_out, want_mask = ref.dropout(x, 0.2, seed=4)
    np.testing.assert_array_equal(mask.numpy(), want_mask)
    np.testing.assert_array_equal(out.numpy(), want_out)
    s_out, s_mask = run_static(lambda v: dropout(v, p=0.2, seed=4), x)
    np.testing.assert_array_equal(s_mask, want_mask)
    np.testing.assert_array_equal(s_out, want_out)


def test_every_executor_run_draws_a_fresh_mask_and_seed_replays_them(run_static):
    x = np.ones((32, 32), "float32")
    fastop.seed(5)
    first = [m for _, m in run_static(lambda v: dropout(v, p=0.5), x, runs=3)]
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    fastop.seed(5)
    again = [m for _, m in run_static(lambda v: dropout(v, p=0.5), x, runs=3)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    # eager draws from the same stream
    fastop.seed(5)
    assert np.array_equal(dropout(fastop.to_tensor(x), p=0.5)[1].numpy(), first[0])


def test_eager_backward_uses_the_forward_mask():
    x = fastop.to_tensor(rand(5, 6), stop_gradient=False)
    out, mask = dropout(x, p=0.5)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(mask.numpy(), 2.0, 0.0))
    assert mask.stop_gradient
