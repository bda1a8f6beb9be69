"""Collectives in a world of one process (the identity, in place, with Paddle's
signatures) and every bad-input error; several ranks: tests/distributed/test_mpi.py."""
import doctest

import numpy as np
import pytest

import fastop
import fastop.distributed as dist
from fastop.distributed import ReduceOp, _collective


@pytest.mark.parametrize("op", list(ReduceOp))
def test_all_reduce_alone_leaves_the_tensor_as_it_is(op):
    x = fastop.to_tensor([1.5, -2.0, 3.0])
    assert dist.all_reduce(x, op=op) is None
    assert x.numpy().tolist() == [1.5, -2.0, 3.0]


def test_reduce_ops_have_paddles_values():
    assert [int(op) for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD,
                               ReduceOp.AVG)] == [0, 1, 2, 3, 4]
    dist.all_reduce(fastop.ones([2]), op=3)            # a plain int is accepted


def test_sync_op_false_returns_a_completed_task():
    task = dist.all_reduce(fastop.ones([2]), sync_op=False)
    assert task.wait() and task.is_completed()
    assert dist.broadcast(fastop.ones([2]), src=0, sync_op=False).is_completed()


def test_broadcast_and_barrier_alone():
    x = fastop.to_tensor([[1, 2], [3, 4]])
    dist.broadcast(x, src=0)
    assert x.numpy().tolist() == [[1, 2], [3, 4]]
    dist.barrier()


def test_all_gather_fills_an_empty_list_or_writes_a_given_one():
    x = fastop.to_tensor([[1.0, 2.0]])
    gathered = []
    dist.all_gather(gathered, x)
    assert len(gathered) == 1 and gathered[0].numpy().tolist() == [[1.0, 2.0]]
    target = fastop.zeros([1, 2])
    into = [target]
    dist.all_gather(into, x)
    assert into[0] is target and target.numpy().tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("call,error,message", [
    (lambda: dist.all_reduce(np.ones(2)), TypeError,
     "all_reduce: 'tensor' must be a fastop Tensor, got ndarray"),
    (lambda: dist.all_reduce(fastop.ones([2]), op=7), ValueError,
     r"all_reduce: op must be a ReduceOp \(SUM, MAX, MIN, PROD, AVG\), got 7"),
    (lambda: dist.all_reduce(fastop.to_tensor([1, 2]), op=ReduceOp.AVG), TypeError,
     "AVG needs a floating tensor, got int64"),
    (lambda: dist.all_reduce(fastop.to_tensor([True]), op=ReduceOp.SUM), TypeError,
     r"a bool tensor reduces with MAX \(logical or\) or MIN \(logical and\), got SUM"),
    (lambda: dist.all_reduce(fastop.ones([1, 2]).broadcast_to([3, 2])), ValueError,
     r"'tensor' is a read-only view \(shape \[3, 2\]"),
    (lambda: dist.all_reduce(fastop.ones([2]), group="ring"), ValueError,
     r"only the global group \(group=None\) is supported, got group='ring'"),
    (lambda: dist.get_rank(group=1), ValueError, "get_rank: only the global group"),
    (lambda: dist.broadcast(fastop.ones([2]), src=1), ValueError,
     r"broadcast: src must be a rank in \[0, 1\), got 1"),
    (lambda: dist.broadcast(fastop.ones([2]), src=True), ValueError,
     "src must be a rank"),
    (lambda: dist.all_gather((), fastop.ones([2])), TypeError,
     "all_gather: 'tensor_list' must be a list"),
    (lambda: dist.all_gather([fastop.ones([3])], fastop.ones([2])), ValueError,
     r"all_gather: tensor_list\[0\] is float32\[3\], expected float32\[2\]"),
    (lambda: dist.all_gather([fastop.ones([2])] * 2, fastop.ones([2])), ValueError,
     r"'tensor_list' must be empty or hold one tensor per rank \(1\), got 2"),
])
def test_bad_input_is_refused_naming_the_function_and_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_refused_call_leaves_the_tensor_usable():
    x = fastop.to_tensor([1, 2])
    with pytest.raises(TypeError):
        dist.all_reduce(x, op=ReduceOp.AVG)
    dist.all_reduce(x, op=ReduceOp.SUM)
    assert x.numpy().tolist() == [1, 2]


def test_docstring_examples():
    result = doctest.testmod(_collective)
    assert result.attempted > 0 and result.failed == 0
