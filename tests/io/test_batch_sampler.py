"""Batch samplers: batches cover the data exactly as specified, on every simulated rank."""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastop
from fastop import _job
from fastop.io import (BatchSampler, DistributedBatchSampler, IterableDataset,
                       RandomSampler, SequenceSampler)
from fastop.io.batch_sampler import index_batches


@given(n=st.integers(0, 200), batch_size=st.integers(1, 40), drop_last=st.booleans())
def test_batches_cover_the_dataset_in_order(n, batch_size, drop_last):
    sampler = BatchSampler(dataset=range(n), batch_size=batch_size, drop_last=drop_last)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    flat = [i for b in batches for i in b]
    kept = n - n % batch_size if drop_last else n
    assert flat == list(range(kept))
    assert all(len(b) == batch_size for b in batches[:-1])


@given(n=st.integers(1, 200), batch_size=st.integers(1, 40))
def test_shuffled_batches_cover_every_index_once(n, batch_size):
    batches = list(BatchSampler(dataset=range(n), batch_size=batch_size, shuffle=True))
    assert sorted(i for b in batches for i in b) == list(range(n))


def test_index_batches_are_int64_arrays_matching_the_lists():
    fastop.seed(2)
    arrays = list(index_batches(BatchSampler(dataset=range(10), batch_size=4, shuffle=True)))
    fastop.seed(2)
    lists = list(BatchSampler(dataset=range(10), batch_size=4, shuffle=True))
    assert all(isinstance(a, np.ndarray) and a.dtype == np.int64 for a in arrays)
    assert [a.tolist() for a in arrays] == lists


def test_batch_sampler_over_any_iterable_keeps_its_items():
    sampler = BatchSampler(sampler=["a", "b", "c"], batch_size=2)
    assert list(sampler) == [["a", "b"], ["c"]]
    assert list(BatchSampler(sampler=iter(range(5)), batch_size=2, drop_last=True)) == \
        [[0, 1], [2, 3]]


def test_index_batches_iterates_a_subclass_that_overrides_iter():
    class Pairs(BatchSampler):
        def __iter__(self):
            yield [1, 0]

    assert list(index_batches(Pairs(dataset=range(2)))) == [[1, 0]]
    assert list(index_batches([[3], [4]])) == [[3], [4]]


def test_batch_sampler_uses_the_given_sampler_order():
    sampler = BatchSampler(sampler=RandomSampler(range(6), generator=iter([5, 4, 3, 2, 1, 0])),
                           batch_size=4)
    assert list(sampler) == [[5, 4, 3, 2], [1, 0]]


class _Stream(IterableDataset):
    def __iter__(self):
        yield from range(3)


@pytest.mark.parametrize("kwargs, error, message", [
    ({}, ValueError, "either dataset or sampler"),
    ({"dataset": range(3), "sampler": SequenceSampler(range(3))}, ValueError, "not both"),
    ({"sampler": SequenceSampler(range(3)), "shuffle": True}, ValueError,
     "shuffle must be False"),
    ({"dataset": _Stream()}, TypeError, "must be map-style"),
    ({"dataset": range(3), "batch_size": 0}, ValueError, "batch_size must be a positive"),
    ({"dataset": range(3), "drop_last": "yes"}, TypeError, "drop_last must be a bool"),
    ({"sampler": 3}, TypeError, "sampler must be a Sampler or an iterable"),
])
def test_batch_sampler_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        BatchSampler(**kwargs)


# ---------------------------------------------------------------- DistributedBatchSampler

