"""DataLoader with worker processes: the same batches as in the main process, seeding,
worker errors re-raised clearly, unpicklable objects named, and no process or shared
memory file left behind (after a full epoch, an early break, an error, a dead worker,
or a dead main process)."""
import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fastop
from fastop.io import DataLoader, TensorDataset
from fastop.io._shared_memory import shm_directory

from loader_datasets import (FailingOddly, Failing, Ragged, Records, SplitStream, Squares,
                             WholeStream, WithLock, WorkerFacts, failing_init,
                             offset_init)


def _workers():
    return [p for p in multiprocessing.active_children()
            if p.name.startswith("fastop-io-worker")]


def _shm_files():
    prefix = f"fastop-io-{os.getpid()}-"
    return [name for name in os.listdir(shm_directory()) if name.startswith(prefix)]


def _pid_gone(pid, wait=10.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _plain(batch):
    """A batch as numpy arrays and Python values, for comparisons."""
    if isinstance(batch, dict):
        return {k: _plain(v) for k, v in batch.items()}
    if isinstance(batch, list):
        return [_plain(v) for v in batch]
    return batch.numpy() if isinstance(batch, fastop.Tensor) else batch


def _assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


@pytest.fixture(autouse=True)
def _nothing_left_behind():
    yield
    gc.collect()
    assert _workers() == []
    assert _shm_files() == []


def _epochs(loader, seed, epochs=2):
    fastop.seed(seed)
    return [[_plain(b) for b in loader] for _ in range(epochs)]


@pytest.mark.parametrize("dataset", [Squares(23), Squares(9, rows=8192), Records()],
                         ids=["small-arrays", "shared-memory-arrays", "dicts"])
@pytest.mark.parametrize("persistent", [False, True])
def test_workers_give_the_batches_of_the_main_process(dataset, persistent):
    expected = _epochs(DataLoader(dataset, batch_size=4, shuffle=True), seed=5)
    loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                        persistent_workers=persistent)
    _assert_same(_epochs(loader, seed=5), expected)
    del loader


def test_tensor_dataset_and_pipe_transport_give_the_same_batches():
    rng = np.random.default_rng(0)
    ds = TensorDataset([rng.standard_normal((50, 5000)).astype("float32"),
                        rng.integers(0, 9, 50)])
    expected = _epochs(DataLoader(ds, batch_size=8, shuffle=True, drop_last=True), seed=1)
    for shared in (True, False):
        loader = DataLoader(ds, batch_size=8, shuffle=True, drop_last=True, num_workers=2,
                            use_shared_memory=shared)
        _assert_same(_epochs(loader, seed=1), expected)


def test_batch_size_none_with_workers():
    expected = [_plain(b) for b in DataLoader(Squares(5), batch_size=None)]
    _assert_same([_plain(b) for b in DataLoader(Squares(5), batch_size=None,
                                                num_workers=2)], expected)


def test_workers_are_seeded_differently_and_reproducibly_and_know_who_they_are():
    def run():
        fastop.seed(11)
        rows = [_plain(b) for b in DataLoader(WorkerFacts(8), batch_size=2, num_workers=2,
                                              worker_init_fn=offset_init)]
        return [tuple(col[k] for col in batch) for batch in rows for k in range(2)]
    first, again = run(), run()
    ids = [sample[2] for sample in first]
    assert sorted(set(ids)) == [0, 1] and [sample[0] for sample in first] == list(range(8))
    assert {sample[5] for sample in first if sample[2] == 0} == {1000}     # worker_init_fn
    assert {sample[5] for sample in first if sample[2] == 1} == {2000}
    assert len({sample[1] for sample in first}) == 2 and os.getpid() not in \
        {sample[1] for sample in first}
    np_draws = [sample[3] for sample in first]
    fastop_draws = [sample[4] for sample in first]
    assert len(set(np_draws)) == 8 and len(set(fastop_draws)) == 8      # no shared streams
    assert [s[3:5] for s in first] == [s[3:5] for s in again]           # fastop.seed rules
    assert fastop.io.get_worker_info() is None


