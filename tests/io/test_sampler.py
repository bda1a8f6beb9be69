"""Samplers: each epoch's indices (order, coverage, reproducibility) and bad input."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastop
from fastop.io import (RandomSampler, Sampler, SequenceSampler, SubsetRandomSampler,
                       WeightedRandomSampler)
from fastop.io.sampler import epoch_indices


def test_sequence_sampler_yields_every_index_in_order_as_python_ints():
    sampler = SequenceSampler(range(5))
    assert list(sampler) == [0, 1, 2, 3, 4]
    assert all(type(i) is int for i in sampler)
    assert len(sampler) == 5


@given(st.integers(1, 300))
def test_random_sampler_is_a_permutation(n):
    assert sorted(RandomSampler(range(n))) == list(range(n))


def test_random_sampler_reshuffles_every_epoch_and_follows_fastop_seed():
    fastop.seed(3)
    sampler = RandomSampler(range(50))
    first, second = list(sampler), list(sampler)
    assert first != second
    fastop.seed(3)
    assert list(sampler) == first


def test_random_sampler_num_samples_and_replacement():
    fastop.seed(0)
    assert len(list(RandomSampler(range(10), num_samples=4))) == 4
    assert len(set(RandomSampler(range(10), num_samples=10))) == 10
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=200))
    assert len(drawn) == 200 and set(drawn) == {0, 1, 2}   # repeats: with replacement
    assert len(RandomSampler(range(3), replacement=True, num_samples=7)) == 7


def test_random_sampler_takes_indices_from_a_generator_iterator_as_paddle():
    sampler = RandomSampler(range(10), num_samples=3, generator=iter([9, 4, 7, 1, 2]))
    assert list(sampler) == [9, 4, 7]
    short = RandomSampler(range(10), num_samples=5, generator=iter([1, 2]))
    assert list(short) == [1, 2]


def test_random_sampler_draws_from_a_given_numpy_generator():
    a = list(RandomSampler(range(20), generator=np.random.default_rng(5)))
    b = list(RandomSampler(range(20), generator=np.random.default_rng(5)))
    assert a == b == np.random.default_rng(5).permutation(20).tolist()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_samples": 11}, ValueError, "must not exceed the data source's length"),
    ({"num_samples": 0}, ValueError, "num_samples must be a positive integer"),
    ({"replacement": 1}, TypeError, "replacement must be a bool"),
])
def test_random_sampler_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        RandomSampler(range(10), **kwargs)


def test_random_sampler_rejects_an_empty_or_unsized_source():
    with pytest.raises(ValueError, match="data source is empty"):
        RandomSampler([])
    with pytest.raises(TypeError, match="RandomSampler: data_source must have a length"):
        RandomSampler(iter([1, 2]))


def test_weighted_sampler_never_draws_zero_weights_and_follows_the_weights():
    fastop.seed(1)
    drawn = np.array(list(WeightedRandomSampler([0.0, 1.0, 3.0, 0.0], num_samples=4000)))
    assert set(drawn.tolist()) == {1, 2}
    assert abs(np.mean(drawn == 2) - 0.75) < 0.03


def test_weighted_sampler_without_replacement_draws_distinct_indices():
    fastop.seed(0)
    drawn = list(WeightedRandomSampler([1, 1, 1, 1, 0], num_samples=4, replacement=False))
    assert sorted(drawn) == [0, 1, 2, 3]


@pytest.mark.parametrize("weights, kwargs, message", [
    ([0.0, 0.0], {}, "at least one weight must be positive"),
    ([1.0, -1.0], {}, "finite and non-negative"),
    ([1.0, 0.0], {"replacement": False, "num_samples": 2}, "must not exceed the number"),
])
def test_weighted_sampler_checks_the_weights_when_sampling(weights, kwargs, message):
    """As PaddlePaddle: made without complaint, refused when iterated, with an error
    that is a ValueError and (Paddle's type) an AssertionError."""
    sampler = WeightedRandomSampler(weights, **{"num_samples": 1, **kwargs})
    for error in (ValueError, AssertionError):
        with pytest.raises(error, match=message):
            list(sampler)


def test_weighted_sampler_refuses_bad_shapes_and_arguments_when_made():
    with pytest.raises(ValueError, match="non-empty 1-D"):
        WeightedRandomSampler([[1.0]], num_samples=1)
    with pytest.raises(ValueError, match="num_samples must be a positive integer, got 2.3"):
        WeightedRandomSampler([1.0], num_samples=2.3)
    # Paddle's type for a non-bool replacement here is ValueError (RandomSampler's: TypeError)
    with pytest.raises(ValueError, match="replacement must be a bool, got int 5"):
        WeightedRandomSampler([1.0], num_samples=1, replacement=5)


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=50))
def test_subset_random_sampler_permutes_the_given_indices(indices):
    sampler = SubsetRandomSampler(indices)
    assert sorted(sampler) == sorted(indices)
    assert len(sampler) == len(indices)


def test_subset_random_sampler_rejects_no_indices():
    with pytest.raises(ValueError, match="indices must not be empty"):
        SubsetRandomSampler([])


def test_epoch_indices_respects_a_subclass_that_overrides_iter():
    class Reversed(SequenceSampler):
        def __iter__(self):
            return iter(range(len(self.data_source) - 1, -1, -1))

    assert epoch_indices(Reversed(range(3))) is None
    assert epoch_indices(SequenceSampler(range(3))).tolist() == [0, 1, 2]
    assert epoch_indices([0, 1, 2]) is None


def test_base_sampler_requires_iter():
    with pytest.raises(NotImplementedError, match="must define __iter__"):
        iter(Sampler(range(3)))
