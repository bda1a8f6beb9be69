"""Bucket planning (fixed order, one dtype, caps) as a property over random parameter
lists; packing and unpacking one bucket (scaling, zero-fill and flags for missing
gradients); the static kernel's flattening in a world of one."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastop
from fastop.distributed._buckets import MB, _Bucket, average_flat, plan_buckets

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


def test_a_bucket_scales_the_gradients_and_hands_them_back_as_views():
    a, b, c = _param([[1.0, 2.0], [3.0, 4.0]]), _param([5.0]), _param([6.0, 7.0])
    a.grad = fastop.to_tensor(np.array([[2.0, 4.0], [6.0, 8.0]], "float32"))
    c.grad = fastop.to_tensor(np.array([1.0, -1.0], "float32"))
    bucket = _Bucket([a, b, c])
    bucket.pack(0.5)
    flat = np.asarray(bucket.buffer)
    # gradients times 0.5, zeros for b (no gradient), then the flags
    assert flat.tolist() == [1.0, 2.0, 3.0, 4.0, 0.0, 0.5, -0.5, 0.5, 0.0, 0.5]
    bucket.unpack()
    assert a.grad.numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert b.grad is None                       # no rank had one: stays None
    assert c.grad.numpy().tolist() == [0.5, -0.5]
    assert np.shares_memory(a.grad.numpy(), c.grad.numpy()) is False
    assert bucket.buffer is None                # the buffer lives on in the views only


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