def test_iterable_dataset_split_by_worker_info_is_read_once():
    loader = DataLoader(SplitStream(11), batch_size=2, num_workers=3)
    values = sorted(int(v) for b in loader for v in b.numpy().ravel())
    assert values == list(range(11))


def test_iterable_dataset_is_read_by_every_worker_unless_split():
    values = [int(v) for b in DataLoader(WholeStream(5), batch_size=2, num_workers=2)
              for v in b.numpy().ravel()]
    assert sorted(values) == sorted(list(range(5)) * 2)
    dropped = list(DataLoader(WholeStream(5), batch_size=2, num_workers=2, drop_last=True))
    assert [b.shape for b in dropped] == [[2, 1]] * 4          # each worker drops its [4]


def test_persistent_workers_keep_their_processes_and_restart_iterables():
    loader = DataLoader(WorkerFacts(6), batch_size=2, num_workers=2,
                        persistent_workers=True)
    pids = [{int(p) for b in loader for p in b[1].numpy()} for _ in range(2)]
    assert pids[0] == pids[1] and len(pids[0]) == 2
    stream = DataLoader(SplitStream(7), batch_size=2, num_workers=2,
                        persistent_workers=True)
    for _ in range(2):
        assert sorted(int(v) for b in stream for v in b.numpy().ravel()) == list(range(7))
    del loader, stream


def test_persistent_workers_recover_from_a_broken_epoch():
    loader = DataLoader(Squares(40, rows=8192), batch_size=2, num_workers=2,
                        persistent_workers=True, prefetch_factor=4)
    it = iter(loader)
    next(it)
    del it                                   # in-flight batches belong to the old epoch
    labels = [int(v) for b in loader for v in b[1].numpy()]
    assert labels == [i * i for i in range(40)]
    del loader


def test_an_exception_in_a_worker_is_raised_with_the_worker_and_its_traceback():
    loader = DataLoader(Failing(10, bad=5), batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match="sample 5 is broken") as info:
        list(loader)
    note = "\n".join(info.value.__notes__)
    assert "DataLoader worker 0 (pid" in note
    assert "in batch 2 while loading sample indices [4, 5]" in note
    assert "raised by dataset[5] (sample index 5)" in note
    assert "in __getitem__" in note and "loader_datasets.py" in note


def test_a_ragged_batch_in_a_worker_names_the_batch():
    loader = DataLoader(Ragged(8, ragged_from=5), batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match=r"shapes \[\[1\], \[6\]\]") as info:
        list(loader)
    note = "\n".join(info.value.__notes__)
    assert "DataLoader worker 0 (pid" in note
    assert "in batch 2 while loading sample indices [4, 5]" in note


_UNPICKLABLE_BATCH_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from fastop.io import DataLoader
    from loader_datasets import Squares, collate_with_lock
    if __name__ == "__main__":
        try:
            list(DataLoader(Squares(8), batch_size=2, num_workers=2,
                            collate_fn=collate_with_lock))
        except Exception as exc:
            print(type(exc).__name__, exc)
            print(*getattr(exc, "__notes__", []))
