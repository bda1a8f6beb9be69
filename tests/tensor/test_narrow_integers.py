"""PaddlePaddle's uint8, int8 and int16 dtypes (issue 27): created from every source,
converted both ways with numpy, cast to and from every dtype, computed in their own dtype
(overflow wraps like numpy's and Paddle's), Paddle's scalar rule (an int scalar takes
the tensor's dtype, a float one makes float32; integer tensors of different dtypes are
not promoted), reductions by Paddle's documented dtypes, indexing and shape ops, printing,
save/load, the data loader, and static programs that agree with eager calls."""
from __future__ import annotations

import numpy as np
import pytest

import fastop

NARROW = ["uint8", "int8", "int16"]
EVERY = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
         "float64"]


def _sample(dtype: str) -> np.ndarray:
    """Values of `dtype` near both ends of its range (so arithmetic on them wraps)."""
    info = np.iinfo(dtype)
    return np.array([[info.min, info.min + 1, 0, 1], [7, info.max - 1, info.max, 3]], dtype)


@pytest.mark.parametrize("dtype", NARROW)
def test_the_dtypes_are_fastop_names_and_resolve_every_spelling(dtype):
    d = getattr(fastop, dtype)
    assert d == dtype and d == np.dtype(dtype) and str(d) == dtype
    for spelling in (dtype, f"paddle.{dtype}", np.dtype(dtype), getattr(np, dtype), d):
        assert fastop.to_tensor([1, 2], dtype=spelling).dtype == d
    assert d.itemsize == np.dtype(dtype).itemsize and not d.is_floating


@pytest.mark.parametrize("dtype", NARROW)
def test_creation_keeps_the_dtype(dtype):
    x = _sample(dtype)
    assert fastop.to_tensor(x).dtype == dtype                # a numpy array's own dtype
    assert fastop.to_tensor(x.tolist(), dtype=dtype).numpy().tolist() == x.tolist()
    for made, fill in ((fastop.zeros([2, 3], dtype=dtype), 0),
                       (fastop.ones([2, 3], dtype=getattr(fastop, dtype)), 1),
                       (fastop.full([2, 3], 5, dtype=dtype), 5)):
        assert made.dtype == dtype
        np.testing.assert_array_equal(made.numpy(), np.full((2, 3), fill, dtype))
    like = fastop.zeros_like(fastop.to_tensor(x))
    assert like.dtype == dtype and not like.numpy().any()


@pytest.mark.parametrize("dtype", NARROW)
def test_numpy_conversion_both_ways_shares_or_copies_exactly(dtype):
    x = _sample(dtype)
    t = fastop.to_tensor(x)
    out = t.numpy()
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, x)
    view = np.asarray(t)
    assert view.dtype == dtype
    view[0, 0] = 9                                     # np.asarray shares t's memory
    assert t.numpy()[0, 0] == 9
    back = fastop.to_tensor(t)                         # a tensor's copy keeps the dtype
    assert back.dtype == dtype and back.numpy().tolist() == t.numpy().tolist()


@pytest.mark.parametrize("dst", EVERY)
@pytest.mark.parametrize("src", NARROW)
def test_cast_from_a_narrow_integer_to_every_dtype_as_numpy(src, dst):
    x = _sample(src)
    got = fastop.cast(fastop.to_tensor(x), dst)
    assert got.dtype == dst
    np.testing.assert_array_equal(got.numpy(), x.astype(dst))
    assert fastop.to_tensor(x).astype(dst).dtype == dst


@pytest.mark.parametrize("dst", NARROW)
@pytest.mark.parametrize("src", ["bool", "int32", "int64", "float16", "float32", "float64"])
def test_cast_to_a_narrow_integer_wraps_like_numpy(src, dst):
    # integers wrap; floats truncate toward zero (within int64), then wrap
    x = np.array([-300, -129, -1, 0, 1, 127, 128, 255, 256, 40000], "int64").astype(src)
    got = fastop.to_tensor(x).astype(dst)
    want = x.astype(dst) if x.dtype.kind != "f" else np.trunc(x).astype("int64").astype(dst)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", NARROW)
def test_arithmetic_stays_in_the_dtype_and_wraps_like_numpy(dtype):
    x = _sample(dtype)
    y = x[:, ::-1].copy()
    a, b = fastop.to_tensor(x), fastop.to_tensor(y)
    for got, want in ((a + b, x + y), (a - b, x - y), (a * b, x * y), (-a, -x),
                      (fastop.maximum(a, b), np.maximum(x, y)), (abs(a), np.abs(x)),
                      (a ** 2, x ** 2), (fastop.where(a > b, a, b), np.where(x > y, x, y))):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", NARROW)
def test_python_scalars_follow_paddles_rule(dtype):
    x = _sample(dtype)
    t = fastop.to_tensor(x)
    assert (t + 1).dtype == dtype                      # an int takes the tensor's dtype
    np.testing.assert_array_equal((t + 1).numpy(), x + np.array(1, dtype))
    np.testing.assert_array_equal((2 * t).numpy(), np.array(2, dtype) * x)
    assert (t * 2.5).dtype == "float32"                # a float makes float32
    np.testing.assert_allclose((t * 2.5).numpy(), x.astype("float32") * 2.5)
    half = t / 2                                       # true division: float32
    assert half.dtype == "float32"
    np.testing.assert_allclose(half.numpy(), x.astype("float32") / 2)
    assert (t == 1).dtype == "bool"
    np.testing.assert_array_equal((t >= 3).numpy(), x >= 3)


@pytest.mark.parametrize("dtype, value", [("uint8", 256), ("uint8", -1), ("int8", 128),
                                          ("int16", -40000)])
