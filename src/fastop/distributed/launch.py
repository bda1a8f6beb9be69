"""``python -m fastop.distributed.launch``: start a script as N MPI ranks (what
``torchrun`` is for torch).

One machine, four ranks::

    python -m fastop.distributed.launch -n 4 train.py --epochs 3

Two machines, four ranks each (the same Python environment and script path on both, and
passwordless ssh from the first, as MPI's launcher needs)::

    python -m fastop.distributed.launch -n 8 --hosts node1,node2 train.py

The launcher finds the environment's ``mpiexec`` (next to this Python: the ``mpich``
wheel of ``pip install "fastop[mpi]"`` puts it there; else ``$FASTOP_MPIEXEC``; else the
first on ``PATH``), runs ``mpiexec -n N python -m mpi4py script.py ...`` (an uncaught
exception on a rank ends the whole job), and gives every rank a thread budget of this
machine's cores ÷ the ranks on each machine (``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``FASTOP_NUM_THREADS``), unless the
environment sets them already or ``--threads`` says otherwise, so the ranks do not
oversubscribe the cores (other hosts are taken to have as many cores as this one).

Its exit status is the job's: 0 when every rank exits 0, else the launcher's report of
the failing rank's status (MPICH's ``mpiexec`` passes a rank's non-zero exit code on);
128 + N when it is ended by signal N.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "find_mpiexec", "thread_budget", "build_command", "rank_environment",
           "THREAD_VARS"]

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "FASTOP_NUM_THREADS")


def find_mpiexec(python: str = sys.executable) -> str:
    """The environment's ``mpiexec``: next to `python` (a virtual environment's bin/),
    else ``$FASTOP_MPIEXEC``, else the first on ``PATH``; a clear error when none."""
    beside = Path(python).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    configured = os.environ.get("FASTOP_MPIEXEC")
    if configured:
        if not shutil.which(configured):
            raise FileNotFoundError(f"fastop.distributed.launch: FASTOP_MPIEXEC is "
                                    f"{configured!r}, which is not an executable")
        return configured
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError(
            f"fastop.distributed.launch: no mpiexec next to {python} nor on PATH; install "
            f"MPI with: pip install \"fastop[mpi]\" (or set FASTOP_MPIEXEC)")
    return found


def thread_budget(ranks: int, hosts: int, cores: int | None = None) -> int:
    """Threads per rank: this machine's cores ÷ the ranks on the busiest machine (at
    least 1)."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    per_host = -(-ranks // hosts)
    return max(1, cores // per_host)


def _is_open_mpi(mpiexec: str) -> bool:
    """Whether `mpiexec` is Open MPI's (other flags than MPICH's Hydra)."""
    try:
        text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in text or "OpenRTE" in text


def build_command(mpiexec: str, ranks: int, hosts: Sequence[str], env: dict[str, str],
                  target: Sequence[str], open_mpi: bool = False,
                  python: str = sys.executable) -> list[str]:
    """The mpiexec command line: `ranks` copies of ``python -m mpi4py <target>``, over
    `hosts` (round robin; none: this machine), with `env` set on every rank."""
    cmd = [mpiexec, "-n", str(ranks)]
    if open_mpi:
        if hosts:
            per_host = -(-ranks // len(hosts))
            cmd += ["--host", ",".join(f"{h}:{per_host}" for h in hosts)]
        for key, value in env.items():
            cmd += ["-x", f"{key}={value}"]
    else:
        if hosts:
            cmd += ["-hosts", ",".join(hosts)]
        for key, value in env.items():
            cmd += ["-genv", key, value]
    return cmd + [python, "-m", "mpi4py", *target]


def rank_environment(ranks: int, hosts: int, threads: int | None,
                     environ: dict[str, str]) -> dict[str, str]:
    """The thread budget the launcher sets on every rank: `threads` (``--threads``)
    everywhere, else cores ÷ ranks per machine where `environ` does not set it."""
    if threads is not None:
        return {var: str(threads) for var in THREAD_VARS}
    budget = str(thread_budget(ranks, hosts))
    return {var: budget for var in THREAD_VARS if not environ.get(var)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fastop.distributed.launch",
        description="Run a training script as N MPI ranks (fastop.distributed).")
    parser.add_argument("-n", "--nproc", type=int, required=True, metavar="N",
                        help="the number of ranks (processes) in all")
    parser.add_argument("--hosts", default="",
                        help="comma-separated machines to spread the ranks over (round "
                             "robin); default: this machine")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per rank (default: cores / ranks per machine)")
    parser.add_argument("--mpiexec", default=None,
                        help="the MPI launcher to use (default: the environment's)")
    parser.add_argument("-m", dest="module", default=None,
                        help="run a module (as python -m) instead of a script; what "
                             "follows is its arguments")
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("arguments", nargs="*", help="the script's arguments")
    return parser


_VALUED = {"-n", "--nproc", "--hosts", "--threads", "--mpiexec"}


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The launcher's own arguments, and what it runs (``script.py args`` or ``-m
    module args``): the launcher's options come first, and the first other word, or
    ``-m`` and its module, starts the target (whose arguments may look like options)."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return list(argv[:i]), list(argv[i:])
        if word in _VALUED:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return list(argv[:i]), list(argv[i:])
    return list(argv), []


def main(argv: Sequence[str] | None = None) -> int:
    """Launch the job; its exit status."""
    parser = _parser()
    own, target = _split(sys.argv[1:] if argv is None else argv)
    # the options checked, with the script or -m and its module (not what follows)
    args = parser.parse_args(own + target[:2 if target[:1] == ["-m"] else 1])
    if args.nproc < 1:
        parser.error(f"-n must be a positive number of ranks, got {args.nproc}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be a positive number, got {args.threads}")
    if not target or target == ["-m"]:
        parser.error("give the script to run (script.py [args...]) or -m module")
    hosts = [h for h in args.hosts.split(",") if h]
    try:
        mpiexec = args.mpiexec or find_mpiexec()
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 127
    env = rank_environment(args.nproc, max(1, len(hosts)), args.threads, dict(os.environ))
    cmd = build_command(mpiexec, args.nproc, hosts, env, target, _is_open_mpi(mpiexec))
    proc = subprocess.Popen(cmd, env={**os.environ, **env})
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:       # mpiexec got the Ctrl-C too: let it end the ranks
            proc.send_signal(signal.SIGINT)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