def _reference_rank_batches(n, batch_size, world, rank, shuffle, epoch, drop_last):
    """Paddle's documented rules written out plainly: pad by repeating from the start,
    shuffle with RandomState(epoch), deal batch_size per rank in rounds, split the last
    partial round evenly, batch, drop the last short batch if asked."""
    per_rank = math.ceil(n / world)
    total = per_rank * world
    indices = list(range(n))
    while len(indices) < total:
        indices += list(range(n))[:total - len(indices)]
    if shuffle:
        np.random.RandomState(epoch).shuffle(indices)
    mine = []
    round_size = batch_size * world
    full_rounds = total // round_size
    for r in range(full_rounds):
        start = r * round_size + rank * batch_size
        mine += indices[start:start + batch_size]
    rest = indices[full_rounds * round_size:]
    share = len(rest) // world
    mine += rest[rank * share:(rank + 1) * share]
    batches = [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def _all_ranks(n, batch_size, world, **kwargs):
    return [list(DistributedBatchSampler(range(n), batch_size, num_replicas=world, rank=r,
                                         **kwargs)) for r in range(world)]


@given(n=st.integers(1, 150), batch_size=st.integers(1, 17), world=st.integers(1, 8),
       drop_last=st.booleans(), shuffle=st.booleans(), epoch=st.integers(0, 5))
def test_ranks_cover_the_padded_dataset_once_with_equal_batch_counts(
        n, batch_size, world, drop_last, shuffle, epoch):
    ranks = []
    for r in range(world):
        s = DistributedBatchSampler(range(n), batch_size, num_replicas=world, rank=r,
                                    shuffle=shuffle, drop_last=drop_last)
        s.set_epoch(epoch)
        ranks.append(list(s))
        assert len(ranks[-1]) == len(s)
        assert ranks[-1] == _reference_rank_batches(n, batch_size, world, r, shuffle, epoch,
                                                     drop_last)
    assert len({len(batches) for batches in ranks}) == 1       # same number on every rank
    for batches in ranks:
        assert all(len(b) == batch_size for b in batches[:-1])
        if drop_last:
            assert all(len(b) == batch_size for b in batches)
    seen = Counter(i for batches in ranks for b in batches for i in b)
    padded = Counter(np.resize(np.arange(n), math.ceil(n / world) * world).tolist())
    if drop_last:
        assert not seen - padded                # nothing beyond the padded epoch
        per_rank = math.ceil(n / world)
        assert sum(seen.values()) == world * (per_rank - per_rank % batch_size)
    else:
        assert seen == padded                   # every sample, padding as Paddle pads
        assert set(seen) == set(range(n))


@given(n=st.integers(1, 60), batch_size=st.integers(1, 9), world=st.integers(1, 6))
def test_shards_are_disjoint_when_no_padding_is_needed(n, batch_size, world):
    n = n * world
    shards = [{i for b in batches for i in b} for batches in _all_ranks(n, batch_size, world,
                                                                          shuffle=True)]
    assert sum(len(s) for s in shards) == n
    assert set().union(*shards) == set(range(n))


def test_shuffle_is_deterministic_per_epoch_and_advances_by_itself():
    a = DistributedBatchSampler(range(100), 10, num_replicas=2, rank=0, shuffle=True)
    b = DistributedBatchSampler(range(100), 10, num_replicas=2, rank=0, shuffle=True)
    first = list(a)
    assert first == list(b)                  # ranks agree without communication
    assert a.epoch == 1
    second = list(a)
    assert second != first
    a.set_epoch(0)
    assert list(a) == first


def test_without_shuffle_the_epoch_does_not_move():
    s = DistributedBatchSampler(range(10), 3, num_replicas=2, rank=1)
    assert list(s) == list(s) == [[3, 4, 5], [8, 9]]
    assert s.epoch == 0


def _fake_process_group(monkeypatch, world, rank):
    """What fastop.distributed installs in fastop._job, answering (world, rank)."""
    monkeypatch.setattr(_job, "_size_and_rank", lambda: (world, rank))


def test_world_and_rank_come_from_an_initialised_fastop_distributed(monkeypatch):
    _fake_process_group(monkeypatch, 4, 3)
    s = DistributedBatchSampler(range(8), 1)
    assert (s.nranks, s.local_rank) == (4, 3)
    assert list(s) == [[3], [7]]
    assert DistributedBatchSampler(range(8), 1, rank=0).nranks == 4


def test_world_is_one_when_distributed_is_not_initialised_or_absent(monkeypatch):
    import fastop.distributed as dist
    assert _job._size_and_rank is dist._size_and_rank  # installed on import
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    s = DistributedBatchSampler(range(8), 1)           # installed, not initialised
    assert (s.nranks, s.local_rank) == (1, 0)
    monkeypatch.setattr(_job, "_size_and_rank", None)  # never imported
    s = DistributedBatchSampler(range(8), 1)
    assert (s.nranks, s.local_rank) == (1, 0)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be a positive integer"),
    ({"num_replicas": 0, "rank": 0}, ValueError, "num_replicas must be a positive"),
    ({"num_replicas": 2, "rank": 2}, ValueError, r"rank must be in \[0, num_replicas=2\)"),
    ({"num_replicas": 2, "rank": -1}, ValueError, "rank must be"),
    ({"shuffle": None}, TypeError, "shuffle must be a bool"),
])
def test_distributed_sampler_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=f"DistributedBatchSampler: {message}"):
        DistributedBatchSampler(range(4), **{"batch_size": 2, **kwargs})


def test_distributed_sampler_needs_a_sized_dataset_and_a_valid_epoch():
    with pytest.raises(TypeError, match="dataset must have a length"):
        DistributedBatchSampler(iter(range(3)), 2)
    with pytest.raises(ValueError, match="epoch must be a non-negative integer"):
        DistributedBatchSampler(range(3), 2).set_epoch(-1)