""")


def test_a_batch_that_cannot_be_pickled_back_is_an_error_not_a_hang(tmp_path):
    script = tmp_path / "unpicklable_batch.py"
    script.write_text(_UNPICKLABLE_BATCH_SCRIPT.format(here=os.path.dirname(__file__)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "TypeError" in out and "lock" in out, out + result.stderr
    assert "DataLoader worker 0 (pid" in out and "in batch 0 while sending the batch of " \
        "sample indices [0, 1] to the main process: it cannot be pickled" in out


def test_an_exception_that_cannot_travel_becomes_a_runtime_error_with_its_text():
    with pytest.raises(RuntimeError, match="raised TwoArgError .*code 7: disk on fire"):
        list(DataLoader(FailingOddly(4, bad=0), batch_size=2, num_workers=1))


def test_a_failing_worker_init_fn_is_reported():
    with pytest.raises(RuntimeError, match="worker 0 cannot start") as info:
        list(DataLoader(Squares(4), num_workers=1, worker_init_fn=failing_init))
    assert "in worker_init_fn" in "\n".join(info.value.__notes__)


@pytest.mark.parametrize("kwargs, name, what", [
    ({"dataset": WithLock()}, "dataset", "loader_datasets.WithLock object"),
    ({"dataset": Squares(4), "collate_fn": lambda batch: batch}, "collate_fn",
     "function .*test_multiprocess.<lambda>"),
    ({"dataset": Squares(4), "worker_init_fn": lambda i: None}, "worker_init_fn",
     "<lambda>"),
])
def test_objects_that_cannot_reach_a_worker_are_named_before_any_starts(kwargs, name, what):
    loader = DataLoader(num_workers=2, **kwargs)
    with pytest.raises(TypeError, match=f"the {name} \\(.*{what}.*cannot be sent to the "
                                        f"worker processes: pickling it failed") as info:
        iter(loader)
    assert isinstance(info.value.__cause__, (pickle.PicklingError, TypeError,
                                             AttributeError))
    assert _workers() == []


def test_breaking_early_stops_the_workers_and_frees_shared_memory():
    loader = DataLoader(Squares(64, rows=8192), batch_size=2, num_workers=2,
                        prefetch_factor=4)
    it = iter(loader)
    next(it)
    pids = [p.pid for p in _workers()]
    assert len(pids) == 2
    del it
    gc.collect()
    assert all(_pid_gone(pid) for pid in pids)
    assert _shm_files() == []


def test_a_killed_worker_is_reported_and_the_rest_are_stopped():
    loader = DataLoader(WorkerFacts(40, delay=0.02), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    victim, other = _workers()
    os.kill(victim.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"DataLoader worker \d \(pid \d+\) was killed by "
                                           r"signal 9"):
        for _ in it:
            pass
    assert _pid_gone(other.pid)


def test_timeout_names_the_wait():
    loader = DataLoader(WorkerFacts(4, delay=1.5), batch_size=2, num_workers=1, timeout=0.3)
    with pytest.raises(RuntimeError, match="no batch arrived from the workers within "
                                           "timeout=0.3 seconds"):
        next(iter(loader))


_ORPHAN_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {here!r})
    from fastop.io import DataLoader
    from loader_datasets import WorkerFacts
    it = iter(DataLoader(WorkerFacts(1000, delay=0.01), batch_size=2, num_workers=2))
    pids = set()
    while len(pids) < 2:
        pids.update(int(p) for p in next(it)[1].numpy())
    print(*sorted(pids), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_workers_exit_when_the_main_process_dies():
    here = os.path.dirname(__file__)
    result = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT.format(here=here)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == 2
    assert all(_pid_gone(pid, wait=15.0) for pid in pids)


_MAIN_CLASS_SCRIPT = textwrap.dedent("""
    import numpy as np
    from fastop.io import DataLoader, Dataset
    class Local(Dataset):
        def __getitem__(self, i): return np.zeros(1)
        def __len__(self): return 2
    try:
        list(DataLoader(Local(), num_workers=1))
    except Exception as exc:
        print(type(exc).__name__, exc)
        print(*getattr(exc, "__notes__", []))
""")


def test_a_dataset_class_the_workers_cannot_import_is_explained():
    result = subprocess.run([sys.executable, "-c", _MAIN_CLASS_SCRIPT], capture_output=True,
                            text=True, timeout=120)
    assert "AttributeError" in result.stdout, result.stdout + result.stderr
    assert "while loading the dataset, collate_fn and worker_init_fn sent to it" in \
        result.stdout
    assert "importable module" in result.stdout
