"""Fetchers and batch conversion: the TensorDataset shortcut (through Subsets), and
which arrays become Tensors with or without a copy."""
import numpy as np
import pytest

import fastop
from fastop.io import Dataset, Subset, TensorDataset
from fastop.io._fetch import (IterableFetcher, MapFetcher, batch_tensor, converter_for,
                              direct_fields, map_leaves, tensor_of_fresh_array)


def test_direct_fields_compose_subset_indices():
    x = np.arange(10) * 10
    ds = TensorDataset([x])
    arrays, index_map = direct_fields(Subset(Subset(ds, [9, 7, 5, 3]), [3, 1]))
    assert arrays[0] is ds._arrays[0]
    np.testing.assert_array_equal(x[index_map], [30, 70])
    assert direct_fields(ds)[1] is None


def test_direct_fields_skip_other_datasets_and_subclasses():
    class Shifted(TensorDataset):
        def __getitem__(self, i):
            return super().__getitem__(i + 1)
    assert direct_fields(Shifted([np.arange(3)])) is None
    assert direct_fields(Subset(range(5), [1])) is None


def test_map_fetcher_gives_python_ints_to_a_dataset():
    seen = []

    class Record(Dataset):
        def __getitem__(self, i):
            seen.append(type(i))
            return i

        def __len__(self):
            return 3
    MapFetcher(Record(), True, None).fetch(np.array([0, 2]))
    assert seen == [int, int]


def test_iterable_fetcher_stops_on_exhaustion_and_short_batches_when_dropping():
    fetcher = IterableFetcher(range(5), True, None, drop_last=True)
    assert fetcher.fetch(2).tolist() == [0, 1]
    assert fetcher.fetch(2).tolist() == [2, 3]
    with pytest.raises(StopIteration):
        fetcher.fetch(2)


def test_fresh_arrays_are_shared_and_other_dtypes_converted():
    a = np.arange(4, dtype="float32")
    t = tensor_of_fresh_array(a)
    a[0] = 9
    assert t.numpy()[0] == 9                               # no copy
    assert tensor_of_fresh_array(np.zeros(2, "uint16")).dtype == fastop.int64
    assert tensor_of_fresh_array(np.zeros(2, "int16")).dtype == fastop.int16
    u = np.zeros(2, "uint8")
    assert tensor_of_fresh_array(u).dtype == fastop.uint8
    u[0] = 7
    assert tensor_of_fresh_array(u).numpy()[0] == 7         # uint8 is fastop's: shared
    text = np.array(["a", "b"])
    assert tensor_of_fresh_array(text) is text
    assert converter_for(np.dtype("float64")) is converter_for(np.dtype("float32"))


def test_views_of_other_memory_are_copied():
    base = np.zeros((3, 2), "float32")
    t = batch_tensor(base[1:])
    base[1, 0] = 5
    assert t.numpy()[0, 0] == 0
    fresh = np.zeros(2, "int64")
    fresh_t = batch_tensor(fresh)
    fresh[0] = 3
    assert fresh_t.numpy()[0] == 3


def test_map_leaves_keeps_dicts_and_makes_lists():
    out = map_leaves({"a": (1, [2, {"b": 3}])}, lambda v: v * 10)
    assert out == {"a": [10, [20, {"b": 30}]]}
