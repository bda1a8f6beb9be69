"""The kernel ABI (CKernel): raw calls, out=, inference with unknown dims, errors, threads."""
import sys
import threading
import time

import numpy as np
import pytest

from fastop._core import elementwise, kernel, reduce, shape_ops, softmax, views
from fastop._core.storage import DenseTensor, empty, from_numpy


def f32(values):
    return from_numpy(np.asarray(values, dtype=np.float32))


def test_describes_itself():
    k = elementwise.add
    assert isinstance(k, kernel.CKernel)
    assert k.input_names == ("x", "y") and k.output_names == ("out",)
    assert k.n_in == 2 and k.n_out == 1
    assert "float32" in k.dtypes and "bool" not in elementwise.tanh.dtypes
    assert repr(k).startswith("<CKernel fastop::add(x, y) -> (out)")


def test_raw_call_allocates_a_new_tensor():
    x = f32([[1, 2, 3], [4, 5, 6]])
    y = elementwise.add(x, f32([10, 20, 30]))
    assert isinstance(y, DenseTensor) and y.shape == [2, 3] and y.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(y), [[11, 22, 33], [14, 25, 36]])


def test_raw_call_accepts_numpy_and_scalars():
    y = elementwise.multiply(np.arange(3.0), 2)
    assert y.dtype == "float64"                     # the scalar takes x's dtype
    np.testing.assert_array_equal(np.asarray(y), [0.0, 2.0, 4.0])


def test_out_is_written_in_place():
    x = f32([1, 2, 3])
    out = empty([3], "float32")
    result = elementwise.add(x, x, out=out)
    assert result is out
    np.testing.assert_array_equal(np.asarray(out), [2, 4, 6])
    elementwise.add(x, 1, out=x)                    # exact aliasing of an input
    np.testing.assert_array_equal(np.asarray(x), [2, 3, 4])


def test_out_sharing_memory_with_an_input_any_other_way_is_staged():
    """out= overlapping an input is safe: elementwise kernels write the same elements in
    place, anything else (a transposed or shifted view, a non-elementwise kernel) is
    computed aside and copied, as numpy does."""
    from fastop._core import linalg
    a = np.arange(9.0).reshape(3, 3)
    x = from_numpy(a.copy())
    elementwise.add(x.transpose(1, 0), 0.0, out=x)
    np.testing.assert_array_equal(np.asarray(x), a.T)
    elementwise.add(x, x.transpose(1, 0), out=x)
    np.testing.assert_array_equal(np.asarray(x), a.T + a)
    m = from_numpy(a.copy())
    linalg.matmul(m, m, out=m)
    np.testing.assert_allclose(np.asarray(m), a @ a, rtol=1e-12)
    v = from_numpy(np.arange(6.0))
    shifted = from_numpy(np.asarray(v)[1:])
    elementwise.multiply(from_numpy(np.asarray(v)[:5]), 2.0, out=shifted)
    expected = np.arange(6.0)
    expected[1:] = expected[:5] * 2                 # numpy buffers the overlap
    np.testing.assert_array_equal(np.asarray(v), expected)


def test_out_into_a_numpy_array():
    target = np.zeros(3, np.float32)
    elementwise.tanh(f32([0, 1, -1]), out=target)
    np.testing.assert_allclose(target, np.tanh([0, 1, -1]), rtol=1e-6)


def test_out_shape_and_dtype_are_checked():
    x = f32([1, 2, 3])
    with pytest.raises(ValueError, match=r"add: out 'out' must have shape \[3\] and dtype "
                                         r"float32, got shape \[4\] and dtype float32"):
        elementwise.add(x, x, out=empty([4], "float32"))
    with pytest.raises(ValueError, match=r"got shape \[3\] and dtype float64"):
        elementwise.add(x, x, out=empty([3], "float64"))
    with pytest.raises(ValueError, match="out 'out' is read-only"):
        elementwise.add(x, x, out=f32([1]).broadcast_to([3]))
    with pytest.raises(TypeError, match=r"out= needs 1 tensors \(out\), got 2"):
        elementwise.add(x, x, out=(empty([3]), empty([3])))


