"""Loading data for training (PaddlePaddle's ``paddle.io``): datasets, samplers, batch
samplers and the ``DataLoader``, which yields batches as fastop Tensors.

>>> import numpy as np, fastop
>>> from fastop.io import DataLoader, TensorDataset
>>> ds = TensorDataset([np.zeros((6, 3), "float32"), np.arange(6)])
>>> for x, y in DataLoader(ds, batch_size=4, shuffle=True, drop_last=True):
...     print(x.shape, y.dtype)
[4, 3] int64

``import fastop`` does not import this package: ``fastop.io`` is loaded on first use,
and multiprocessing only when a loader starts worker processes.
"""
from fastop.io.batch_sampler import BatchSampler, DistributedBatchSampler
from fastop.io.collate import default_collate_fn, default_convert_fn
from fastop.io.dataloader import DataLoader
from fastop.io.dataset import (ChainDataset, ComposeDataset, ConcatDataset, Dataset,
                               IterableDataset, Subset, TensorDataset, random_split)
from fastop.io.sampler import (RandomSampler, Sampler, SequenceSampler, SubsetRandomSampler,
                               WeightedRandomSampler)
from fastop.io.worker import WorkerInfo, get_worker_info

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ComposeDataset", "ChainDataset",
           "ConcatDataset", "Subset", "random_split", "Sampler", "SequenceSampler",
           "RandomSampler", "WeightedRandomSampler", "SubsetRandomSampler", "BatchSampler",
           "DistributedBatchSampler", "DataLoader", "get_worker_info", "WorkerInfo",
           "default_collate_fn", "default_convert_fn"]
