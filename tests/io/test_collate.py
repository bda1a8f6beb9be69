"""default_collate_fn / default_convert_fn: batches keep the samples' structure."""
import numpy as np
import pytest

import fastop
from fastop.io import default_collate_fn, default_convert_fn


def test_arrays_are_stacked_along_a_new_first_axis():
    out = default_collate_fn([np.zeros((2, 3)), np.ones((2, 3))])
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[1], 1)


def test_numbers_become_an_array_with_numpys_dtype():
    assert default_collate_fn([1, 2, 3]).dtype == np.int64
    assert default_collate_fn([1.5, 2.0]).dtype == np.float64
    assert default_collate_fn([True, False]).dtype == np.bool_


def test_nested_structures_are_collated_field_by_field():
    batch = default_collate_fn([
        {"image": np.zeros(4, "float32"), "meta": (1, "a")},
        {"image": np.ones(4, "float32"), "meta": (2, "b")},
    ])
    assert set(batch) == {"image", "meta"}
    assert batch["image"].shape == (2, 4)
    ids, names = batch["meta"]
    np.testing.assert_array_equal(ids, [1, 2])
    assert names == ["a", "b"]


def test_tuples_come_back_as_lists():
    out = default_collate_fn([(np.zeros(1), 0), (np.ones(1), 1)])
    assert isinstance(out, list) and len(out) == 2


def test_tensors_are_stacked_into_a_tensor():
    out = default_collate_fn([fastop.to_tensor([1.0, 2.0]), fastop.to_tensor([3.0, 4.0])])
    assert isinstance(out, fastop.Tensor) and out.shape == [2, 2]
    np.testing.assert_array_equal(out.numpy(), [[1, 2], [3, 4]])


def test_bad_batches_are_explained():
    with pytest.raises(ValueError, match=r"one shape to be stacked.*\[\[2\], \[3\]\]"):
        default_collate_fn([np.zeros(2), np.zeros(3)])
    with pytest.raises(RuntimeError, match=r"same number of fields, got \[1, 2\]"):
        default_collate_fn([(1,), (1, 2)])
    with pytest.raises(TypeError, match="got object"):
        default_collate_fn([object(), object()])
    with pytest.raises(ValueError, match="the batch is empty"):
        default_collate_fn([])


def test_convert_walks_containers_and_keeps_leaves():
    arr = np.zeros(3)
    out = default_convert_fn({"a": (arr, 1), "b": "text"})
    assert out["a"][0] is arr and out["a"][1] == 1 and out["b"] == "text"
    assert isinstance(out["a"], list)
