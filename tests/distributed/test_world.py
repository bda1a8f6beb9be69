"""The process group without a launcher: a world of one process that imports no MPI;
launcher detection and the error when a launcher's ranks cannot use MPI; the
FASTOP_DIST_TIMEOUT watchdog of a collective (with stand-in MPI requests)."""
import subprocess
import sys

import pytest

import fastop
import fastop.distributed as dist
from fastop.distributed import _world

LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


@pytest.fixture
def no_launcher(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)


def test_import_fastop_imports_neither_mpi_nor_fastop_distributed():
    code = ("import sys, fastop; "
            "assert 'mpi4py' not in sys.modules, 'mpi4py'; "
            "assert 'fastop.distributed' not in sys.modules, 'fastop.distributed'; "
            "fastop.distributed.init_parallel_env; fastop.DataParallel; "
            "assert fastop.distributed.get_world_size() == 1; "
            "assert 'mpi4py' not in sys.modules, 'mpi4py after get_world_size'")
    env_code = f"import os; [os.environ.pop(v, None) for v in {LAUNCHER_VARS!r}]; " + code
    subprocess.run([sys.executable, "-c", env_code], check=True)


def test_a_world_of_one_without_a_launcher(no_launcher):
    assert dist.get_rank() == 0 and dist.get_world_size() == 1
    dist.init_parallel_env()
    assert dist.is_initialized()
    env = dist.ParallelEnv()
    assert (env.rank, env.world_size, env.nranks, env.local_rank, env.device_id) == \
        (0, 1, 1, 0, 0)
    assert "world_size=1" in repr(env)


def test_launcher_detection(monkeypatch, no_launcher):
    assert _world._launcher_size() is None
    monkeypatch.setenv("PMIX_RANK", "0")
    assert _world._launcher_size() == -1                 # a launcher that does not say
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert _world._launcher_size() == 4
    monkeypatch.setenv("PMI_SIZE", "2")
    assert _world._launcher_size() == 2


def test_a_launcher_of_one_rank_needs_no_mpi(monkeypatch, no_launcher):
    monkeypatch.setenv("PMI_SIZE", "1")
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)     # not installed
    assert _world._import_mpi() is None


@pytest.mark.parametrize("var,value,ranks", [("PMI_SIZE", "2", "2"),
                                             ("PMIX_RANK", "0", "several")])
def test_ranks_of_a_launcher_without_mpi4py_get_one_clear_error(monkeypatch, no_launcher,
                                                                var, value, ranks):
    monkeypatch.setenv(var, value)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(RuntimeError, match=rf"one of {ranks} ranks started by an MPI "
                                           rf"launcher.*pip install \"fastop\[mpi\]\""):
        _world._import_mpi()


@pytest.mark.parametrize("text,expected", [("", _world.DEFAULT_TIMEOUT), ("2.5", 2.5)])
def test_the_timeout_comes_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv("FASTOP_DIST_TIMEOUT", text)
    assert _world._timeout_from_env() == expected


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan"])
def test_a_bad_timeout_is_refused(monkeypatch, text):
    monkeypatch.setenv("FASTOP_DIST_TIMEOUT", text)
    with pytest.raises(ValueError, match=f"FASTOP_DIST_TIMEOUT must be a positive number "
                                         f"of seconds, got '{text}'"):
        _world._timeout_from_env()


class _Request:
    """A stand-in MPI request that completes after `polls` tests (never with -1)."""

    def __init__(self, polls: int) -> None:
        self.polls = polls

    def Test(self) -> bool:
        if self.polls < 0:
            return False
        self.polls -= 1
        return self.polls < 0


def _world_of(size: int, timeout: float) -> _world.World:
    w = _world.World(None)
    w.size, w.rank, w.timeout = size, 1, timeout
    return w


def test_a_collective_polls_its_request_until_done():
    w = _world_of(2, timeout=5)
    request = _Request(polls=50)
    w.complete("all_reduce", lambda: request)
    assert request.polls < 0 and w.collectives == 1


def test_a_collective_that_never_completes_raises_after_the_timeout_then_always():
    w = _world_of(2, timeout=0.2)
    with pytest.raises(dist.DistributedTimeoutError,
                       match=r"rank 1 of 2 waited 0\.2 s in broadcast from rank 0 \(its "
                             r"collective #1\) without every rank joining"):
        w.complete("broadcast from rank 0", lambda: _Request(polls=-1))
    with pytest.raises(dist.DistributedTimeoutError, match="barrier: an earlier collective "
                                                           "of rank 1 timed out"):
        w.complete("barrier", lambda: _Request(polls=0))
