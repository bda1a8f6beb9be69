"""The benchmark harness: suite API, measurement bookkeeping, worker processes, JSON.

Timing itself is never asserted: measurements use a fake clock, and end-to-end runs
only check the structure of what comes out.
"""
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastop import benchmark
from fastop.benchmark import BenchError, Case, Result, Settings, Suite


def write_bench(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"bench_{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


# -- the suite API ------------------------------------------------------------------
def test_add_records_case_with_given_impls_only():
    suite = Suite(quick=True, threads=2)
    case = suite.add("ew", "tanh", fastop=lambda: 1, numpy=lambda: 2, work=10,
                     unit="elem", target="≥ 1× numpy")
    assert suite.cases == [case]
    assert set(case.impls) == {"fastop", "numpy"}
    assert (case.key, case.work, case.unit, case.target) == ("ew/tanh", 10.0, "elem",
                                                            "≥ 1× numpy")
    assert suite.quick is True and suite.threads == 2 and suite.torch is None


@pytest.mark.parametrize("kwargs, message", [
    ({"fastop": None}, "fastop= is required"),
    ({"fastop": 3}, "fastop= must be callable"),
    ({"fastop": print, "numpy": "np.tanh"}, "numpy= must be callable"),
    ({"fastop": print, "work": -1}, "work= must be a number >= 0"),
    ({"fastop": print, "setup": 1}, "setup= must be callable"),
], ids=["no-fastop", "fastop-not-callable", "numpy-not-callable", "negative-work",
        "setup-not-callable"])
def test_add_raises_on_bad_case(kwargs, message):
    suite = Suite()
    suite.module = "bench_x"
    with pytest.raises(BenchError, match=message) as info:
        suite.add("g", "n", **kwargs)
    assert "bench_x: case g/n" in str(info.value)


def test_add_raises_on_duplicate_case():
    suite = Suite()
    suite.add("g", "n", fastop=print)
    with pytest.raises(BenchError, match="defined twice"):
        suite.add("g", "n", fastop=print)


def test_add_flags_loop_lambdas_that_all_read_the_last_iteration():
    suite = Suite()
    suite.module = "bench_loop"
    for n in (10, 20):
        data = list(range(n))
        suite.add("late", f"sum {n}", fastop=lambda: sum(data), numpy=lambda: len(data))
        suite.add("bound", f"sum {n}", fastop=lambda data=data: sum(data))
    assert len(suite.cases) == 4
    assert suite.problems == [
        "bench_loop: case late/sum 20 calls the same functions on the same variables as "
        "case late/sum 10, so both measure the same thing (a lambda made in a loop reads "
        "the loop's variables when called: bind them as default arguments, "
        "lambda x=x: ...)"]


def test_add_accepts_the_same_code_on_different_data():
    def add_case(suite, n):
        data = list(range(n))
        suite.add("helper", f"sum {n}", fastop=lambda: sum(data))
    suite = Suite()
    add_case(suite, 10)
    add_case(suite, 20)
    suite.add("shared", "a", fastop=print, numpy=len)
    suite.add("shared", "b", fastop=print, numpy=repr)
    suite.add("setup", "small", fastop=print, setup=lambda: None)
    suite.add("setup", "large", fastop=print, setup=lambda: None)
    assert suite.problems == []


def test_load_modules_reports_suspicious_cases(tmp_path):
    write_bench(tmp_path, "loop", """
        def register(suite):
            for n in (1, 2):
                suite.add("g", f"n{n}", fastop=lambda: n)
    """)
    suite = Suite()
    errors = benchmark.load_modules(tmp_path, suite)
    assert len(errors) == 1 and "case g/n2 calls the same functions" in errors[0]
    assert suite.problems == [] and len(suite.cases) == 2


# -- ratios and measurement -----------------------------------------------------------
def test_speedup_is_other_time_over_fastop_time():
    assert benchmark.speedup(3.0, 1.5) == 2.0
    assert benchmark.speedup(None, 1.0) is None
    assert benchmark.speedup(1.0, None) is None


class FakeClock:
    """A clock that only moves when an implementation runs (by its fixed cost)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def impl(self, cost):
        def run():
            self.now += cost
        return run


def test_measure_case_medians_ratios_and_interleaving():
    clock = FakeClock()
    calls = []
    case = Case("g", "n", {"fastop": clock.impl(1e-4), "numpy": clock.impl(3e-4),
                           "torch": clock.impl(2e-4)},
                work=1000, setup=lambda: calls.append("setup"))
    log = []
    result = benchmark.measure_case(case, Settings(0.01, 5, 10.0, 3), threads=2,
                                    clock=clock, log=log)
    assert calls == ["setup"]
    assert result.times == pytest.approx({"fastop": 1e-4, "numpy": 3e-4, "torch": 2e-4})
    assert result.speedup_vs_numpy == pytest.approx(3.0)
    assert result.speedup_vs_torch == pytest.approx(2.0)
    assert result.samples == 5 and result.threads == 2
    # every round samples each implementation once, in a rotating order
    rounds = [log[i:i + 3] for i in range(0, len(log), 3)]
    assert len(rounds) == 5 and all(sorted(r) == ["fastop", "numpy", "torch"]
                                    for r in rounds)
    assert rounds[0] != rounds[1]
    assert result.to_json()["fastop_rate"] == pytest.approx(1000 / 1e-4)


def test_measure_case_takes_fewer_samples_of_slow_cases_down_to_the_minimum():
    clock = FakeClock()
    case = Case("g", "slow", {"fastop": clock.impl(0.5)})
    result = benchmark.measure_case(case, Settings(0.01, 9, 2.0, 3), clock=clock)
    assert result.samples == 4 and result.times["fastop"] == pytest.approx(0.5)
    result = benchmark.measure_case(case, Settings(0.01, 9, 0.1, 3), clock=clock)
    assert result.samples == 3


def test_measure_case_settles_before_every_sample_of_every_implementation():
    clock = FakeClock()
    log = []
    case = Case("g", "n", {"fastop": clock.impl(1e-4), "numpy": clock.impl(3e-4)})
    result = benchmark.measure_case(case, Settings(0.01, 5, 10.0, 3), clock=clock,
                                    log=log, settle=lambda: log.append("settle"))
    assert log[0::2] == ["settle"] * (2 * result.samples)
    assert sorted(log[1::2]) == ["fastop"] * result.samples + ["numpy"] * result.samples
    # settling is untimed
    assert result.times == pytest.approx({"fastop": 1e-4, "numpy": 3e-4})


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_wait_for_idle_threads_waits_for_a_busy_thread_and_not_for_a_sleeping_one():
    import threading
    import time

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    busy = threading.Thread(target=spin, args=(0.15,))
    busy.start()
    try:
        waited = benchmark.wait_for_idle_threads(limit=5.0)
    finally:
        busy.join()
    assert 0.05 < waited < 5.0
    sleeper = threading.Thread(target=time.sleep, args=(1.0,))
    sleeper.start()
    try:
        assert benchmark.wait_for_idle_threads(limit=5.0) < 0.5
    finally:
        sleeper.join()


def test_table_has_one_row_per_case_and_thread_count():
    rows = [Result("ew", "tanh", t, "elem", 1.0, "≥ 1.0× numpy",
                   times={"fastop": 1e-3, "numpy": 2e-3}) for t in (1, 2)]
    rows.append(Result("ew", "broken", 1, "elem", 1.0, "", error="boom"))
    lines = benchmark.format_table(rows).splitlines()
    assert lines[0].split()[:3] == ["group", "case", "threads"]
    assert len(lines) == 2 + 3
    assert "1 ms" in lines[2] and "2 ms" in lines[2] and "2.00×" in lines[2]
    assert "≥ 1.0× numpy" in lines[2] and "—" in lines[2]   # no torch time
    assert "error" in lines[4]


# -- loading bench modules and finding the directory ----------------------------------
def test_load_modules_reports_broken_modules_and_keeps_the_others(tmp_path):
    write_bench(tmp_path, "a_ok", """
        def register(suite):
            suite.add("ok", "q" if suite.quick else "full", fastop=lambda: None)
    """)
    write_bench(tmp_path, "b_raises", """
        def register(suite):
            raise RuntimeError("half-written")
    """)
    write_bench(tmp_path, "c_noregister", "X = 1\n")
    suite = Suite(quick=True)
    errors = benchmark.load_modules(tmp_path, suite)
    assert [c.key for c in suite.cases] == ["ok/q"]
    assert suite.cases[0].module == "bench_a_ok"
    assert len(errors) == 2
    assert "bench_b_raises.py: RuntimeError: half-written" in errors[0]
    assert "bench_c_noregister.py has no register(suite)" in errors[1]


def test_find_bench_dir_prefers_cwd_benchmarks(tmp_path, monkeypatch):
    write_bench(tmp_path / "benchmarks", "x", "def register(suite): pass\n")
    monkeypatch.chdir(tmp_path)
    assert benchmark.find_bench_dir() == tmp_path / "benchmarks"


def test_find_bench_dir_errors_clearly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(benchmark, "__file__", str(tmp_path / "site" / "fastop" / "b.py"))
    with pytest.raises(BenchError, match="no benchmarks found.*--dir DIR"):
        benchmark.find_bench_dir()
    with pytest.raises(BenchError, match="does not exist"):
        benchmark.find_bench_dir(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="no bench_.*py modules"):
        benchmark.bench_files(tmp_path / "empty")


# -- end to end: worker processes, thread environment, JSON ---------------------------
def run_bench(*args):
    return subprocess.run([sys.executable, "-m", "fastop", "bench", "--quick",
                           "--no-torch", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_bench_runs_each_thread_count_in_its_own_process(tmp_path):
    bench = tmp_path / "benchmarks"
    write_bench(bench, "env", f"""
        import json, os
        def register(suite):
            names = {benchmark.THREAD_ENV!r}
            record = {{n: os.environ.get(n) for n in names}}
            record["pid"] = os.getpid()
            path = {str(tmp_path)!r} + f"/env_{{suite.threads}}.json"
            open(path, "w").write(json.dumps(record))
            print("chatty bench module")
            suite.add("fake", "sum", fastop=lambda: sum(range(10)),
                      numpy=lambda: sum(range(20)), work=10, target="≥ 1.0× numpy")
    """)
    out, md = tmp_path / "results.json", tmp_path / "results.md"
    proc = run_bench("--threads", "1,2", "--dir", bench, "--json", out, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    envs = {t: json.loads((tmp_path / f"env_{t}.json").read_text()) for t in (1, 2)}
    for t, env in envs.items():
        assert {env[n] for n in benchmark.THREAD_ENV} == {str(t)}
    assert envs[1]["pid"] != envs[2]["pid"]

    report = json.loads(out.read_text())
    assert report["schema"] == benchmark.SCHEMA and report["threads"] == [1, 2]
    assert {"cpu", "simd", "cores", "platform", "python"} <= set(report["machine"])
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        assert "sse4_2" in report["machine"]["simd"]
    assert report["versions"]["numpy"] and report["date"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count()
    assert [(r["threads"], r["fastop_threads"], r["torch_threads"])    # fastop caps at cores
            for r in report["runs"]] == [(1, 1, None), (2, min(2, cores), None)]
    assert report["errors"] == []
    rows = report["results"]
    assert [(r["name"], r["threads"]) for r in rows] == [("sum", 1), ("sum", 2)]
    for r in rows:
        assert r["speedup_vs_numpy"] == pytest.approx(r["times"]["numpy"]
                                                      / r["times"]["fastop"])
        assert r["speedup_vs_torch"] is None and r["target"] == "≥ 1.0× numpy"
    table = proc.stdout.splitlines()   # only the table: module output goes to stderr
    assert table[0].split()[:3] == ["group", "case", "threads"] and len(table) == 4
    assert proc.stderr.count("chatty bench module") == 2
    markdown = md.read_text().splitlines()
    assert markdown[0].startswith("`python -m fastop bench --quick --no-torch --threads 1,2")
    assert report["machine"]["cpu"] in markdown[2]
    assert markdown[4].startswith("| group | case | threads |")
    assert [line.split(" | ")[1:3] for line in markdown[6:]] == [["sum", "1"], ["sum", "2"]]


def test_bench_filter_and_errors_are_reported(tmp_path):
    write_bench(tmp_path, "mixed", """
        def fails():
            raise ValueError("bad kernel")
        def register(suite):
            suite.add("g", "good", fastop=lambda: None)
            suite.add("g", "bad", fastop=fails)
            suite.add("other", "skipped", fastop=lambda: None)
    """)
    out = tmp_path / "r.json"
    proc = run_bench("--threads", "1", "--dir", tmp_path, "--filter", "G/", "--json", out)
    assert proc.returncode == 1
    report = json.loads(out.read_text())
    assert [(r["name"], bool(r["error"])) for r in report["results"]] == [
        ("good", False), ("bad", True)]
    assert report["errors"][0]["where"] == "g/bad"
    assert "ValueError: bad kernel" in report["errors"][0]["error"]


def test_bench_names_the_case_that_crashed_the_worker(tmp_path):
    write_bench(tmp_path, "crash", """
        import os
        def register(suite):
            suite.add("g", "fine", fastop=lambda: None)
            suite.add("g", "segfaults", fastop=lambda: os._exit(3))
    """)
    proc = run_bench("--threads", "1", "--dir", tmp_path)
    assert proc.returncode == 1
    assert "exited with code 3 while running g/segfaults" in proc.stderr
    assert "fine" in proc.stdout


def test_bench_missing_dir_is_a_usage_error(tmp_path):
    proc = run_bench("--dir", tmp_path / "nope")
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


def test_worker_env_sets_every_thread_variable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = benchmark._worker_env(3)
    assert all(env[name] == "3" for name in benchmark.THREAD_ENV)
    root = os.path.realpath(Path(benchmark.__file__).resolve().parents[1])
    if root in benchmark._installed_dirs():      # installed: found without PYTHONPATH
        assert env["PYTHONPATH"] == "/elsewhere"
    else:                                        # source checkout: goes first
        assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"]


def test_worker_env_never_puts_site_packages_on_pythonpath(monkeypatch):
    root = os.path.realpath(Path(benchmark.__file__).resolve().parents[1])
    monkeypatch.setattr(benchmark, "_installed_dirs", lambda: {root})
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert "PYTHONPATH" not in benchmark._worker_env(1)


# -- the repository's own bench modules -------------------------------------------------
REPO_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.skipif(not REPO_BENCHMARKS.is_dir(), reason="no benchmarks/ next to tests/")
def test_repository_bench_modules_register_and_run_once():
    """Every benchmarks/bench_*.py registers in quick mode and each of its callables runs
    (once, untimed): a bench module broken by an API change fails here, not in a run."""
    suite = Suite(quick=True, threads=1, torch=None)
    assert benchmark.load_modules(REPO_BENCHMARKS, suite) == []
    assert suite.cases
    for case in suite.cases:
        if case.setup is not None:
            case.setup()
        for fn in case.impls.values():
            fn()


# -- summarizing several runs -------------------------------------------------------
def _report(load, fastop_time, numpy_time):
    result = Result("g", "case", 1, "elem", 10.0, "≥ 1×",
                    times={"fastop": fastop_time, "numpy": numpy_time}, samples=5)
    return {"schema": benchmark.SCHEMA, "load_average": [load, load],
            "results": [result.to_json()]}


def test_summarize_takes_medians_of_times_and_of_per_run_ratios():
    reports = [_report(1.0, 1e-3, 4e-3), _report(2.0, 2e-3, 2e-3), _report(3.0, 4e-3, 12e-3)]
    table = benchmark.summarize(reports)
    row = [line for line in table.splitlines() if line.startswith("| g |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    # times: medians 2 ms and 4 ms; ratios per run 4, 1, 3 -> median 3 (not 4/2 = 2)
    assert cells[3:6] == ["2 ms", "4 ms", "—"]
    assert cells[6] == "3.00×" and cells[-1] == "3"
    assert "1.0, 2.0, 3.0" in table


def test_bench_summarize_reads_json_reports_and_rejects_others(tmp_path):
    good = tmp_path / "run1.json"
    good.write_text(json.dumps(_report(0.5, 1e-3, 3e-3)))
    proc = run_bench("--summarize", good)
    assert proc.returncode == 0 and "| g | case | 1 |" in proc.stdout
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"hello": 1}))
    proc = run_bench("--summarize", good, bad)
    assert proc.returncode == 2
    assert "other.json is not a fastop bench --json report" in proc.stderr
