"""fastop.io's shared argument checks: the message names owner, argument and value."""
import numpy as np
import pytest

from fastop.io._checks import check_bool, check_int, check_sized


def test_check_bool_accepts_numpy_bools_only_as_bools():
    assert check_bool("Owner", "flag", np.bool_(True)) is True
    with pytest.raises(TypeError, match="Owner: flag must be a bool, got int 1"):
        check_bool("Owner", "flag", 1)


@pytest.mark.parametrize("value, minimum, message", [
    (0, 1, "must be a positive integer, got 0"),
    (-1, 0, "must be a non-negative integer, got -1"),
    (True, 0, "got True"),
    (2.0, 1, "got 2.0"),
    (1, 2, "must be an integer >= 2, got 1"),
])
def test_check_int_refuses(value, minimum, message):
    with pytest.raises(ValueError, match=f"Owner: n .*{message}"):
        check_int("Owner", "n", value, minimum)


def test_check_int_and_sized_return_plain_values():
    assert type(check_int("Owner", "n", np.int64(3))) is int
    assert check_sized("Owner", "data", range(4)) == 4
    with pytest.raises(TypeError, match="Owner: data must have a length .* got generator"):
        check_sized("Owner", "data", (i for i in range(3)))


def test_argument_errors_are_also_assertion_errors_as_paddle_asserts():
    """PaddlePaddle checks these arguments with assert: code catching AssertionError
    (Paddle's) and code catching TypeError/ValueError (fastop's) both catch them."""
    from fastop.io import (BatchSampler, ChainDataset, ComposeDataset, DataLoader,
                           DistributedBatchSampler, IterableDataset, SequenceSampler,
                           TensorDataset)

    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(3)

    cases = [
        (lambda: BatchSampler(), ValueError),
        (lambda: BatchSampler(sampler=SequenceSampler(range(4)), shuffle=True), ValueError),
        (lambda: BatchSampler(dataset=range(4), sampler=range(4)), ValueError),
        (lambda: BatchSampler(dataset=Stream()), TypeError),
        (lambda: BatchSampler(dataset=range(4), batch_size=0), ValueError),
        (lambda: BatchSampler(dataset=range(4), drop_last=1), TypeError),
        (lambda: DistributedBatchSampler(range(4), batch_size=-1), ValueError),
        (lambda: DistributedBatchSampler(range(4), 2, num_replicas=0, rank=0), ValueError),
        (lambda: DistributedBatchSampler(range(4), 2, shuffle="no"), TypeError),
        (lambda: TensorDataset([np.zeros(3), np.zeros(4)]), ValueError),
        (lambda: ComposeDataset([]), ValueError),
        (lambda: ComposeDataset([range(3), range(4)]), ValueError),
        (lambda: ChainDataset([range(3)]), TypeError),
        (lambda: DataLoader(range(4), num_workers=-1), ValueError),
        (lambda: DataLoader(range(4), timeout=-1), ValueError),
        (lambda: DataLoader(range(4), batch_sampler=BatchSampler(range(4)), shuffle=True),
         ValueError),
    ]
    for make, error in cases:
        for caught in (error, AssertionError):
            with pytest.raises(caught):
                make()


def test_an_iterable_dataset_has_no_length_nor_items_as_paddle_says():
    """len() and [i] of an IterableDataset: RuntimeError (PaddlePaddle's type) and
    TypeError (so list(ds) still works: it asks len() and takes TypeError as none)."""
    from fastop.io import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(3)

    for caught in (RuntimeError, TypeError):
        with pytest.raises(caught, match="Stream is an IterableDataset: it has no length"):
            len(Stream())
        with pytest.raises(caught, match="no __getitem__"):
            Stream()[0]
    assert list(Stream()) == [0, 1, 2]
