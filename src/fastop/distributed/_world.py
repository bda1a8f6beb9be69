"""The process group fastop.distributed runs on: MPI's ``COMM_WORLD`` through mpi4py,
or a world of one process.

mpi4py is imported on first use, and only when an MPI launcher started this process
(its environment says so: ``PMI_SIZE``/``PMI_RANK`` from MPICH's and Intel's
``mpiexec`` and Slurm, ``OMPI_COMM_WORLD_SIZE`` from Open MPI, ``PMIX_RANK`` from PMIx
launchers) or something imported ``mpi4py.MPI`` already (``python -m mpi4py``): MPI's
initialisation as a singleton takes 0.4-0.9 s here, which a one-process run of a script
written for many should not pay. Without a launcher everything is a world of one
process, with or without mpi4py installed (collectives are then the identity).

Every collective runs as a non-blocking MPI request polled until done (see
:meth:`World.complete`), so a rank that waits longer than ``FASTOP_DIST_TIMEOUT``
seconds raises :class:`DistributedTimeoutError` naming the collective and the rank,
instead of hanging; an uncaught exception on any rank prints its traceback and aborts
the whole job (:func:`_install_excepthook`). ``python -m mpi4py script.py`` aborts on a
non-zero ``sys.exit`` too; a rank that leaves early without an error is caught by its
peers' timeout.

MPICH keeps its shared-memory segment (``/dev/shm/mpich_shm_*``, 2 MiB) as a file until
``MPI_Finalize``: a job that ends in an abort, or loses a rank to SIGKILL, would leave it
behind. Once every rank has started (the barrier of :func:`init_parallel_env`) each rank
removes the files of the segments it has mapped — the memory stays until the last rank
exits, whichever way it exits — and an aborting rank removes them too.

The public collectives (``all_reduce``, ``broadcast``, ``all_gather``) first compare
the ranks' tensors (one all-gather of a small header: the collective, its op or source,
the dtype and the shape), so tensors that differ between ranks raise the same error on
every rank instead of giving each rank different garbage; ``FASTOP_DIST_SKIP_CHECKS=1``
turns that off. DataParallel's gradient buckets skip it: it compares the models once,
when it wraps them.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

from fastop._env import env_flag
from fastop._job import LAUNCHER_VARS
from fastop._threads import set_num_threads

__all__ = ["World", "world", "init_parallel_env", "is_initialized", "DistributedTimeoutError",
           "MPI_MISSING_HINT"]

MPI_MISSING_HINT = 'pip install "fastop[mpi]"'
DEFAULT_TIMEOUT = 1800.0   # seconds, as PyTorch's and Paddle's process groups
# Polling: spin on MPI's Test (it drives MPI's progress, so a transfer between ranks
# that are both waiting runs at full speed), yielding the CPU between polls so ranks
# sharing cores still progress; a rank still waiting after SPIN_SECONDS (a peer is
# busy elsewhere: loading data, evaluating) sleeps between polls, up to MAX_NAP.
SPIN_SECONDS = 0.05
MAX_NAP = 0.001
_yield_cpu = getattr(os, "sched_yield", lambda: time.sleep(0))
_THREAD_VARS = ("FASTOP_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class DistributedTimeoutError(RuntimeError):
    """A collective did not complete within ``FASTOP_DIST_TIMEOUT`` seconds: the ranks
    stopped making progress together. MPI cannot cancel the pending collective, so
    every later collective of this process raises this error again."""

    __module__ = "fastop.distributed"


def _timeout_from_env() -> float:
    text = os.environ.get("FASTOP_DIST_TIMEOUT", "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"fastop.distributed: FASTOP_DIST_TIMEOUT must be a positive "
                         f"number of seconds, got {text!r}")
    return value


def _launcher_size() -> int | None:
    """The number of ranks the environment says an MPI launcher started, or None when
    no launcher's variables are set (-1: a launcher that does not say how many)."""
    if not any(v in os.environ for v in LAUNCHER_VARS):
        return None
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            continue
    return -1


def _import_mpi() -> Any | None:
    """mpi4py's MPI module when this process runs under an MPI launcher; None for a
    world of one process. A launcher without a usable mpi4py + MPI library is an error
    (several ranks would otherwise each train alone, silently)."""
    size = _launcher_size()
    if "mpi4py.MPI" not in sys.modules and (size is None or size == 1):
        return None
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as exc:
        ranks = "several" if size is None or size < 0 else str(size)
        raise RuntimeError(
            f"fastop.distributed: this process is one of {ranks} ranks started by an MPI "
            f"launcher, but MPI cannot be used from Python ({type(exc).__name__}: {exc}); "
            f"install mpi4py and an MPI library with: {MPI_MISSING_HINT}") from exc
    return MPI