def test_errors_name_the_kernel_inputs_shapes_and_dtypes():
    with pytest.raises(ValueError, match=r"add: input shapes do not broadcast together; "
                                         r"got x: shape \[2, 3\] float32, y: shape \[4\] float32"):
        elementwise.add(f32(np.ones((2, 3))), f32(np.ones(4)))
    with pytest.raises(TypeError, match=r"add: x and y must have the same dtype .*; "
                                        r"got x: shape \[3\] float32, y: shape \[3\] float64"):
        elementwise.add(f32(np.ones(3)), from_numpy(np.ones(3)))
    with pytest.raises(TypeError, match=r"tanh: dtype int64 is not supported for input 'x'; "
                                        r"expected one of \['float32', 'float64'\]"):
        elementwise.tanh(from_numpy(np.arange(3)))
    with pytest.raises(TypeError, match=r"add: expected 2 inputs \(x, y\), got 1"):
        elementwise.add(f32([1]))


def test_a_kernel_explains_its_own_errors_and_echoes_the_attributes():
    # CKernel.reasons overrides the generic text per status; the attributes given are
    # listed after the inputs
    x = from_numpy(np.zeros((2, 3)))
    assert reduce.sum.reasons and not elementwise.tanh.reasons
    with pytest.raises(ValueError, match=r"^fastop::sum: each axis must be in \[-ndim, ndim\) "
                                         r"of x \(0 or -1 for a 0-D x\), and given once; got "
                                         r"x: shape \[2, 3\] float64, axis=\[1, -1\], "
                                         r"keepdim=True$"):
        reduce.sum(x, axis=[1, -1], keepdim=True)
    with pytest.raises(ValueError, match=r"^fastop::max: a max over zero elements has no value"):
        reduce.max(from_numpy(np.zeros((0, 3))))


def test_packed_defaults_are_kept_apart_from_given_attributes():
    # a call with no attributes reuses the packed defaults; given ones never leak into them
    x = np.arange(6.0).reshape(2, 3)
    want_last = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    want_first = np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(softmax.softmax(x)), want_last)
        np.testing.assert_allclose(np.asarray(softmax.softmax(x, axis=0)), want_first)


def test_attributes_pack_and_are_validated():
    x = from_numpy(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(reduce.sum(x, axis=[1], keepdim=True)), [[3], [12]])
    with pytest.raises(TypeError, match=r"sum: unknown attribute\(s\) \['axes'\]"):
        reduce.sum(x, axes=[1])
    with pytest.raises(TypeError, match="add: takes no attributes"):
        elementwise.add(x, x, axis=1)


@pytest.mark.parametrize("call, message", [
    (lambda x: reduce.sum(x, axis=1.5), "sum: attribute 'axis' must be an integer"),
    (lambda x: reduce.sum(x, axis=[0, 1.0]), "sum: attribute 'axis' must be an integer"),
    (lambda x: reduce.sum(x, keepdim="no"), "sum: attribute 'keepdim' must be a bool"),
    (lambda x: reduce.argmax(x, axis=[0, 1]), "argmax: attribute 'axis' must be an integer"),
    (lambda x: softmax.softmax(x, axis=True), "softmax: attribute 'axis' must be an integer"),
    (lambda x: softmax.softmax_cross_entropy(x, np.array([0, 1]), ignore_index=1.5),
     "softmax_cross_entropy: attribute 'ignore_index' must be an integer"),
    (lambda x: views.broadcast_to(x, shape=[2, 3.0]),
     "broadcast_to: attribute 'shape' must be an integer"),
])
def test_attribute_values_of_the_wrong_kind_are_refused_not_truncated(call, message):
    # axis=1.5 used to run on axis 1, keepdim="no" to keep the dims
    x = from_numpy(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match=message):
        call(x)
    np.testing.assert_array_equal(np.asarray(reduce.sum(x, axis=np.int64(1))), [3, 12])


def test_an_output_too_big_to_address_is_refused_naming_the_op():
    # the element count used to wrap around to a tiny allocation (a crash on writing)
    one = from_numpy(np.ones(1, np.float32))
    a, b = one.broadcast_to([1 << 31, 1]), one.broadcast_to([1, 1 << 31])
    with pytest.raises(ValueError, match=r"fastop::add: output 'out': shape \[2147483648, "
                                         r"2147483648\] of float32 is too big.*; got x: "
                                         r"shape \[2147483648, 1\] float32"):
        elementwise.add(a, b)
    np.testing.assert_array_equal(np.asarray(elementwise.add(one, one)), [2.0])