def test_a_scalar_the_dtype_cannot_hold_names_the_op_and_input(dtype, value):
    t = fastop.to_tensor([1, 2], dtype=dtype)
    with pytest.raises(OverflowError, match=rf"fastop::add: input 'y' is {value}, which "
                                            rf"does not fit the {dtype} the op computes in"):
        t + value


@pytest.mark.parametrize("other", ["int8", "int16", "int32", "int64", "uint8"])
def test_integer_tensors_of_different_dtypes_are_not_promoted(other):
    # Paddle promotes between float tensors only; an int8 and an int16 tensor is an error
    # that names the op and both inputs, not a silent widening
    a = fastop.to_tensor([1, 2], dtype="int8" if other != "int8" else "int16")
    b = fastop.to_tensor([3, 4], dtype=other)
    with pytest.raises(TypeError, match=r"fastop::add: x and y must have the same dtype.*"
                                        rf"x: shape \[2\] {a.dtype.name}, y: shape \[2\] "
                                        rf"{other}"):
        a + b
    assert (a + b.astype(a.dtype)).dtype == a.dtype    # an explicit cast works


@pytest.mark.parametrize("dtype", NARROW)
def test_reductions_follow_paddles_documented_dtypes(dtype):
    x = _sample(dtype)
    t = fastop.to_tensor(x)
    total = t.sum()                    # Paddle: bool and int32 sum to int64, others keep
    assert total.dtype == dtype
    assert total.numpy() == np.sum(x, dtype=dtype)
    wide = fastop.sum(t, axis=1, dtype="int64")
    assert wide.dtype == "int64"
    np.testing.assert_array_equal(wide.numpy(), x.astype("int64").sum(1))
    np.testing.assert_array_equal(fastop.max(t, axis=0).numpy(), x.max(0))
    np.testing.assert_array_equal(fastop.argmax(t, axis=1).numpy(), x.argmax(1))
    np.testing.assert_array_equal(fastop.argmin(t, axis=0).numpy(), x.argmin(0))
    assert int(fastop.argmin(t)) == x.argmin()


@pytest.mark.parametrize("op", ["min", "prod", "cumsum", "mean"])
def test_an_op_without_narrow_kernels_names_itself_the_input_and_its_dtypes(op):
    t = fastop.to_tensor([[1, 2], [3, 4]], dtype="int16")
    with pytest.raises(TypeError, match=rf"fastop::{op}: no kernel for dtype int16; "
                                        rf"kernels exist for \[.*\] \(the dtype of input "
                                        rf"'x'\)"):
        getattr(fastop, op)(t, axis=0)


@pytest.mark.parametrize("dtype", NARROW)
def test_indexing_and_shape_ops_keep_the_dtype(dtype):
    x = _sample(dtype)
    t = fastop.to_tensor(x)
    cases = ((t[1], x[1]), (t[:, 1:3], x[:, 1:3]), (t[0, -1], x[0, -1]),
             (t[fastop.to_tensor([1, 0])], x[[1, 0]]), (t.T, x.T),
             (t.reshape([4, 2]), x.reshape(4, 2)), (t.flatten(), x.ravel()),
             (fastop.concat([t, t]), np.concatenate([x, x])),
             (fastop.stack([t, t], axis=1), np.stack([x, x], 1)),
             (t.unsqueeze(0), x[None]), (fastop.gather(t, fastop.to_tensor([1]), axis=0),
                                         x[[1]]),
             (fastop.expand(t[0:1], [3, 4]), np.broadcast_to(x[0:1], (3, 4))))
    for got, want in cases:
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)
    t[0, 0] = 5
    assert t.numpy()[0, 0] == 5


def test_repr_prints_the_dtype_and_values():
    text = repr(fastop.to_tensor([-128, 127], dtype="int8"))
    assert "dtype=int8" in text and "[-128,  127]" in text
    assert "dtype=uint8" in repr(fastop.to_tensor([255], dtype="uint8"))


def test_save_and_load_round_trip(tmp_path):
    state = {d: fastop.to_tensor(_sample(d)) for d in NARROW}
    fastop.save(state, str(tmp_path / "narrow.pdparams"))
    loaded = fastop.load(str(tmp_path / "narrow.pdparams"))
    for d in NARROW:
        got = loaded[d]
        assert np.asarray(got).dtype == d
        np.testing.assert_array_equal(np.asarray(got), _sample(d))


def test_the_data_loader_collates_them_in_their_dtype():
    from fastop.io import DataLoader, TensorDataset
    images = np.arange(24, dtype="uint8").reshape(6, 4)
    labels = np.arange(6, dtype="int16")
    data = TensorDataset([fastop.to_tensor(images), fastop.to_tensor(labels)])
    batches = list(DataLoader(data, batch_size=4))
    assert [b.dtype for b in batches[0]] == ["uint8", "int16"]
    np.testing.assert_array_equal(batches[0][0].numpy(), images[:4])
    np.testing.assert_array_equal(batches[1][1].numpy(), labels[4:])


@pytest.mark.parametrize("dtype", NARROW)
def test_a_static_program_agrees_with_eager(run_static, dtype):
    x = _sample(dtype)
    y = x[::-1].copy()

    def fn(a, b):
        return [a + b, a * 3, (a - b).sum(axis=1), fastop.cast(a, "float32") * 0.5,
                fastop.concat([a, b]), a < b]

    eager = [o.numpy() for o in fn(fastop.to_tensor(x), fastop.to_tensor(y))]
    static = run_static(fn, x, y)
    for e, s in zip(eager, static):
        assert e.dtype == s.dtype
        np.testing.assert_array_equal(e, s)
    np.testing.assert_array_equal(eager[0], x + y)