class World:
    """This process's place in the job: ``rank`` of ``size``, MPI's communicator (None
    in a world of one process) and the state of its collectives."""

    def __init__(self, mpi: Any | None) -> None:
        self.MPI = mpi
        self._mpi_errors: Any = () if mpi is None else mpi.Exception   # what MPI raises
        self.comm = None if mpi is None else mpi.COMM_WORLD
        self.rank = 0 if mpi is None else self.comm.Get_rank()
        self.size = 1 if mpi is None else self.comm.Get_size()
        self.local_rank, self.local_size = 0, 1   # set by init_parallel_env
        self.timeout = _timeout_from_env()
        # compare the ranks' tensors before each public collective (see the module doc)
        self.check_collectives = not env_flag("FASTOP_DIST_SKIP_CHECKS")
        self.collectives = 0          # started by this rank, for error messages
        self.failure: DistributedTimeoutError | None = None
        self.stuck: Any = None              # the requests of the collective that timed out
        self.initialized = False

    def complete(self, what: str, start: Callable[[], Any]) -> None:
        """Run one collective: `start()` returns its MPI request(s); poll them until done,
        or raise :class:`DistributedTimeoutError` after ``self.timeout`` seconds. An
        error MPI reports (a message truncated, say) is a RuntimeError naming `what` and
        the rank."""
        self.wait(what, self.start(what, start))

    def start(self, what: str, start: Callable[[], Any]) -> Any:
        """Start one non-blocking collective (`start()` returns its MPI request(s)) and
        return its request(s), for :meth:`wait` later."""
        if self.failure is not None:
            raise DistributedTimeoutError(f"{what}: an earlier collective of rank "
                                          f"{self.rank} timed out ({self.failure})")
        self.collectives += 1
        try:
            return start()
        except self._mpi_errors as exc:
            raise self._mpi_failure(what, exc) from exc

    def wait(self, what: str, requests: Any) -> None:
        """Poll request(s) :meth:`start` returned until done, or raise
        :class:`DistributedTimeoutError` after ``self.timeout`` seconds."""
        try:
            test = self.MPI.Request.Testall if isinstance(requests, list) \
                else type(requests).Test
            if test(requests):
                return
            self._poll(what, requests, test)
        except self._mpi_errors as exc:
            raise self._mpi_failure(what, exc) from exc

    def _mpi_failure(self, what: str, exc: Exception) -> RuntimeError:
        hint = "" if self.check_collectives else (
            " (with FASTOP_DIST_SKIP_CHECKS=1 the ranks' tensors are not compared: "
            "tensors of different sizes on the ranks end like this)")
        return RuntimeError(f"fastop.distributed: {what} failed on rank {self.rank} of "
                            f"{self.size}: MPI error: {exc}{hint}")

    def _poll(self, what: str, requests: Any, test: Callable[[Any], bool]) -> None:
        """Wait for `requests` to complete, or time out (:meth:`complete`)."""
        began = time.monotonic()
        spin_until, deadline = began + SPIN_SECONDS, began + self.timeout
        nap = 2e-5
        while not test(requests):
            now = time.monotonic()
            if now < spin_until:
                _yield_cpu()
                continue
            if now > deadline:
                self.stuck = requests       # MPI may still write their buffers: keep them
                self._timed_out(what, now - began)
            time.sleep(nap)
            nap = min(2 * nap, MAX_NAP)

    def _timed_out(self, what: str, waited: float) -> None:
        self.failure = DistributedTimeoutError(
            f"fastop.distributed: rank {self.rank} of {self.size} waited {waited:.1f} s "
            f"in {what} (its collective #{self.collectives}) without every rank joining "
            f"(FASTOP_DIST_TIMEOUT={self.timeout:g} s): the ranks stopped making progress "
            f"together — a rank runs a different number of steps or collectives, is "
            f"stuck, or died")
        raise self.failure


_world: World | None = None


def world() -> World:
    """The process group (created on first use; not a collective call)."""
    global _world
    if _world is None:
        created = World(_import_mpi())
        if created.size > 1:
            _install_excepthook(created)
        _world = created
    return _world


def _install_excepthook(w: World) -> None:
    """Make an uncaught exception on this rank end the whole job (its peers would
    otherwise wait in their next collective): print the traceback, then MPI_Abort."""
    previous = sys.excepthook

    def _abort_on_uncaught_exception(exc_type, exc, tb):
        try:
            remove_shared_memory_files()
            sys.stderr.write(f"fastop.distributed: uncaught exception on rank {w.rank} "
                             f"of {w.size}; aborting the job\n")
            previous(exc_type, exc, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            # The launcher forwards this rank's output through its proxies, which the
            # abort kills: under load they dropped the traceback's last lines (its
            # message). A moment's grace lets them pass it on; the job ends anyway.
            time.sleep(0.25)
        finally:
            w.comm.Abort(1)
    sys.excepthook = _abort_on_uncaught_exception


_MPICH_SEGMENTS = "/dev/shm/mpich_shm_"


def remove_shared_memory_files() -> list[str]:
    """Unlink the files of the MPICH shared-memory segments this process has mapped
    (read from ``/proc/self/maps``; nothing where that does not exist); their paths. The
    mappings stay valid: the memory is freed when the last process unmaps it."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    removed = []
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 else ""
        if path.startswith(_MPICH_SEGMENTS) and not path.endswith(" (deleted)") \
                and path not in removed:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:             # another rank of this machine removed it first
                pass
    return removed


def init_parallel_env() -> None:
    """Set up this process as one rank of the job (PaddlePaddle's name); a collective
    call: every rank calls it, once or more, before training.

    Under an MPI launcher: starts MPI, makes an uncaught exception on any rank abort the
    job, and — unless ``FASTOP_NUM_THREADS``, ``OMP_NUM_THREADS`` or
    ``OPENBLAS_NUM_THREADS`` is set — gives each rank ``cores // ranks on this machine``
    fastop threads, so ranks sharing a machine do not oversubscribe its cores. Without
    one it sets up a world of one process and changes nothing. Collectives and
    :class:`fastop.DataParallel` call it themselves when needed.
    """
    w = world()
    if w.initialized:
        return
    if w.size > 1:
        local = w.comm.Split_type(w.MPI.COMM_TYPE_SHARED)
        w.local_rank, w.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        if not any(os.environ.get(v) for v in _THREAD_VARS):
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
                else os.cpu_count() or 1
            set_num_threads(max(1, cores // w.local_size))
        w.complete("init_parallel_env", w.comm.Ibarrier)
        remove_shared_memory_files()        # every rank has mapped them: see the module doc
    w.initialized = True


def is_initialized() -> bool:
    """Whether :func:`init_parallel_env` has run in this process."""
    return _world is not None and _world.initialized
