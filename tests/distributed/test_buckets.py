"""Bucket planning (fixed order, one dtype, caps) as a property over random parameter
lists; one bucket's buffer (gradients as views of it, zero-fill and flags for missing
gradients, handing the views out); the half-precision conversions of comm_dtype; the
static kernel's flattening in a world of one."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastop
from fastop.distributed._buckets import (MB, GradientBuckets, _Bucket, average_flat,
                                        from_half_bits, plan_buckets, to_half_bits)

sizes = st.lists(st.tuples(st.integers(1, 3 * MB), st.sampled_from(["float32", "float64"])),
                 max_size=30)


@given(sizes, st.floats(0.5, 4), st.floats(0.1, 2))
def test_buckets_cover_every_tensor_once_in_backward_order_within_their_caps(
        tensors, cap_mb, first_cap_mb):
    nbytes = [n for n, _ in tensors]
    dtypes = [d for _, d in tensors]
    plan = plan_buckets(nbytes, dtypes, cap_mb, first_cap_mb)
    assert sorted(i for bucket in plan for i in bucket) == list(range(len(tensors)))
    for k, bucket in enumerate(plan):
        assert bucket and len({dtypes[i] for i in bucket}) == 1
        assert bucket == sorted(bucket, reverse=True)          # last parameter first
        cap = (first_cap_mb if k == 0 else cap_mb) * MB
        assert len(bucket) == 1 or sum(nbytes[i] for i in bucket) <= cap
    # the same sizes always give the same plan (every rank plans alone)
    assert plan == plan_buckets(list(nbytes), list(dtypes), cap_mb, first_cap_mb)


def test_a_tensor_larger_than_the_cap_travels_alone():
    assert plan_buckets([10, 3 * MB, 10], ["float32"] * 3, 1, 1) == [[2], [1], [0]]
    assert plan_buckets([10, 10, 10], ["float32"] * 3, 1, 1) == [[2, 1, 0]]
    assert plan_buckets([10, 10, 10], ["float32", "float64", "float32"], 1, 1) == \
        [[2, 0], [1]]


def _param(values):
    p = fastop.to_tensor(np.asarray(values, dtype="float32"), stop_gradient=False)
    return p


def test_a_bucket_sends_its_gradients_zeros_and_flags_and_hands_out_views():
    a, b, c = _param([[1.0, 2.0], [3.0, 4.0]]), _param([5.0]), _param([6.0, 7.0])
    a.grad = fastop.to_tensor(np.array([[2.0, 4.0], [6.0, 8.0]], "float32"))
    c.grad = fastop.to_tensor(np.array([1.0, -1.0], "float32"))
    bucket = _Bucket([a, b, c])
    bucket.mark()
    # the gradients (copied in: they were set by the user), zeros for b, then the flags
    assert bucket.flat.tolist() == [2.0, 4.0, 6.0, 8.0, 0.0, 1.0, -1.0, 1.0, 0.0, 1.0]
    bucket.flags[1] = 1.0                       # as if another rank had b's gradient
    bucket.hand_out()
    assert a.grad is bucket.grads[0] and b.grad is bucket.grads[1]
    for p in (a, b, c):
        assert np.shares_memory(p.grad.numpy(), bucket.flat)
    assert b.grad.numpy().tolist() == [0.0]


def test_a_parameter_no_rank_has_a_gradient_for_keeps_none():
    a, b = _param([1.0]), _param([2.0])
    a.grad = fastop.to_tensor(np.array([3.0], "float32"))
    bucket = _Bucket([a, b])
    bucket.mark()
    bucket.hand_out()
    assert b.grad is None and a.grad is bucket.grads[0]


def test_backward_writes_straight_into_the_buckets_and_close_unhooks():
    net = fastop.nn.Linear(3, 2)
    buckets = GradientBuckets(net.parameters(), 25, 1, "test")
    try:
        (net(fastop.ones([4, 3]))).sum().backward()
        flat = buckets.buckets[0].flat
        for p in net.parameters():
            assert np.shares_memory(p.grad.numpy(), flat)
        assert net.bias.grad.numpy().tolist() == [4.0, 4.0]
        net.bias.clear_grad()
        (net(fastop.ones([1, 3]))).sum().backward()
        assert net.bias.grad.numpy().tolist() == [1.0, 1.0]      # overwritten, not added
        assert np.shares_memory(net.bias.grad.numpy(), flat)
    finally:
        buckets.close()
    net.bias.clear_grad()
    (net(fastop.ones([1, 3]))).sum().backward()
    assert not np.shares_memory(net.bias.grad.numpy(), flat)


def test_bfloat16_bits_round_to_nearest_even_and_come_back_exactly():
    values = np.array([1.0, -2.5, 3.140625, 1.00390625, 1.01171875, 65504.0, 1e-30, 0.0,
                       np.inf], np.float32)
    bits = to_half_bits(values, "bfloat16")
    back = from_half_bits(bits, "bfloat16")
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1); 1 + 3 * 2^-8: up
    assert back.tolist()[:5] == [1.0, -2.5, 3.140625, 1.0, 1.015625]
    assert back[7] == 0.0 and back[8] == np.inf
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10000).astype(np.float32)
    got = from_half_bits(to_half_bits(x, "bfloat16"), "bfloat16")
    assert np.all(np.abs(got - x) <= np.abs(x) * 2.0 ** -8)    # half an ulp of 7 bits
    assert np.array_equal(from_half_bits(to_half_bits(got, "bfloat16"), "bfloat16"), got)


def test_float16_bits_are_numpys_float16():
    x = np.array([1.0, 0.1, -3.5, 60000.0], np.float32)
    bits = to_half_bits(x, "float16")
    assert bits.dtype == np.uint16
    assert np.array_equal(from_half_bits(bits, "float16"),
                          x.astype(np.float16).astype(np.float32))


def test_the_static_kernel_concatenates_alone():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.array([7.0, 8.0], np.float32)
    assert average_flat([x, y]).tolist() == [0, 1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("bad,message", [([], "at least one tensor"),
                                         ([fastop.ones([2]), fastop.ones([2], "float64")],
                                          r"one dtype, got \['float32', 'float64'\]")])
def test_the_op_refuses_empty_or_mixed_buckets(bad, message):
    with pytest.raises((ValueError, TypeError), match=f"dist::allreduce_mean: .*{message}"):
        fastop.ops.dist.allreduce_mean(bad)
