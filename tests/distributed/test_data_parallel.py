"""DataParallel in a world of one process: a transparent wrapper (forward, parameters,
gradients, state dicts of the wrapped model), no backward hook and no cost; no_sync;
the errors of bad arguments. Several ranks: tests/distributed/test_mpi.py."""
import doctest

import numpy as np
import pytest

import fastop
from fastop.distributed._buckets import GradientBuckets
from fastop import nn
from fastop.autograd._backward import backward_end_hooks
from fastop.distributed import _data_parallel


def model():
    fastop.seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def test_the_wrapper_computes_what_the_model_computes():
    plain, wrapped_net = model(), model()
    wrapped = fastop.DataParallel(wrapped_net)
    x = fastop.to_tensor(np.random.default_rng(0).standard_normal((5, 4)).astype("float32"))
    y, z = plain(x), wrapped(x)
    assert np.array_equal(y.numpy(), z.numpy())
    y.sum().backward()
    z.sum().backward()
    for p, q in zip(plain.parameters(), wrapped.parameters()):
        assert np.array_equal(p.grad.numpy(), q.grad.numpy())
    assert [id(p) for p in wrapped.parameters()] == [id(p) for p in wrapped_net.parameters()]


def test_alone_it_registers_no_hook():
    before = dict(backward_end_hooks)
    wrapped = fastop.DataParallel(model())
    assert backward_end_hooks == before
    assert not any(_data_parallel.synced_by_data_parallel(p) for p in wrapped.parameters())


def test_state_dicts_are_the_wrapped_models():
    net = model()
    wrapped = fastop.DataParallel(net)
    assert list(wrapped.state_dict()) == list(net.state_dict()) == \
        ["0.weight", "0.bias", "2.weight", "2.bias"]
    values = {k: np.full(v.shape, 0.5, "float32") for k, v in net.state_dict().items()}
    assert wrapped.set_state_dict(values) == ([], [])
    assert wrapped.load_dict is not nn.Layer.load_dict
    assert net[0].weight.numpy().tolist()[0][0] == 0.5


def test_no_sync_switches_synchronisation_off_inside_only():
    wrapped = fastop.DataParallel(model())
    with wrapped.no_sync():
        assert wrapped._grad_need_sync is False
        with pytest.raises(KeyError):
            with wrapped.no_sync():
                raise KeyError("inner")
        assert wrapped._grad_need_sync is False
    assert wrapped._grad_need_sync is True


def test_a_forward_with_grad_arms_the_averaging_and_no_grad_does_not():
    wrapped = fastop.DataParallel(model())
    wrapped(fastop.ones([1, 4]))
    assert wrapped._buckets is None             # alone there is nothing to average
    buckets = GradientBuckets(wrapped.parameters(), 25, 1, "test", overlap=True)
    object.__setattr__(wrapped, "_syncs", True)  # as with several ranks
    object.__setattr__(wrapped, "_buckets", buckets)
    try:
        with fastop.no_grad():
            wrapped(fastop.ones([1, 4]))
        assert buckets.armed is False
        with wrapped.no_sync():
            wrapped(fastop.ones([1, 4]))
        assert buckets.armed is False
        wrapped(fastop.ones([1, 4]))
        assert buckets.armed is True
    finally:
        buckets.close()


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(layers=np.ones(2)), TypeError, "'layers' must be a fastop.nn.Layer, got ndarray"),
    (dict(group="g"), ValueError, r"only the global group \(group=None\)"),
    (dict(comm_buffer_size=0), ValueError,
     "comm_buffer_size must be a positive number of MB, got 0"),
    (dict(bucket_cap_mb=-1), ValueError, "comm_buffer_size must be a positive"),
    (dict(last_comm_buffer_size="1"), ValueError, "last_comm_buffer_size must be"),
])
def test_bad_arguments_are_refused(kwargs, error, message):
    kwargs.setdefault("layers", model())
    with pytest.raises(error, match=f"DataParallel: {message}"):
        fastop.DataParallel(**kwargs)


def test_static_mode_is_refused_with_the_way_to_go():
    net = model()
    fastop.enable_static()
    try:
        with pytest.raises(RuntimeError, match="DistributedOptimizer"):
            fastop.DataParallel(net)
    finally:
        fastop.disable_static()


def test_model_comparison_names_the_first_difference():
    ref = {"parameter": [["0.weight", [3, 4], "float32", True]], "buffer": []}
    other = {"parameter": [["0.weight", [3, 4], "float32", False]], "buffer": []}
    assert _data_parallel._first_difference(ref, ref, 1) is None
    assert _data_parallel._first_difference(ref, other, 2) == \
        "parameter '0.weight' is float32[3, 4] on rank 0 but float32[3, 4] (frozen) on rank 2"
    assert _data_parallel._first_difference(ref, {"parameter": [], "buffer": []}, 1) == \
        "rank 1 has no parameter '0.weight' (rank 0: float32[3, 4])"
    extra = {"parameter": ref["parameter"], "buffer": [["mean", [2], "float32"]]}
    assert _data_parallel._first_difference(ref, extra, 1) == \
        "rank 1 has a buffer 'mean' that rank 0 has not"


def test_docstring_examples():
    result = doctest.testmod(_data_parallel)
    assert result.attempted > 0 and result.failed == 0
