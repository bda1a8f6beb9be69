"""Datasets and hooks for the worker-process tests (importable by the workers)."""
import os
import threading
import time

import numpy as np

import fastop
from fastop.io import Dataset, IterableDataset, get_worker_info


class Squares(Dataset):
    """Sample i: (a rows x 4 float32 array of i, i*i). rows=8192 makes 128 KiB rows, so
    batches of them travel through shared memory."""

    def __init__(self, n, rows=2):
        self.n, self.rows = n, rows

    def __getitem__(self, i):
        return np.full((self.rows, 4), i, "float32"), i * i

    def __len__(self):
        return self.n


class Records(Dataset):
    def __getitem__(self, i):
        return {"x": np.arange(3.0) + i, "tag": f"t{i}", "pair": (i, np.int32(i))}

    def __len__(self):
        return 6


class Failing(Dataset):
    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"sample {i} is broken")
        return np.zeros(2), i

    def __len__(self):
        return self.n


class TwoArgError(Exception):
    """Cannot be rebuilt from its args alone (unpickling it fails)."""

    def __init__(self, code, detail):
        super().__init__(f"code {code}: {detail}")


class FailingOddly(Failing):
    def __getitem__(self, i):
        raise TwoArgError(7, "disk on fire")


class WorkerFacts(Dataset):
    """Sample i: i, this process's pid, the worker id, a numpy and a fastop random
    number, and the dataset's offset (set by offset_init)."""

    offset = 0

    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay

    def __getitem__(self, i):
        time.sleep(self.delay)
        info = get_worker_info()
        return (i, os.getpid(), -1 if info is None else info.id, np.random.rand(),
                float(fastop.rand([1]).numpy()[0]), self.offset)

    def __len__(self):
        return self.n


def offset_init(worker_id):
    get_worker_info().dataset.offset = 1000 * (worker_id + 1)


def failing_init(worker_id):
    raise RuntimeError(f"worker {worker_id} cannot start")


class SplitStream(IterableDataset):
    """0 .. n-1, each worker yielding its own stride of it."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield np.array([i], "int64")


class WholeStream(SplitStream):
    """Every worker yields all of 0 .. n-1 (the documented duplication)."""

    def __iter__(self):
        for i in range(self.n):
            yield np.array([i], "int64")


class WithLock(Dataset):
    def __init__(self):
        self.lock = threading.Lock()

    def __getitem__(self, i):
        return i

    def __len__(self):
        return 2


def collate_worker_info(samples):
    """A collate_fn reporting who collated: (worker id, num_workers, dataset class)."""
    info = get_worker_info()
    return info.id, info.num_workers, type(info.dataset).__name__


def collate_with_lock(samples):
    """A collate_fn whose batch cannot be pickled back to the main process."""
    return [np.stack([s[0] for s in samples]), threading.Lock()]


class Ragged(Dataset):
    """Sample i: an array of i + 1 values when i >= ragged_from, else of 1 value."""

    def __init__(self, n, ragged_from):
        self.n, self.ragged_from = n, ragged_from

    def __getitem__(self, i):
        return np.zeros(i + 1 if i >= self.ragged_from else 1, "float32")

    def __len__(self):
        return self.n
