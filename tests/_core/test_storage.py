"""DenseTensor storage: dtypes, zero-copy interop, views, lifetime, errors."""
import gc
import sys
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastop._core import storage
from fastop._core.storage import DenseTensor, as_dtype, empty, from_dlpack, from_numpy, zeros

DTYPES = ["bool", "int32", "int64", "float32", "float64", "float16", "uint8"]


def sample(shape, dtype):
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return (values % 2 == 0) if dtype == "bool" else values.astype(dtype)


# ----------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_objects_compare_with_names_and_numpy(dtype):
    d = as_dtype(dtype)
    assert d == dtype and d == np.dtype(dtype) and as_dtype(d) is d
    assert d.itemsize == np.dtype(dtype).itemsize
    assert repr(d) == f"fastop.{dtype}"


def test_dtype_aliases_and_errors():
    assert as_dtype(float) == "float32" and as_dtype(int) == "int64"
    assert as_dtype(np.float64) == "float64"
    assert as_dtype("half") is as_dtype("fp16") is as_dtype(np.float16) is storage.float16
    assert as_dtype("paddle.uint8") is storage.uint8
    with pytest.raises(TypeError, match="unsupported dtype 'complex128'"):
        as_dtype("complex128")
    with pytest.raises(TypeError, match="expected a dtype"):
        as_dtype(object())


def test_storage_only_dtypes():
    # float16: tensors hold it and cast converts it; kernels compute in the eight dtypes
    # below it, ordered bool, the integers narrow to wide, the floats
    assert [d for d in storage.DTYPE_NAMES if as_dtype(d).is_storage_only] == ["float16"]
    assert storage.DTYPE_NAMES == ("bool", "uint8", "int8", "int16", "int32", "int64",
                                   "float32", "float64", "float16")
    assert storage.float16.is_floating and not storage.uint8.is_floating
    assert not storage.int8.is_floating and not storage.int16.is_storage_only
    assert [as_dtype(d).code for d in storage.DTYPE_NAMES] == list(range(9))


@pytest.mark.parametrize("dtype, fmt", [("float16", "e"), ("uint8", "B")])
def test_storage_dtypes_through_the_buffer_protocol(dtype, fmt):
    a = sample((2, 3), dtype)
    t = from_numpy(memoryview(a))                  # not an ndarray: the format string
    assert t.dtype == dtype and memoryview(t).format == fmt
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.shares_memory(np.asarray(t), a)


# ----------------------------------------------------------------------------- allocation

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [[], [0], [1], [7], [3, 5], [2, 0, 4], [2, 3, 4, 5]],
                         ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_empty_is_aligned_contiguous_and_shaped(shape, dtype):
    t = empty(shape, dtype)
    assert t.shape == shape and t.dtype == dtype and t.ndim == len(shape)
    assert t.size == int(np.prod(shape)) and t.is_contiguous()
    assert t.data_ptr % 64 == 0
    if t.size:  # numpy reports stride 0 for some empty arrays
        assert t.strides == np.empty(shape, dtype).strides


def test_zeros_is_zero():
    assert not np.asarray(zeros([4, 5], "float64")).any()


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="dimensions must be >= 0"):
        empty([2, -3])
    with pytest.raises(ValueError, match="at most 8 dimensions"):
        empty([1] * 9)
    with pytest.raises(TypeError, match="dimensions must be integers, got 2.5"):
        empty([2.5, 3])
    with pytest.raises(TypeError, match="dimensions must be integers"):
        zeros([6]).reshape([2.0, 3])
    assert empty(np.int64(3)).shape == [3]


@pytest.mark.parametrize("make", [
    lambda: empty([1 << 62]),                     # bytes wrap to 0 (float32)
    lambda: empty([1 << 32, 1 << 32]),            # elements wrap to 0
    lambda: zeros([0]).reshape([1 << 32, 1 << 32]),
    lambda: empty([1]).broadcast_to([1 << 32, 1 << 32]),
], ids=["bytes", "elements", "reshape", "broadcast_to"])
def test_shapes_whose_size_overflows_raise(make):
    # the wrapped product used to give a tiny buffer (or size 0) with a huge shape,
    # and writing through it ran past the allocation
    with pytest.raises(ValueError, match="too big"):
        make()
    assert zeros([0]).reshape([3, 0]).shape == [3, 0]   # zero-size shapes stay fine
    assert empty([1]).broadcast_to([1 << 31, 1]).shape == [1 << 31, 1]


