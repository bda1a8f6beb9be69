"""The main-process side of loading with worker processes: the pool of workers and the
iterator that hands them tasks and yields their batches in order.

Workers are started with the ``forkserver`` method where there is one (``spawn``
elsewhere): the dataset, collate_fn and worker_init_fn are pickled once here, so an
object that cannot reach a worker is reported before any process starts, and no worker
inherits the main process's threads and locks. The fork server preloads fastop, so a
worker starts in milliseconds once the server runs.

Every task gets an id, increasing over the pool's life; results come back with it and
are yielded in id order. A persistent pool outlives its epochs: an iterator ignores
(and frees) results of an earlier epoch's tasks.
"""
from __future__ import annotations

import pickle
import queue
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from fastop import _random
from fastop.io import _shared_memory as shm
from fastop.io.worker import RESET, STOP, Exhausted, WorkerError, worker_loop

__all__ = ["WorkerPool", "MultiProcessIterator"]

_POLL = 0.2             # seconds between checks that the workers live, while waiting
_SHUTDOWN_GRACE = 5.0   # seconds a worker gets to finish its batch and exit when stopped


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None)
    if callable(obj) and name is not None:
        return f"{type(obj).__name__} {getattr(obj, '__module__', '?')}.{name}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__} object"


def _payload(parts: dict[str, Any], num_workers: int) -> bytes:
    """The objects the workers need, pickled once; an object that cannot be pickled
    is named in a TypeError."""
    try:
        return pickle.dumps(tuple(parts.values()), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        for name, obj in parts.items():
            try:
                pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise TypeError(
                    f"DataLoader(num_workers={num_workers}): the {name} ({_describe(obj)}) "
                    f"cannot be sent to the worker processes: pickling it failed with "
                    f"{type(exc).__name__}: {exc}. Define it at the top level of an "
                    f"importable module (lambdas, local functions and classes, open files "
                    f"and locks cannot be pickled), or use num_workers=0") from exc
        raise


def _context() -> Any:
    import multiprocessing
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["fastop.io._shared_memory", "fastop.io.worker"])
        return ctx
    return multiprocessing.get_context("spawn")


def _discard(message: Any) -> None:
    """Drop a result nobody will use (pickled, as workers send them), deleting its
    shared-memory files."""
    _, data = message
    try:
        result = pickle.loads(data)
    except Exception:
        return                  # its files go with the pool's (remove_files)
    if not isinstance(result, (WorkerError, Exhausted)):
        shm.release_batch(result)


def _shut_down(workers: list, index_queues: list, result_queue: Any, prefix: str) -> None:
    """Stop the workers: ask, wait while reading (a worker exits only once the pipe
    has taken its last result), then terminate the ones still busy; delete the
    batch files nobody received."""
    for q in index_queues:
        try:
            q.put(STOP)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + _SHUTDOWN_GRACE
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        try:
            _discard(result_queue.get(timeout=0.05))
        except queue.Empty:
            pass
    for w in workers:
        if w.is_alive():
            w.terminate()
    for w in workers:
        w.join(timeout=_SHUTDOWN_GRACE)
        if w.is_alive():
            w.kill()
            w.join()
    if all(w.exitcode == 0 for w in workers):
        # Every worker exited normally, so every message is whole: read what is left.
        # (One that was killed may have died mid-message; reading that could block.)
        while True:
            try:
                _discard(result_queue.get_nowait())
            except (queue.Empty, OSError, EOFError):
                break
    for q in (*index_queues, result_queue):
        q.cancel_join_thread()
        q.close()
    shm.remove_files(prefix)


