"""DataLoader worker processes: what runs inside one, and what it tells the main
process (PaddlePaddle's ``paddle.io.get_worker_info``).

A worker receives the dataset, collate_fn and worker_init_fn pickled once by the main
process, seeds Python's, numpy's and fastop's generators from the loader's base seed
plus its id, then loads the batches the main process asks for until it is told to stop
(or its parent has died). Each result goes back with its task id, so the main process
restores the order; an exception goes back with the worker's traceback.

A result is pickled here, before it is queued: a batch that cannot be pickled (one that
holds a lock, say) becomes a :class:`WorkerError` the main process raises, where the
queue's feeder thread would only print the error and the main process would wait for
that batch forever.
"""
from __future__ import annotations

import os
import pickle
import queue
import random
import traceback
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerInfo", "get_worker_info"]

# How often an idle worker checks that the main process is still alive (seconds).
_PARENT_POLL = 1.0

# Control messages on a worker's index queue (besides (task id, task) pairs).
RESET = "reset"       # restart the iteration of an iterable dataset (a new epoch)
STOP = None           # finish and exit


class Exhausted:
    """Sent back for a task when the worker's iterable dataset has no more batches."""


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker process knows about itself: ``id`` (0 .. num_workers - 1),
    ``num_workers``, its copy of the ``dataset`` and the ``seed`` its generators were
    seeded with."""

    id: int
    num_workers: int
    dataset: Any
    seed: int


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its :class:`WorkerInfo`; None in the main
    process. An IterableDataset uses it to give each worker its own part of the stream.

    >>> get_worker_info() is None
    True
    """
    return _worker_info


class WorkerError:
    """An exception raised in a worker, as it travels to the main process: the
    exception itself when it can be pickled, else its type name and message, plus the
    worker's formatted traceback."""

    def __init__(self, worker_id: int, context: str, exc: BaseException) -> None:
        self.worker_id = worker_id
        self.pid = os.getpid()
        self.context = context
        self.type_name = type(exc).__qualname__
        self.message = str(exc)
        self.traceback = "".join(traceback.format_exception(type(exc), exc,
                                                            exc.__traceback__))
        try:
            self.exc_bytes: bytes | None = pickle.dumps(exc)
            pickle.loads(self.exc_bytes)
        except Exception:
            self.exc_bytes = None

    def reraise(self, batch: int | None = None) -> None:
        """Raise the worker's exception in the main process, naming the worker, the
        `batch` (its index in the epoch, when known) and carrying the worker's traceback
        (as a note; on Python 3.10 as the cause)."""
        in_batch = "" if batch is None else f" in batch {batch}"
        where = (f"DataLoader worker {self.worker_id} (pid {self.pid}) raised "
                 f"{self.type_name}{in_batch} {self.context}")
        exc: BaseException = RuntimeError(f"{where}: {self.message}")
        if self.exc_bytes is not None:
            try:
                exc = pickle.loads(self.exc_bytes)
            except Exception:
                pass                                # its class is not importable here
        note = f"{where}; the worker's traceback:\n{self.traceback}"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
            raise exc
        raise exc from RuntimeError(note)


def describe_task(task: Any) -> str:
    """A task in words, for errors: the sample indices of a map-style batch (the first
    few of a long one), the sample index without automatic batching, or a batch size."""
    if isinstance(task, int):
        return f"sample index {task}"
    try:
        indices = [int(i) for i in task]
    except TypeError:
        return f"a batch of {task} samples"
    shown = ", ".join(map(str, indices[:8])) + (", ..." if len(indices) > 8 else "")
    return f"sample indices [{shown}]"


def pickled_result(result: Any, worker_id: int, task: Any) -> bytes:
    """`result` pickled for the main process; a result that cannot be pickled becomes
    a :class:`WorkerError` naming the pickling error (its shared-memory files are
    deleted)."""
    try:
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        from fastop.io._shared_memory import release_batch
        release_batch(result)
        error = WorkerError(worker_id, f"while sending the batch of {describe_task(task)} "
                            f"to the main process: it cannot be pickled (return arrays, "
                            f"numbers, strings, lists and dicts from the dataset and "
                            f"collate_fn)", exc)
        return pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)


def _seed_generators(base_seed: int, worker_id: int) -> int:
    """Seed Python's, numpy's legacy and fastop's generators differently per worker."""
    import numpy as np
    from fastop import _random
    seed = (base_seed + worker_id) % 2**63
    random.seed(seed)
    np.random.seed(np.random.SeedSequence([base_seed, worker_id]).generate_state(4))
    _random.seed(seed)
    return seed


def worker_loop(payload: bytes, index_queue: Any, result_queue: Any, worker_id: int,
                num_workers: int, base_seed: int, shm_prefix: str | None) -> None:
    """The body of a worker process (the target of its ``multiprocessing.Process``)."""
    global _worker_info
    from fastop.io._fetch import IterableFetcher, make_fetcher
    from fastop.io._shared_memory import share_batch

    failure: WorkerError | None = None
    fetcher = None
    try:
        dataset, collate_fn, worker_init_fn, auto_collate, drop_last = pickle.loads(payload)
    except Exception as exc:
        failure = WorkerError(worker_id, "while loading the dataset, collate_fn and "
                              "worker_init_fn sent to it (define their classes and "
                              "functions in an importable module)", exc)
    else:
        seed = _seed_generators(base_seed, worker_id)
        _worker_info = WorkerInfo(worker_id, num_workers, dataset, seed)
        try:
            if worker_init_fn is not None:
                worker_init_fn(worker_id)
            fetcher = make_fetcher(dataset, auto_collate, collate_fn, drop_last)
        except Exception as exc:
            failure = WorkerError(worker_id, "in worker_init_fn or when starting to "
                                  "iterate the dataset", exc)

    from multiprocessing import parent_process
    parent = parent_process()
    while True:
        try:
            message = index_queue.get(timeout=_PARENT_POLL)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return                              # orphaned: the main process died
            continue
        if message is STOP:
            return
        if message == RESET:
            if failure is None:
                try:
                    fetcher = make_fetcher(dataset, auto_collate, collate_fn, drop_last)
                except Exception as exc:
                    failure = WorkerError(worker_id, "when starting to iterate the "
                                          "dataset", exc)
            continue
        task_id, task = message
        if failure is not None:
            result_queue.put((task_id, pickle.dumps(failure)))
            continue
        try:
            result: Any = share_batch(fetcher.fetch(task), shm_prefix)
        except StopIteration as exc:
            result = Exhausted() if isinstance(fetcher, IterableFetcher) else \
                WorkerError(worker_id, f"while loading {describe_task(task)}", exc)
        except Exception as exc:
            result = WorkerError(worker_id, f"while loading {describe_task(task)}", exc)
        result_queue.put((task_id, pickled_result(result, worker_id, task)))