# ----------------------------------------------------------------------------- zero copy

@pytest.mark.parametrize("dtype", DTYPES)
def test_from_numpy_shares_memory_both_ways(dtype):
    a = sample((3, 4), dtype)
    t = from_numpy(a)
    assert t.shape == [3, 4] and t.dtype == dtype
    b = np.asarray(t)
    assert np.shares_memory(a, b)
    b[1, 2] = b[0, 0]          # write through numpy, read through the original
    assert a[1, 2] == a[0, 0]
    np.testing.assert_array_equal(t.numpy(), a)


def test_tensor_keeps_the_borrowed_buffer_alive():
    a = np.arange(6.0)
    ref = weakref.ref(a)
    t = from_numpy(a)
    del a
    gc.collect()
    assert ref() is not None          # the held Py_buffer pins the array
    np.testing.assert_array_equal(np.asarray(t), np.arange(6.0))
    del t
    gc.collect()
    assert ref() is None


def test_numpy_view_keeps_the_tensor_alive():
    t = empty([5], "float32")
    ref = weakref.ref(t)
    a = np.asarray(t)
    del t
    gc.collect()
    assert ref() is not None
    a[:] = 3.0
    assert a.sum() == 15.0


def test_read_only_arrays_stay_read_only():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = from_numpy(a)
    assert t.readonly
    assert not np.asarray(t).flags.writeable


def test_from_numpy_non_contiguous_keeps_strides():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2]
    t = from_numpy(a)
    assert not t.is_contiguous() and t.strides == a.strides
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.shares_memory(np.asarray(t), a)


def test_from_numpy_rejects_unsupported_buffers():
    with pytest.raises(TypeError, match="unsupported buffer format"):
        from_numpy(np.zeros(3, np.complex64))
    with pytest.raises(TypeError, match="big-endian"):
        from_numpy(np.zeros(3, ">f4"))


@pytest.mark.parametrize("np_dtype, dtype", [(np.intc, "int32"), (np.int_, "int64"),
                                              (np.longlong, "int64"), (np.bool_, "bool")])
def test_from_numpy_maps_platform_integer_aliases(np_dtype, dtype):
    a = np.arange(5).astype(np_dtype)
    t = from_numpy(a)
    assert t.dtype == dtype and np.shares_memory(np.asarray(t), a)


def test_borrowed_array_cannot_be_resized_under_the_tensor():
    a = np.arange(4.0)
    t = from_numpy(a)
    with pytest.raises(ValueError):
        a.resize(1000)                  # would free the memory the tensor points at
    np.testing.assert_array_equal(np.asarray(t), np.arange(4.0))


def test_from_numpy_accepts_non_ndarray_buffers_and_subclasses():
    raw = bytearray(np.arange(3, dtype=np.float64).tobytes())
    t = from_numpy(memoryview(raw).cast("d"))
    assert t.dtype == "float64" and t.shape == [3]
    np.testing.assert_array_equal(np.asarray(t), [0.0, 1.0, 2.0])
    m = np.ma.masked_array(np.arange(3.0))  # an ndarray subclass takes the buffer path
    assert np.shares_memory(np.asarray(from_numpy(m)), m.data)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_round_trip_with_numpy(dtype):
    a = sample((2, 3), dtype)
    t = from_dlpack(a)
    assert t.dtype == dtype and np.shares_memory(np.asarray(t), a)
    b = np.from_dlpack(t)
    assert b.flags.writeable and np.shares_memory(a, b)
    b[0, 0] = b[1, 2]
    assert a[0, 0] == a[1, 2]


def test_dlpack_of_transposed_view_and_read_only_flag():
    t = from_numpy(np.arange(6.0).reshape(2, 3)).transpose()
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(6.0).reshape(2, 3).T)
    bt = from_numpy(np.arange(3.0)).broadcast_to([2, 3])
    assert not np.from_dlpack(bt).flags.writeable


