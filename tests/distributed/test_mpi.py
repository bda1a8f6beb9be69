"""Jobs of 2 and 3 MPI ranks (mpiexec from the project's environment; fastop[mpi]):
training gives parameters bitwise identical across ranks and equal to one process
training on the global batch, eager and static alike; collectives, unused parameters
and a model mismatch behave (checked inside the ranks: mpi_worker.py); a failing rank
ends the job within seconds; ranks out of step end in a watchdog error, not a hang;
the example reaches its accuracy on 2 ranks.

Run serially (the ranks busy-wait, so jobs running side by side slow each other); the
whole module takes ~10-20 s here.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.xdist_group("mpi")]

HERE = Path(__file__).parent
WORKER = HERE / "mpi_worker.py"
EXAMPLE = HERE.parent.parent / "examples" / "train_digits_dp.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
WAYS = ("dp_sgd", "dp_adam", "no_sync", "distopt_eager", "distopt_static", "dp_buckets",
        "dp_bf16", "dp_frozen")
# jobs: ranks, and "2mpi": 2 ranks averaging through MPI's all-reduce, not shared memory
WORLDS = (2, 3, "2mpi")

try:
    import mpi4py  # noqa: F401  (the module only: MPI itself starts in the ranks)
    HAVE_MPI = MPIEXEC.exists()
except ImportError:
    HAVE_MPI = False
if not HAVE_MPI:
    pytestmark.append(pytest.mark.skip(reason='no mpiexec/mpi4py in this environment: '
                                              'pip install "fastop[mpi]"'))


def run(ranks: int | None, *args: str, timeout: float = 60, via_mpi4py: bool = True,
        **env: str):
    """Run the worker (or a script given as first arg) as `ranks` MPI ranks (None: one
    plain process), through ``python -m mpi4py`` unless told: (exit status, output,
    time.time() at its end); the whole process group is killed if it outlives
    `timeout`."""
    script, rest = (args[0], args[1:]) if args[0].endswith(".py") else (str(WORKER), args)
    cmd = [sys.executable, script, *rest]
    if ranks is not None:
        cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable,
               *(["-m", "mpi4py"] if via_mpi4py else []), script, *rest]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "FASTOP_NUM_THREADS": "1",
                   "OPENBLAS_NUM_THREADS": "1", **env}
    environment = {k: v for k, v in environment.items() if v is not None}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=environment, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} still ran after {timeout} s:\n{output}")
    return proc.returncode, output, time.time()


def seconds_since(event: str, output: str, ended: float) -> float:
    """Seconds from the moment a rank printed '<event> at <time.time()>' to `ended`
    (the job's start-up, slow on a loaded machine, does not count)."""
    return ended - float(re.search(rf"{event} at ([0-9.]+)", output).group(1))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Parameters after training, by way and world size: {(way, world): [rank arrays]}."""
    out = tmp_path_factory.mktemp("mpi")
    for ranks in (None, 2, 3):
        code, output, _ = run(ranks, "train", str(out))
        assert code == 0, output
    code, output, _ = run(2, "train", str(out), FASTOP_DIST_SHM="0")
    assert code == 0, output
    return {(way, world): [np.load(out / f"{way}_w{world}_r{r}.npz")
                           for r in range(int(str(world)[0]))]
            for way in WAYS for world in (1, *WORLDS)}


def arrays(npz) -> list[np.ndarray]:
    return [npz[k] for k in sorted(npz.files, key=lambda k: int(k.split("_")[1]))]


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("way", WAYS)
def test_ranks_end_bitwise_identical_and_equal_to_one_process(trained, way, world):
    ranks = [arrays(npz) for npz in trained[way, world]]
    for other in ranks[1:]:
        for a, b in zip(ranks[0], other):
            assert np.array_equal(a, b)
    (reference,) = [arrays(npz) for npz in trained[way, 1]]
    # the ranks' average adds in another order than one process's batch sum; bfloat16
    # gradients keep 8 bits
    close = dict(rtol=2e-2, atol=2e-3) if way == "dp_bf16" else dict(rtol=1e-5, atol=1e-6)
    for got, want in zip(ranks[0], reference):
        np.testing.assert_allclose(got, want, **close)


@pytest.mark.parametrize("world", WORLDS)
def test_bfloat16_gradients_change_the_result_and_a_frozen_parameter_stays(trained, world):
    """(So that the bfloat16 way's agreement, and the frozen way's, mean something.)"""
    exact, rounded = arrays(trained["dp_sgd", world][0]), arrays(trained["dp_bf16", world][0])
    assert any(not np.array_equal(a, b) for a, b in zip(exact, rounded))
    frozen = arrays(trained["dp_frozen", world][0])
    assert np.array_equal(frozen[1], initial_bias()) and \
        not np.array_equal(exact[1], initial_bias())


def test_the_ways_train_differently(trained):
    """(So that agreeing with one process means something.)"""
    sgd, adam = arrays(trained["dp_sgd", 1][0]), arrays(trained["dp_adam", 1][0])
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(sgd, adam))


def initial_bias() -> np.ndarray:
    """The first layer's bias as rank 0 builds it (mpi_worker.initial_values)."""
    rng = np.random.default_rng(2)
    rng.standard_normal((8, 16)), rng.standard_normal((16, 4))
    return rng.standard_normal(16).astype(np.float32) * 0.1


@pytest.mark.parametrize("world", WORLDS)
def test_eager_and_static_training_agree(trained, world):
    eager = arrays(trained["dp_sgd", world][0])
    for way in ("distopt_eager", "distopt_static", "no_sync"):
        for a, b in zip(eager, arrays(trained[way, world][0])):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("via_mpi4py", [True, False], ids=["python -m mpi4py", "python"])
def test_an_exception_on_one_rank_ends_the_job_within_seconds(via_mpi4py):
    code, output, ended = run(2, "fail", "-", via_mpi4py=via_mpi4py)
    assert code != 0
    elapsed = seconds_since("failing", output, ended)
    assert elapsed < 5, f"the job took {elapsed:.1f} s to end after the exception"
    assert "deliberate failure on rank 1" in output
    assert "uncaught exception on rank 1 of 2" in output


def test_ranks_out_of_step_end_in_a_watchdog_error_not_a_hang():
    code, output, ended = run(2, "uneven", "-", FASTOP_DIST_TIMEOUT="1.5")
    assert code != 0
    elapsed = seconds_since("stepping alone", output, ended)
    assert 1.5 <= elapsed < 6.5, f"the job ended {elapsed:.1f} s after the lone step"
    assert "DistributedTimeoutError: fastop.distributed: rank 0 of 2 waited 1.5 s in " \
           "all_reduce" in output, output


@pytest.mark.parametrize("ranks", [2, 3])
def test_tensors_that_differ_between_ranks_raise_on_every_rank(ranks):
    """(float32 on one rank and float64 on another would be reinterpreted; a broadcast
    of another size would end in a bare MPI error.)"""
    code, output, _ = run(ranks, "mismatch", "-")
    assert code == 0, output
    assert sorted(re.findall(r"rank (\d): mismatches named", output)) == \
        [str(r) for r in range(ranks)], output


def test_an_unchecked_broadcast_of_another_size_names_the_collective_and_rank():
    code, output, _ = run(2, "truncate", "-", FASTOP_DIST_SKIP_CHECKS="1")
    assert code == 0, output
    assert "rank 0: broadcast done" in output
    assert "rank 1: fastop.distributed: broadcast from rank 0 failed on rank 1 of 2: MPI " \
           "error: " in output and "FASTOP_DIST_SKIP_CHECKS=1" in output, output


@pytest.mark.parametrize("skip,calls", [(None, "2"), ("1", "1")])
def test_the_comparison_costs_one_collective_and_only_on_the_public_calls(skip, calls):
    code, output, _ = run(2, "count", "-", FASTOP_DIST_SKIP_CHECKS=skip,
                          FASTOP_DIST_SHM="0")      # one MPI all-reduce per bucket
    assert code == 0, output
    assert sorted(re.findall(r"rank \d: all_reduce (\d) backward (\d)", output)) == \
        [(calls, "1")] * 2, output


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.exists("/proc/self/maps"),
                    reason="needs Linux /dev/shm")