class WorkerPool:
    """``num_workers`` processes loading batches of one DataLoader's dataset."""

    def __init__(self, dataset: Any, collate_fn: Callable | None,
                 worker_init_fn: Callable | None, auto_collate: bool, drop_last: bool,
                 num_workers: int, use_shared_memory: bool) -> None:
        payload = _payload({"dataset": dataset, "collate_fn": collate_fn,
                            "worker_init_fn": worker_init_fn,
                            "auto_collate": auto_collate, "drop_last": drop_last},
                           num_workers)
        ctx = _context()
        directory = shm.shm_directory()
        shm.remove_stale_files(directory)
        self.prefix = f"{directory}/{shm.new_prefix()}"
        # A child of fastop's generator: reproducible after fastop.seed, and drawing it
        # leaves the main stream (shuffles) as it is, so batches are the same whatever
        # num_workers is.
        base_seed = int(_random.generator().spawn(1)[0].integers(0, 2**63 - 1))
        self.num_workers = num_workers
        self.index_queues = [ctx.Queue() for _ in range(num_workers)]
        self.result_queue = ctx.Queue()
        self.workers: list[Any] = []
        self.next_task = 0
        self.epoch = 0
        self._finalizer = weakref.finalize(self, _shut_down, self.workers,
                                           self.index_queues, self.result_queue,
                                           self.prefix)
        try:
            for worker_id in range(num_workers):
                process = ctx.Process(
                    target=worker_loop, name=f"fastop-io-worker-{worker_id}", daemon=True,
                    args=(payload, self.index_queues[worker_id], self.result_queue,
                          worker_id, num_workers, base_seed,
                          self.prefix if use_shared_memory else None))
                process.start()
                self.workers.append(process)
        except BaseException:
            self.shutdown()
            raise

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def submit(self, worker_id: int, task: Any) -> int:
        task_id = self.next_task
        self.next_task += 1
        self.index_queues[worker_id].put((task_id, task))
        return task_id

    def reset_iteration(self) -> None:
        """Make every worker restart its iterable dataset (a new epoch)."""
        for q in self.index_queues:
            q.put(RESET)

    def check_workers(self) -> None:
        """Raise (after shutting down) if a worker has died."""
        for worker_id, process in enumerate(self.workers):
            if not process.is_alive():
                code = process.exitcode
                self.shutdown()
                how = (f"was killed by signal {-code} (out of memory, a crash in native "
                       f"code, or killed from outside)" if code is not None and code < 0 else
                       f"exited with code {code}; its error output above says why (a "
                       f"script that starts DataLoader workers must keep its top-level "
                       f"code under `if __name__ == '__main__':`)")
                raise RuntimeError(f"DataLoader worker {worker_id} (pid {process.pid}) {how}")

    def shutdown(self) -> None:
        self._finalizer()


class MultiProcessIterator:
    """One epoch over a worker pool: keeps ``prefetch`` tasks per worker in flight and
    yields the batches in task order.

    ``tasks`` gives each batch's task: index arrays for a map-style dataset, batch sizes
    for an iterable one (an endless supply: the epoch ends when every worker reports
    its iterator exhausted).
    """

    def __init__(self, pool: WorkerPool, tasks: Iterator[Any], iterable: bool,
                 prefetch: int, timeout: float, owns_pool: bool,
                 convert: Callable[[Any], Any]) -> None:
        self._pool = pool
        self._tasks = tasks
        self._timeout = timeout
        self._owns_pool = owns_pool
        self._convert = convert
        pool.epoch += 1
        self._epoch = pool.epoch
        if iterable and not owns_pool:
            pool.reset_iteration()
        self._first_task = pool.next_task
        self._active = list(range(pool.num_workers))   # workers that still have data
        self._turn = 0
        self._in_flight: deque[tuple[int, int]] = deque()   # (task id, worker), as sent
        self._arrived: dict[int, Any] = {}
        for _ in range(prefetch * pool.num_workers):
            if not self._send():
                break

    def __iter__(self) -> MultiProcessIterator:
        return self

    def _send(self) -> bool:
        """Hand the next task to the next worker that still has data."""
        if not self._active:
            return False
        task = next(self._tasks, StopIteration)
        if task is StopIteration:
            return False
        worker_id = self._active[self._turn % len(self._active)]
        self._turn += 1
        self._in_flight.append((self._pool.submit(worker_id, task), worker_id))
        return True

    def _receive(self) -> None:
        """Wait for one result of this epoch, watching the workers and the timeout."""
        started = time.monotonic()
        while True:
            try:
                task_id, data = self._pool.result_queue.get(timeout=_POLL)
            except queue.Empty:
                self._pool.check_workers()
                if self._timeout and time.monotonic() - started > self._timeout:
                    self._pool.shutdown()
                    raise RuntimeError(f"DataLoader: no batch arrived from the workers "
                                       f"within timeout={self._timeout} seconds") from None
                continue
            if task_id < self._first_task:
                _discard((task_id, data))             # an earlier epoch's
                continue
            try:
                self._arrived[task_id] = pickle.loads(data)
            except Exception as exc:
                self._pool.shutdown()
                raise RuntimeError(f"DataLoader: batch {task_id - self._first_task} came "
                                   f"back from a worker but cannot be unpickled in the main "
                                   f"process ({type(exc).__name__}: {exc})") from exc
            return

    def __next__(self) -> Any:
        if self._epoch != self._pool.epoch:
            raise RuntimeError("DataLoader: this iterator's persistent workers have started "
                               "a newer epoch; iterate the newest iterator")
        while self._in_flight:
            task_id, worker_id = self._in_flight[0]
            if task_id not in self._arrived:
                self._receive()
                continue
            self._in_flight.popleft()
            result = self._arrived.pop(task_id)
            if isinstance(result, Exhausted):
                if worker_id in self._active:
                    self._active.remove(worker_id)
                self._send()
                continue
            if isinstance(result, WorkerError):
                self._pool.shutdown()
                result.reraise(batch=task_id - self._first_task)
            self._send()
            return self._convert(shm.receive_batch(result))
        if self._owns_pool:
            self._pool.shutdown()
        raise StopIteration
