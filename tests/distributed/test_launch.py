"""python -m fastop.distributed.launch: the mpiexec command it builds (MPICH's Hydra and
Open MPI flags, hosts, the ranks' environment), the thread budget (cores ÷ ranks per
machine, the environment's and --threads' settings winning), finding mpiexec, bad
arguments; and, under MPI, a job's exit status forwarded and the thread budget seen by
the ranks."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastop.distributed import launch

MPIEXEC = Path(sys.executable).parent / "mpiexec"


def test_the_thread_budget_is_the_cores_over_the_ranks_of_the_busiest_machine():
    assert launch.thread_budget(4, 1, cores=16) == 4
    assert launch.thread_budget(3, 1, cores=16) == 5
    assert launch.thread_budget(8, 2, cores=16) == 4         # 4 ranks per machine
    assert launch.thread_budget(5, 2, cores=16) == 5         # 3 on the busiest
    assert launch.thread_budget(32, 1, cores=16) == 1        # never 0


def test_the_environment_and_threads_option_win_over_the_budget():
    cores = launch.thread_budget(2, 1)
    env = launch.rank_environment(2, 1, None, {"OMP_NUM_THREADS": "7"})
    assert "OMP_NUM_THREADS" not in env
    assert env == {var: str(cores) for var in launch.THREAD_VARS if var != "OMP_NUM_THREADS"}
    assert launch.rank_environment(2, 1, 3, {"OMP_NUM_THREADS": "7"}) == \
        {var: "3" for var in launch.THREAD_VARS}


def test_the_command_for_mpich_hydra_one_machine_and_several():
    env = {"OMP_NUM_THREADS": "2"}
    assert launch.build_command("mpiexec", 4, [], env, ["train.py", "--lr", "0.1"],
                                python="py") == \
        ["mpiexec", "-n", "4", "-genv", "OMP_NUM_THREADS", "2", "py", "-m", "mpi4py",
         "train.py", "--lr", "0.1"]
    assert launch.build_command("mpiexec", 8, ["a", "b"], {}, ["-m", "pkg.train"],
                                python="py") == \
        ["mpiexec", "-n", "8", "-hosts", "a,b", "py", "-m", "mpi4py", "-m", "pkg.train"]


def test_the_command_for_open_mpi():
    assert launch.build_command("mpirun", 6, ["a", "b"], {"OMP_NUM_THREADS": "1"},
                                ["t.py"], open_mpi=True, python="py") == \
        ["mpirun", "-n", "6", "--host", "a:3,b:3", "-x", "OMP_NUM_THREADS=1", "py", "-m",
         "mpi4py", "t.py"]


def test_mpiexec_is_found_next_to_python_else_named_else_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.delenv("FASTOP_MPIEXEC", raising=False)
    with pytest.raises(FileNotFoundError, match='no mpiexec next to .* pip install '
                                                '"fastop\\[mpi\\]"'):
        launch.find_mpiexec(str(python))
    monkeypatch.setenv("FASTOP_MPIEXEC", "not-a-launcher")
    with pytest.raises(FileNotFoundError, match="FASTOP_MPIEXEC is 'not-a-launcher'"):
        launch.find_mpiexec(str(python))
    fake = bin_dir / "mpiexec"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert launch.find_mpiexec(str(python)) == str(fake)


@pytest.mark.parametrize("argv,message", [
    (["-n", "0", "t.py"], "-n must be a positive number of ranks, got 0"),
    (["-n", "2"], "give the script to run"),
    (["-n", "2", "--threads", "0", "t.py"], "--threads must be a positive number"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        launch.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_target_starts_at_the_script_or_module_and_keeps_its_options():
    assert launch._split(["-n", "2", "t.py", "-m", "x", "--threads", "3"]) == \
        (["-n", "2"], ["t.py", "-m", "x", "--threads", "3"])
    assert launch._split(["-n", "2", "--threads", "1", "-m", "pkg.train", "--lr", "1"]) == \
        (["-n", "2", "--threads", "1"], ["-m", "pkg.train", "--lr", "1"])
    assert launch._split(["--hosts", "a,b", "-n", "4"]) == (["--hosts", "a,b", "-n", "4"], [])


def test_a_missing_launcher_is_exit_status_127(monkeypatch, capsys):
    monkeypatch.setattr(launch, "find_mpiexec", lambda: (_ for _ in ()).throw(
        FileNotFoundError("fastop.distributed.launch: no mpiexec")))
    assert launch.main(["-n", "2", "t.py"]) == 127
    assert "no mpiexec" in capsys.readouterr().err


SCRIPT = """
import os, sys
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
sys.stdout.write(f"rank {rank} threads " + " ".join(os.environ.get(v, "-") for v in
    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "FASTOP_NUM_THREADS"))
    + "\\n")                 # one write: the ranks' lines arrive whole, in either order
sys.stdout.flush()
sys.exit(int(sys.argv[1]) if rank == int(sys.argv[2]) else 0)
"""


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason='no mpiexec: pip install "fastop[mpi]"')
@pytest.mark.parametrize("status,rank", [(0, 0), (3, 1), (5, 0)])
def test_the_jobs_exit_status_is_forwarded(tmp_path, status, rank):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, "-m", "fastop.distributed.launch", "-n", "2",
                           str(script), str(status), str(rank)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stdout + done.stderr


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason='no mpiexec: pip install "fastop[mpi]"')
def test_each_rank_gets_the_thread_budget(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    environment = {k: v for k, v in os.environ.items() if k not in launch.THREAD_VARS}
    done = subprocess.run([sys.executable, "-m", "fastop.distributed.launch", "-n", "2",
                           str(script), "0", "0"],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    budget = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert sorted(re.findall(r"rank \d threads ([\d-]+(?: [\d-]+){3})", done.stdout)) \
        == [" ".join([budget] * 4)] * 2, done.stdout
    done = subprocess.run([sys.executable, "-m", "fastop.distributed.launch", "-n", "2",
                           "--threads", "3", str(script), "0", "0"],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.stdout.count("threads 3 3 3 3") == 2, done.stdout
