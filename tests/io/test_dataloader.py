"""DataLoader in the main process: batches, their structure and dtypes, the TensorDataset
fast path, and bad arguments. (Worker processes: test_multiprocess.py.)"""
import subprocess
import sys

import numpy as np
import pytest

import fastop
from fastop.io import (BatchSampler, DataLoader, Dataset, DistributedBatchSampler,
                       IterableDataset, Subset, TensorDataset, random_split)


class Pairs(Dataset):
    """Sample i: (a 2-vector of i, the label i)."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return np.full(2, i, "float32"), i

    def __len__(self):
        return self.n


class Records(Dataset):
    def __getitem__(self, i):
        return {"x": np.array([i, i], "float64"), "name": f"r{i}", "meta": [i, i * 0.5]}

    def __len__(self):
        return 5


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield np.array([i], "int64"), float(i)


def _digits_like(n=37, features=5):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, features)).astype("float32"),
            rng.integers(0, 10, n).astype("int64"))


def test_tensor_dataset_batches_equal_numpy_indexing_of_the_sampler_order():
    x, y = _digits_like()
    loader = DataLoader(TensorDataset([x, y]), batch_size=8, shuffle=True)
    fastop.seed(7)
    batches = list(loader)
    fastop.seed(7)
    order = np.concatenate(list(BatchSampler(dataset=range(37), batch_size=8,
                                             shuffle=True)._index_batches()))
    assert [len(b[1].numpy()) for b in batches] == [8, 8, 8, 8, 5]
    got_x = np.concatenate([b[0].numpy() for b in batches])
    got_y = np.concatenate([b[1].numpy() for b in batches])
    np.testing.assert_array_equal(got_x, x[order])
    np.testing.assert_array_equal(got_y, y[order])
    assert sorted(order.tolist()) == list(range(37))
    assert all(isinstance(t, fastop.Tensor) for b in batches for t in b)
    assert batches[0][0].dtype == fastop.float32 and batches[0][1].dtype == fastop.int64


def test_tensor_dataset_is_batched_without_per_sample_getitem(monkeypatch):
    x, y = _digits_like()
    ds = TensorDataset([x, y])

    def per_sample(self, i):
        raise AssertionError("the fast path must not index samples one by one")
    monkeypatch.setattr(TensorDataset, "__getitem__", per_sample)
    assert sum(b[0].shape[0] for b in DataLoader(ds, batch_size=10)) == 37
    parts = random_split(ds, [20, 17])
    got = np.concatenate([b[1].numpy() for b in DataLoader(parts[1], batch_size=4)])
    np.testing.assert_array_equal(got, y[parts[1].indices])
    nested = Subset(Subset(ds, [5, 3, 1]), [2, 0])
    np.testing.assert_array_equal(next(iter(DataLoader(nested, batch_size=2)))[1].numpy(),
                                  y[[1, 5]])


def test_fast_path_equals_the_general_path():
    x, y = _digits_like()
    ds = TensorDataset([x, y])
    fast = list(DataLoader(ds, batch_size=6))

    def stack(samples):
        return [np.stack([s[0].numpy() for s in samples]),
                np.stack([s[1].numpy() for s in samples])]
    general = list(DataLoader(ds, batch_size=6, collate_fn=stack))
    for (fx, fy), (gx, gy) in zip(fast, general, strict=True):
        np.testing.assert_array_equal(fx.numpy(), gx.numpy())
        np.testing.assert_array_equal(fy.numpy(), gy.numpy())


def test_changing_a_batch_leaves_the_dataset_alone():
    x, y = _digits_like()
    before = x.copy()
    batch = next(iter(DataLoader(TensorDataset([x, y]), batch_size=4)))
    batch[0].set_value(np.zeros((4, 5), "float32"))
    view = next(iter(DataLoader(TensorDataset([x, y]), batch_size=4,
                                collate_fn=lambda samples: x[:4])))   # a view of x
    view.set_value(np.zeros((4, 5), "float32"))
    np.testing.assert_array_equal(x, before)


def test_sample_structure_is_kept():
    x, label = next(iter(DataLoader(Pairs(5), batch_size=3)))
    np.testing.assert_array_equal(x.numpy(), [[0, 0], [1, 1], [2, 2]])
    np.testing.assert_array_equal(label.numpy(), [0, 1, 2])
    batch = next(iter(DataLoader(Records(), batch_size=2)))
    assert set(batch) == {"x", "name", "meta"}
    assert batch["x"].dtype == fastop.float64 and batch["x"].shape == [2, 2]
    assert batch["name"] == ["r0", "r1"]
    assert [m.numpy().tolist() for m in batch["meta"]] == [[0, 1], [0.0, 0.5]]


def test_other_integer_dtypes_are_converted_like_to_tensor():
    ds = TensorDataset([np.zeros((4, 2), "uint16"), np.zeros(4, "float16"),
                        np.zeros(4, "uint8"), np.zeros(4, "int8"), np.zeros(4, "int16")])
    x, h, u, i8, i16 = next(iter(DataLoader(ds, batch_size=2)))
    assert x.dtype == fastop.int64                     # fastop has no uint16
    assert h.dtype == fastop.float16 and u.dtype == fastop.uint8
    assert i8.dtype == fastop.int8 and i16.dtype == fastop.int16


def test_drop_last_and_len():
    loader = DataLoader(Pairs(10), batch_size=4, drop_last=True)
    assert len(loader) == 2 == len(list(loader))
    assert len(DataLoader(Pairs(10), batch_size=4)) == 3


def test_batch_size_none_passes_samples_through():
    loader = DataLoader(Pairs(3), batch_size=None)
    assert len(loader) == 3
    x, label = list(loader)[2]
    assert x.shape == [2] and label == 2          # numbers are left as they are


def test_a_batch_sampler_decides_the_batches():
    loader = DataLoader(Pairs(10), batch_sampler=DistributedBatchSampler(
        Pairs(10), batch_size=2, num_replicas=2, rank=1))
    assert [b[1].numpy().tolist() for b in loader] == [[2, 3], [6, 7], [9]]
    custom = DataLoader(Pairs(10), batch_sampler=[[9, 1], [4]])
    assert [b[1].numpy().tolist() for b in custom] == [[9, 1], [4]]


def test_iterable_dataset_batches_and_drop_last():
    loader = DataLoader(Count(7), batch_size=3)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [[3, 1], [3, 1], [1, 1]]
    assert batches[0][1].dtype == fastop.float64
    assert len(list(DataLoader(Count(7), batch_size=3, drop_last=True))) == 2
    assert len(list(DataLoader(Count(2), batch_size=None))) == 2
    with pytest.raises(TypeError, match="IterableDataset has no length"):
        len(loader)


def test_return_list_false_feeds_variables_by_name():
    class Var:
        def __init__(self, name):
            self.name = name

    loader = DataLoader(Pairs(4), feed_list=[Var("image"), "label"], return_list=False,
                        batch_size=2)
    feed = next(iter(loader))
    assert set(feed) == {"image", "label"} and feed["image"].shape == [2, 2]
    with pytest.raises(ValueError, match="the batch has 2 fields but feed_list has 1"):
        next(iter(DataLoader(Pairs(4), feed_list=["a"], return_list=False)))


def test_a_loader_is_iterable_again_and_callable():
    loader = DataLoader(Pairs(4), batch_size=2)
    assert len(list(loader)) == len(list(loader())) == 2


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be a positive integer"),
    ({"num_workers": -1}, ValueError, "num_workers must be a non-negative integer"),
    ({"prefetch_factor": 0}, ValueError, "prefetch_factor must be a positive"),
    ({"timeout": -1}, ValueError, "timeout must be a non-negative number"),
    ({"shuffle": 1}, TypeError, "shuffle must be a bool"),
    ({"places": "gpu:0"}, ValueError, "places must be CPU places"),
    ({"places": [fastop.CPUPlace(), "cuda"]}, ValueError, "got 'cuda'"),
    ({"return_list": False}, ValueError, "return_list=False needs feed_list"),
    ({"collate_fn": 3}, TypeError, "collate_fn must be callable"),
    ({"batch_sampler": [[0]], "batch_size": 2}, ValueError,
     "must keep their defaults when a batch_sampler is given"),
])
def test_bad_arguments_are_refused(kwargs, error, message):
    with pytest.raises(error, match=f"DataLoader: .*{message}"):
        DataLoader(Pairs(4), **kwargs)


def test_cpu_places_are_accepted():
    for places in (None, "cpu", fastop.CPUPlace(), [fastop.CPUPlace()]):
        DataLoader(Pairs(2), places=places)


def test_datasets_that_cannot_be_loaded_are_refused():
    with pytest.raises(TypeError, match="must be a map-style dataset"):
        DataLoader(42)
    with pytest.raises(ValueError, match="cannot be shuffled"):
        DataLoader(Count(3), shuffle=True)
    with pytest.raises(ValueError, match="takes no batch_sampler"):
        DataLoader(Count(3), batch_sampler=[[0]])


def test_import_fastop_loads_neither_io_nor_multiprocessing():
    code = ("import sys, fastop; "
            "print(sorted(m for m in ('fastop.io', 'fastop.metric', 'fastop.optimizer.lr', "
            "'multiprocessing') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    code = ("import sys, fastop; fastop.io.DataLoader; fastop.metric.Accuracy; "
            "fastop.optimizer.lr.StepDecay; print('multiprocessing' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


class RaggedFrom(Dataset):
    """Sample i: one value, or i + 1 values from sample 5 on (batch 2 of size 2 is
    ragged); sample 7 raises."""

    def __getitem__(self, i):
        if i == 7:
            raise KeyError(f"no sample {i}")
        return np.zeros(i + 1 if i >= 5 else 1, "float32")

    def __len__(self):
        return 8


def test_errors_name_the_batch_and_the_sample_in_the_main_process():
    with pytest.raises(ValueError, match=r"shapes \[\[1\], \[6\]\]") as info:
        list(DataLoader(RaggedFrom(), batch_size=2))
    assert "DataLoader: while loading batch 2 (sample indices [4, 5])" in info.value.__notes__
    with pytest.raises(KeyError, match="no sample 7") as info:
        list(DataLoader(RaggedFrom(), batch_size=None))
    assert info.value.__notes__ == ["DataLoader: raised by dataset[7] (sample index 7)",
                                    "DataLoader: while loading batch 7 (sample index 7)"]