def test_meta_propagates_unknown_dims():
    [(shape, dtype)] = elementwise.add.meta(([None, 3], "float32"), ([3], "float32"))
    assert shape == [None, 3] and dtype == "float32"
    [(shape, _)] = elementwise.add.meta(([None, 1], "float64"), ([1, 5], "float64"))
    assert shape == [None, 5]
    [(shape, dtype)] = elementwise.less_than.meta(([2], "int64"), ([2], "int64"))
    assert shape == [2] and dtype == "bool"
    assert reduce.sum.meta(([None, 4, 5], "float32"), axis=[1], keepdim=False)[0][0] == [None, 5]
    with pytest.raises(ValueError, match="add: input shapes do not broadcast"):
        elementwise.add.meta(([2, 3], "float32"), ([4], "float32"))


def test_run_py_returns_a_tuple_of_the_requested_type():
    class Sub(DenseTensor):
        pass
    (out,) = elementwise.exp.run_py((f32([0.0]),), {}, Sub)
    assert type(out) is Sub and np.asarray(out)[0] == 1.0


def test_errors_leave_kernels_usable():
    x = f32([1, 2])
    for _ in range(3):
        with pytest.raises(ValueError):
            elementwise.add(x, f32([1, 2, 3]))
    np.testing.assert_array_equal(np.asarray(elementwise.add(x, x)), [2, 4])


def test_thread_count_switch():
    before = kernel._get_num_threads()
    try:
        kernel.set_num_threads(1)
        assert kernel._get_num_threads() == 1
        with pytest.raises(ValueError, match="expected n >= 1, got 0"):
            kernel.set_num_threads(0)
        assert kernel._get_num_threads() == 1
    finally:
        kernel.set_num_threads(before)


def _ticks_during_one_kernel_call(n):
    """How many times another Python thread ran while one exp kernel call was running."""
    x = from_numpy(np.random.default_rng(0).random(n))
    out = empty([n], "float64")
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    counter = threading.Thread(target=count)
    counter.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        elementwise.exp(x, out=out)
        end = time.perf_counter()
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(old_interval)
    np.testing.assert_allclose(np.asarray(out), np.exp(np.asarray(x)), rtol=1e-12)
    margin = min(0.001, (end - start) / 4)
    return sum(1 for t in ticks if start + margin < t < end - margin)


def test_large_kernels_release_the_gil():
    """While one big kernel call runs, another Python thread keeps executing bytecode.
    (Up to three tries: on a loaded machine the counter thread may not get a core once;
    a kernel holding the GIL fails all three.)"""
    assert any(_ticks_during_one_kernel_call(8_000_000) for _ in range(3))


def test_a_scalar_in_the_dispatch_position_takes_the_tensor_dtype():
    y = elementwise.subtract(2, f32([1, 5]))
    assert y.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(y), [1, -3])
    picked = elementwise.where(np.array([True, False]), 1.0, f32([7, 8]))
    assert picked.dtype == "float32"          # not the bool condition's dtype
    np.testing.assert_array_equal(np.asarray(picked), [1, 8])
    assert elementwise.add(np.float64(1.5), np.zeros(2)).dtype == "float64"


def test_the_out_fast_path_falls_back_to_full_checks():
    x = f32([1, 2, 3])
    out = empty([3], "float32")
    assert elementwise.tanh(x, out=out) is out
    np.testing.assert_allclose(np.asarray(out), np.tanh([1, 2, 3]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"fastop::tanh: out 'out' must have shape \[3\]"):
        elementwise.tanh(x, out=empty([2], "float32"))
    with pytest.raises(TypeError, match="fastop::tanh: dtype int64 is not supported"):
        elementwise.tanh(from_numpy(np.arange(3)), out=empty([3], "int64"))
    with pytest.raises(ValueError, match="read-only"):
        elementwise.tanh(x, out=f32([0]).broadcast_to([3]))