def test_read_only_tensor_refuses_the_legacy_capsule():
    # an unversioned capsule has no read-only flag: its consumer could write through
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    t = from_numpy(frozen)
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="read-only"):
        from_numpy(np.arange(3.0)).broadcast_to([2, 3]).__dlpack__()
    assert from_dlpack(t.__dlpack__(max_version=(1, 0))).readonly
    copied = from_dlpack(t.__dlpack__(copy=True))
    assert not copied.readonly and not np.shares_memory(np.asarray(copied), frozen)


def test_dlpack_capsule_is_consumed_once():
    capsule = from_numpy(np.arange(3.0)).__dlpack__()
    from_dlpack(capsule)
    with pytest.raises(TypeError, match="unused DLPack capsule"):
        from_dlpack(capsule)


def test_unconsumed_capsule_releases_its_tensor():
    t = empty([3])
    ref = weakref.ref(t)
    capsule = t.__dlpack__()
    del t
    gc.collect()
    assert ref() is not None
    del capsule
    gc.collect()
    assert ref() is None


# ----------------------------------------------------------------------------- views

def test_reshape_of_contiguous_is_a_view():
    a = np.arange(12.0)
    t = from_numpy(a).reshape(3, -1)
    assert t.shape == [3, 4] and np.shares_memory(np.asarray(t), a)
    with pytest.raises(ValueError, match="cannot reshape"):
        from_numpy(a).reshape(5, -1)


def test_reshape_of_non_contiguous_copies():
    a = np.arange(12.0).reshape(3, 4)
    t = from_numpy(a).transpose().reshape([12])
    np.testing.assert_array_equal(np.asarray(t), a.T.reshape(12))
    assert not np.shares_memory(np.asarray(t), a)


def test_transpose_permute_and_T():
    a = np.arange(24).reshape(2, 3, 4)
    t = from_numpy(a)
    np.testing.assert_array_equal(np.asarray(t.transpose(2, 0, 1)), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(t.permute([1, 0, 2])), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(np.asarray(t.T), a.T)
    with pytest.raises(ValueError, match="not a permutation"):
        t.transpose(0, 0, 1)


def test_broadcast_to_is_a_read_only_stride_zero_view():
    a = np.arange(3.0).reshape(3, 1)
    t = from_numpy(a).broadcast_to([2, 3, 4])
    assert t.readonly and t.strides[0] == 0 and t.strides[2] == 0
    np.testing.assert_array_equal(np.asarray(t), np.broadcast_to(a, (2, 3, 4)))
    with pytest.raises(ValueError, match="cannot broadcast"):
        from_numpy(a).broadcast_to([2, 4])


def test_copy_and_contiguous():
    a = np.arange(12.0).reshape(3, 4)
    t = from_numpy(a)[:, ::2]
    c = t.contiguous()
    assert c.is_contiguous() and not np.shares_memory(np.asarray(c), a)
    np.testing.assert_array_equal(np.asarray(c), a[:, ::2])
    full = from_numpy(a)
    assert full.contiguous() is full


def test_offset_of_a_slice():
    t = empty([4, 5], "float64")
    assert t[2:, 1:].offset == (2 * 5 + 1) * 8


def test_item_and_len():
    assert from_numpy(np.array([[2.5]])).item() == 2.5
    assert len(empty([7, 2])) == 7
    with pytest.raises(ValueError, match="one element"):
        empty([2]).item()
    with pytest.raises(TypeError, match="0-d"):
        len(empty([]))


def test_bad_indices():
    t = empty([2, 3])
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 3"):
        t[0, 3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="unsupported index"):
        t[[0, 1]]


index_element = st.one_of(
    st.integers(-3, 2),
    st.slices(3),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(arr=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=4, min_side=3, max_side=5)),
       key=st.lists(index_element, min_size=0, max_size=4))
def test_basic_indexing_matches_numpy(arr, key):
    key = tuple(key[: arr.ndim])
    expected = arr[key]
    got = from_numpy(arr)[key]
    assert got.shape == list(expected.shape)
    np.testing.assert_array_equal(np.asarray(got), expected)
    if expected.size:
        assert np.shares_memory(np.asarray(got), arr)


