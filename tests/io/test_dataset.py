"""Datasets: indexing, lengths, composition, splits, and bad input."""
import numpy as np
import pytest

import fastop
from fastop.io import (ChainDataset, ComposeDataset, ConcatDataset, Dataset,
                       IterableDataset, Subset, TensorDataset, random_split)


class Range(Dataset):
    def __init__(self, start, stop):
        self.start, self.stop = start, stop

    def __getitem__(self, idx):
        return idx + self.start

    def __len__(self):
        return self.stop - self.start


class Stream(IterableDataset):
    def __init__(self, values):
        self.values = values

    def __iter__(self):
        yield from self.values


def test_tensor_dataset_samples_are_tensor_rows():
    x = fastop.to_tensor(np.arange(12.0, dtype="float32").reshape(4, 3))
    ds = TensorDataset([x, np.array([5, 6, 7, 8])])
    assert len(ds) == 4
    row, label = ds[2]
    assert isinstance(row, fastop.Tensor) and isinstance(label, fastop.Tensor)
    np.testing.assert_array_equal(row.numpy(), [6.0, 7.0, 8.0])
    assert label.item() == 7


def test_tensor_dataset_sample_is_a_copy():
    data = np.zeros((3, 2), "float32")
    row, = TensorDataset([data])[0]
    row.set_value(np.ones(2, "float32"))
    assert data.sum() == 0


@pytest.mark.parametrize("tensors, error, message", [
    ([np.zeros((3, 2)), np.zeros(4)], ValueError, r"same first dimension.*\[3, 4\]"),
    ([np.float32(1.0)], ValueError, r"tensors\[0\] is a scalar"),
    ([], TypeError, "non-empty list or tuple"),
    (np.zeros((3, 2)), TypeError, "non-empty list or tuple"),
])
def test_tensor_dataset_rejects_bad_tensors(tensors, error, message):
    with pytest.raises(error, match=f"TensorDataset: .*{message}"):
        TensorDataset(tensors)


def test_base_classes_name_what_is_missing():
    with pytest.raises(NotImplementedError, match="must define __getitem__"):
        Dataset()[0]
    with pytest.raises(NotImplementedError, match="must define __len__"):
        len(Dataset())
    with pytest.raises(TypeError, match="Stream is an IterableDataset: it has no length"):
        len(Stream([]))
    with pytest.raises(TypeError, match="no __getitem__"):
        Stream([])[0]


def test_compose_dataset_concatenates_fields():
    ds = ComposeDataset([TensorDataset([np.arange(3), np.arange(3) * 10]), Range(0, 3)])
    fields = ds[1]
    assert len(ds) == 3 and len(fields) == 3
    assert [int(fields[0].item()), int(fields[1].item()), fields[2]] == [1, 10, 1]
    with pytest.raises(ValueError, match="one length"):
        ComposeDataset([Range(0, 3), Range(0, 4)])
    with pytest.raises(TypeError, match="datasets\\[0\\] is an IterableDataset"):
        ComposeDataset([Stream([1])])


def test_chain_dataset_iterates_one_after_the_other():
    assert list(ChainDataset([Stream([1, 2]), Stream([3])])) == [1, 2, 3]
    with pytest.raises(TypeError, match="must be an IterableDataset"):
        ChainDataset([Range(0, 2)])


def test_concat_dataset_indexes_across_parts():
    ds = ConcatDataset([Range(0, 2), Range(10, 13)])
    assert len(ds) == 5
    assert [ds[i] for i in range(5)] == [0, 1, 10, 11, 12]
    assert ds[-1] == 12 and ds[-5] == 0
    with pytest.raises(IndexError, match="index 5 is out of range for 5 samples"):
        ds[5]
    with pytest.raises(IndexError, match="out of range"):
        ds[-6]


def test_subset_reads_the_given_indices_with_repeats():
    assert list(Subset(Range(1, 4), [0, 2])) == [1, 3]
    assert list(Subset(Range(1, 4), [1, 1])) == [2, 2]


def test_random_split_by_counts_partitions_and_follows_the_seed():
    fastop.seed(4)
    parts = random_split(Range(0, 10), [3, 7])
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    fastop.seed(4)
    assert [list(p) for p in random_split(Range(0, 10), [3, 7])] == [list(p) for p in parts]


def test_random_split_by_fractions_spreads_the_remainder_from_the_first():
    parts = random_split(Range(0, 10), [0.35, 0.35, 0.3])
    assert [len(p) for p in parts] == [4, 3, 3]
    with pytest.warns(UserWarning, match="split 1 is empty"):
        random_split(Range(0, 2), [1.0, 0.0])


@pytest.mark.parametrize("lengths, message", [
    ([3, 3], "must be non-negative and sum to the dataset's length 10"),
    ([11, -1], "must be non-negative"),
    ([1.5, -0.5], "is not between 0 and 1"),
])
def test_random_split_rejects_bad_lengths(lengths, message):
    with pytest.raises(ValueError, match=message):
        random_split(Range(0, 10), lengths)
