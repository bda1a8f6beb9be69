"""The worker loop's protocol, run in a thread with plain queues: tasks, results,
iterable exhaustion and restart, errors with tracebacks, and stopping."""
import dataclasses
import pickle
import queue
import threading

import numpy as np
import pytest

from fastop.io import get_worker_info
from fastop.io import worker
from fastop.io.worker import RESET, STOP, Exhausted, WorkerError, worker_loop

from loader_datasets import (Failing, Squares, TwoArgError, WholeStream,
                             collate_worker_info, failing_init)


def _run_worker(dataset, messages, collate_fn=None, init_fn=None, auto_collate=True,
                drop_last=False, payload=None):
    tasks, results = queue.Queue(), queue.Queue()
    for m in [*messages, STOP]:
        tasks.put(m)
    if payload is None:
        payload = pickle.dumps((dataset, collate_fn, init_fn, auto_collate, drop_last))
    thread = threading.Thread(target=worker_loop,
                              args=(payload, tasks, results, 1, 3, 123, None))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    worker._worker_info = None            # the thread set the process-wide info
    out = []
    while not results.empty():
        task_id, data = results.get()
        out.append((task_id, pickle.loads(data)))
    return out


def test_tasks_come_back_with_their_ids():
    out = _run_worker(Squares(10), [(4, np.array([1, 2])), (5, np.array([9]))])
    assert [task_id for task_id, _ in out] == [4, 5]
    np.testing.assert_array_equal(out[0][1][1], [1, 4])
    assert out[0][1][0].shape == (2, 2, 4)


def test_an_iterable_dataset_reports_exhaustion_and_restarts_on_reset():
    out = _run_worker(WholeStream(3), [(0, 2), (1, 2), (2, 2), RESET, (3, 5)])
    assert [o[1].ravel().tolist() if isinstance(o[1], np.ndarray) else type(o[1])
            for o in out] == [[0, 1], [2], Exhausted, [0, 1, 2]]


def test_errors_carry_the_worker_and_traceback_and_the_loop_goes_on():
    out = _run_worker(Failing(4, bad=1), [(0, [1]), (1, [0])])
    error = out[0][1]
    assert isinstance(error, WorkerError) and error.worker_id == 1
    assert "Failing.__getitem__" in error.traceback or "__getitem__" in error.traceback
    assert not isinstance(out[1][1], WorkerError)
    with pytest.raises(ValueError, match="sample 1 is broken") as info:
        error.reraise()
    assert info.value.__notes__[0] == "DataLoader: raised by dataset[1] (sample index 1)"
    assert "DataLoader worker 1 (pid" in info.value.__notes__[1]
    assert "while loading sample indices [1]" in info.value.__notes__[1]


def test_an_unpicklable_exception_becomes_a_runtime_error():
    try:
        raise TwoArgError(3, "boom")
    except TwoArgError as exc:
        error = WorkerError(0, "while loading a batch", exc)
    assert error.exc_bytes is None
    with pytest.raises(RuntimeError, match="DataLoader worker 0 .* raised TwoArgError while "
                                           "loading a batch: code 3: boom"):
        error.reraise()


def test_init_failures_answer_every_task():
    out = _run_worker(Squares(3), [(0, [0]), (1, [1])], init_fn=failing_init)
    assert all(isinstance(r, WorkerError) and "worker_init_fn" in r.context for _, r in out)
    broken = _run_worker(None, [(0, [0])], payload=b"not a pickle")
    assert "while loading the dataset" in broken[0][1].context


def test_worker_info_is_set_inside_and_none_outside():
    out = _run_worker(Squares(3), [(0, [0])], collate_fn=collate_worker_info)
    assert out[0][1] == [1, 3, "Squares"]
    assert get_worker_info() is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        worker.WorkerInfo(0, 1, None, 0).id = 2


def test_seeding_differs_per_worker_and_repeats_per_base_seed():
    def draws(base, worker_id):
        worker._seed_generators(base, worker_id)
        import fastop
        return np.random.rand(), float(fastop.rand([1]).numpy()[0])
    assert draws(5, 0) == draws(5, 0)
    assert draws(5, 0) != draws(5, 1)
    assert draws(5, 0) != draws(6, 0)