def test_indexing_past_the_dimension_limit_raises():
    # new axes used to be written past the view's 8 dims (a crash when freed)
    x = zeros([2] * 7)
    with pytest.raises(IndexError, match="would give 9 dims; at most 8"):
        x[None, None]
    with pytest.raises(IndexError, match="at most 8"):
        zeros([1] * 8)[None]
    assert x[None].shape == [1] + [2] * 7
    assert x[0, None, None].shape == [1, 1] + [2] * 6



@settings(max_examples=100, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), data=st.data())
def test_broadcast_to_matches_numpy(shape, data):
    target = data.draw(hnp.broadcastable_shapes(shape, min_dims=len(shape)).filter(
        lambda s: np.broadcast_shapes(s, shape) == tuple(s)) | st.just(shape))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(np.asarray(from_numpy(a).broadcast_to(list(target))),
                                  np.broadcast_to(a, target))


def test_dense_tensor_subclasses_keep_their_type_in_views():
    class Sub(DenseTensor):
        pass
    t = storage.from_numpy(np.arange(6.0).reshape(2, 3), cls=Sub)
    assert type(t) is Sub
    assert type(t.transpose()) is Sub and type(t[0]) is Sub and type(t.copy()) is Sub


# ----------------------------------------------------------------------- small-block cache

def _address(t):
    return np.asarray(t).__array_interface__["data"][0]