@pytest.mark.parametrize("how", ["raise", "kill", "timeout"])
def test_a_job_that_aborts_leaves_no_shared_memory_file(how):
    code, output, _ = run(2, "shm", how, FASTOP_DIST_TIMEOUT="3")
    assert code != 0, output
    assert len(re.findall(r"rank \d maps ", output)) == 2, output
    segments = set(re.findall(r"/dev/shm/mpich_shm_\w+", output))   # ranks' lines may mix
    assert segments, output
    assert [path for path in segments if os.path.exists(path)] == [], output


def test_each_rank_gets_its_share_of_the_cores_unless_told():
    cores = len(os.sched_getaffinity(0))
    code, output, _ = run(2, "threads", "-", FASTOP_NUM_THREADS=None, OMP_NUM_THREADS=None,
                          OPENBLAS_NUM_THREADS=None)
    assert code == 0, output
    report = re.compile(r"rank (\d): threads (\d+) local ranks (\d)")
    assert sorted(report.findall(output)) == \
        [(str(r), str(max(1, cores // 2)), str(r)) for r in range(2)], output
    code, output, _ = run(2, "threads", "-", FASTOP_NUM_THREADS="3")
    assert code == 0 and [t for _, t, _ in report.findall(output)] == ["3", "3"], output


def test_the_digits_example_reaches_its_accuracy_on_two_ranks():
    pytest.importorskip("sklearn")
    check_digits_output(*run(2, str(EXAMPLE))[:2])


def test_the_digits_example_reaches_its_accuracy_with_bfloat16_gradients():
    pytest.importorskip("sklearn")
    check_digits_output(*run(2, str(EXAMPLE), "--comm-dtype", "bfloat16")[:2])


def check_digits_output(code: int, output: str) -> None:
    """The digits example ran on 2 ranks, reached 95 % and printed its epochs' times."""
    assert code == 0, output
    last = re.search(r"ranks: 2, final held-out accuracy: ([\d.]+), time per epoch (\d+) ms "
                     r"\(median over 30 epochs\)", output)
    assert last, output
    assert float(last.group(1)) >= 0.95 and int(last.group(2)) > 0, output
    per_epoch = re.findall(r"^epoch \d+: .*, (\d+) ms$", output, re.M)   # its own epochs' times
    assert len(per_epoch) == 3, output