@pytest.fixture
def no_gc():
    """No collection frees other tensors' blocks between a free and the next alloc."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 65, 128, 200, 256])
def test_small_buffers_are_recycled_and_aligned(nbytes, no_gc):
    t = empty([nbytes], "bool")
    first = _address(t)
    assert first % 64 == 0
    np.asarray(t)[:] = True
    del t
    u = zeros([nbytes], "bool")          # the same block again, and zeroed
    assert _address(u) == first
    assert not np.asarray(u).any()


def test_buffers_above_256_bytes_are_not_cached(no_gc):
    before = storage._small_block_counts()
    t = empty([65], "float32")           # 260 bytes
    assert _address(t) % 64 == 0
    del t
    assert storage._small_block_counts() == before


def test_small_block_cache_is_bounded(no_gc):
    held = [empty([4], "float32") for _ in range(1000)]
    addresses = {_address(t) for t in held}
    assert len(addresses) == 1000        # live tensors never share a block
    del held
    assert storage._small_block_counts()[0] == 256


def test_views_and_borrowed_buffers_leave_the_cache_alone(no_gc):
    owner = empty([8], "float32")
    before = storage._small_block_counts()
    view = owner.reshape([2, 4])
    borrowed = from_numpy(np.zeros(8, "float32"))
    del view, borrowed
    assert storage._small_block_counts() == before
    del owner
    assert storage._small_block_counts()[0] == min(before[0] + 1, 256)


def test_huge_requests_never_get_a_small_block(no_gc):
    # 2**38 + 4 bytes: a size class computed in a narrower integer would wrap to 0
    before = storage._small_block_counts()
    try:
        t = empty([(1 << 36) + 1], "float32")
    except MemoryError:
        pass
    else:
        assert t.nbytes == (1 << 38) + 4
        del t
    assert storage._small_block_counts() == before


# --------------------------------------------------------------------------- large blocks

LARGE = 4 << 20          # the smallest request that takes a large block (4 MiB)
HUGE_PAGE = 2 << 20


@pytest.fixture
def empty_large_cache(no_gc):
    storage.empty_cache()
    yield
    storage.empty_cache()


def test_freed_large_blocks_are_reused_for_the_same_size(empty_large_cache):
    t = empty([LARGE // 4 + 1], "float32")     # 4 MiB + 4 bytes: three huge pages
    first = t.data_ptr
    assert first % HUGE_PAGE == 0
    np.asarray(t)[:] = 1
    del t
    assert storage._large_block_sizes() == [3 * HUGE_PAGE]
    other = empty([LARGE // 4], "float32")     # two huge pages: not that block
    assert other.data_ptr != first and storage._large_block_sizes() == [3 * HUGE_PAGE]
    again = zeros([LARGE // 8 + 1000], "float64")   # also three huge pages: reused, zeroed
    assert again.data_ptr == first and storage._large_block_sizes() == []
    assert not np.asarray(again).any()


def test_live_tensors_never_share_a_large_block(empty_large_cache):
    held = [empty([LARGE // 4], "float32") for _ in range(3)]
    del held[1]
    fresh = [empty([LARGE // 4], "float32") for _ in range(3)]
    addresses = [t.data_ptr for t in held + fresh]
    assert len(set(addresses)) == 5
    assert storage._large_block_sizes() == []


def test_large_block_cache_is_bounded_in_count_and_bytes(empty_large_cache):
    held = [empty([LARGE // 4], "float32") for _ in range(20)]
    del held
    assert storage._large_block_sizes() == [LARGE] * 8             # the newest 8 kept
    big = [empty([(64 << 20) // 4], "float32") for _ in range(5)]  # 64 MiB each
    del big
    assert sum(storage._large_block_sizes()) <= 256 << 20
    assert storage._large_block_sizes()[-1] == 64 << 20
    huge = empty([(300 << 20) // 4], "float32")                     # above the limit
    before = storage._large_block_sizes()
    del huge
    assert storage._large_block_sizes() == before                  # freed, not cached


def test_views_and_borrowed_memory_leave_the_large_cache_alone(empty_large_cache):
    owner = empty([LARGE // 4], "float32")
    view = owner.reshape([1024, -1])[::2]
    borrowed = from_numpy(np.zeros(LARGE // 4, "float32"))
    del view, borrowed
    assert storage._large_block_sizes() == []
    del owner
    assert storage._large_block_sizes() == [LARGE]


def test_empty_cache_releases_large_and_small_blocks(no_gc):
    small, large = empty([4], "float32"), empty([LARGE // 4], "float32")
    del small, large
    assert storage._large_block_sizes() and storage._small_block_counts()[0]
    storage.empty_cache()
    assert storage._large_block_sizes() == [] and storage._small_block_counts() == [0] * 4


def test_empty_cache_is_public_api():
    import fastop
    assert fastop.empty_cache is storage.empty_cache and "empty_cache" in fastop.__all__


@pytest.mark.parametrize("value, cached", [("0", False), ("16", True), ("-1", None),
                                           ("lots", None)])
def test_large_cache_limit_comes_from_the_environment(value, cached):
    import os
    import subprocess
    code = ("from fastop._core.storage import empty, _large_block_sizes\n"
            "t = empty([(8 << 20) // 4], 'float32'); del t\n"
            "print(_large_block_sizes())")
    env = dict(os.environ, FASTOP_LARGE_CACHE_MB=value)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True)
    if cached is None:
        assert proc.returncode != 0
        assert "FASTOP_LARGE_CACHE_MB must be a whole number of megabytes" in proc.stderr
        assert repr(value) in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == ("[8388608]" if cached else "[]")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("request_mib, headroom_mib", [(64, 24), (3, 0)])
def test_out_of_memory_gives_cached_blocks_back_and_retries(request_mib, headroom_mib):
    # Under an address-space limit that leaves room for the new block only once the
    # cached blocks (of other sizes) are unmapped, the allocation must still succeed:
    # a large block, and one below the large-block threshold.
    import subprocess
    code = f"""
import resource
from fastop._core.storage import empty, _large_block_sizes
MiB = 1 << 20
blocks = [empty([n * MiB // 4], 'float32') for n in (40, 42, 44)]
del blocks
assert len(_large_block_sizes()) == 3, _large_block_sizes()
size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + {headroom_mib} * MiB, resource.RLIM_INFINITY))
t = empty([{request_mib} * MiB // 4], 'float32')
t.numpy()[:] = 1.0
print(_large_block_sizes(), float(t.numpy().sum()))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", str(float(request_mib * (1 << 20) // 4))]


def test_item_takes_a_flat_index_or_a_position_as_paddle():
    t = from_numpy(np.arange(6.0).reshape(2, 3))
    assert t.item(4) == 4.0 and t.item(1, 2) == 5.0
    assert from_numpy(np.array([7])).item() == 7
    with pytest.raises(ValueError, match="item\\(\\) needs a tensor of one element"):
        t.item()
    with pytest.raises(IndexError):
        t.item(6)
