"""benchmarks/harness.py, the harness behind ``python -m fastop bench``: the suite API,
interleaved sampling, waiting for idle threads, one worker per thread count, the pyperf
files and the tables made from them.

Timing itself is never asserted: measurements use a fake clock, and end-to-end runs
check only the structure of what comes out.
"""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from itertools import groupby
from pathlib import Path

import pytest

pyperf = pytest.importorskip("pyperf")

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
if not (BENCHMARKS / "harness.py").is_file():
    pytest.skip("no benchmarks/harness.py next to tests/", allow_module_level=True)
spec = importlib.util.spec_from_file_location("fastop_bench_harness", BENCHMARKS / "harness.py")
harness = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)


def cells(line: str) -> list[str]:
    """The cells of a row of a Markdown table."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def write_bench(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"bench_{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


# -- the suite API ------------------------------------------------------------------------
def test_add_records_the_given_implementations_only():
    suite = harness.Suite(quick=True, threads=2)
    suite.add("ew", "tanh", fastop=print, numpy=len, target="≥ 1× numpy")
    case, = suite.cases
    assert case.impls == {"fastop": print, "numpy": len}
    assert (case.key, case.target) == ("ew/tanh", "≥ 1× numpy")
    assert (suite.quick, suite.threads, suite.torch) == (True, 2, None)


@pytest.mark.parametrize("kwargs", [{"fastop": None}, {"fastop": 3},
                                    {"fastop": print, "numpy": "np.tanh"}],
                         ids=["no-fastop", "fastop-not-callable", "numpy-not-callable"])
def test_add_refuses_a_bad_case_naming_it(kwargs):
    with pytest.raises(harness.BenchError, match="case g/n: fastop= must be callable, "
                                                 "numpy= and torch= callable or None"):
        harness.Suite().add("g", "n", **kwargs)


def test_add_refuses_a_case_defined_twice():
    suite = harness.Suite()
    suite.add("g", "n", fastop=print)
    with pytest.raises(harness.BenchError, match="case g/n: defined twice"):
        suite.add("g", "n", fastop=len)


# -- measuring ----------------------------------------------------------------------------
class FakeClock:
    """A clock that moves only when an implementation runs, by that implementation's
    fixed cost; it records which implementation ran, call by call."""

    def __init__(self):
        self.now, self.calls = 0.0, []

    def __call__(self):
        return self.now

    def impl(self, name, cost):
        def run():
            self.now += cost
            self.calls.append(name)
        return run


def test_measure_takes_medians_in_rotating_interleaved_rounds():
    clock = FakeClock()
    case = harness.Case("g", "n", {name: clock.impl(name, cost) for name, cost in
                                   (("fastop", 1e-4), ("numpy", 3e-4), ("torch", 2e-4))})
    settles = []
    measured = harness.measure(case, settle=lambda: settles.append(len(clock.calls)),
                               clock=clock)
    rounds = len(measured["fastop"][1])
    assert rounds == 9 and all(len(v) == rounds for _, v in measured.values())
    for name, cost in (("fastop", 1e-4), ("numpy", 3e-4), ("torch", 2e-4)):
        loops, values = measured[name]
        assert loops == round(0.025 / cost) and values == pytest.approx([cost] * rounds)
    # the samples are the last 3 * rounds blocks of calls: every round samples each
    # implementation once, and the order rotates from one round to the next
    blocks = [name for name, _ in groupby(clock.calls)][-3 * rounds:]
    orders = [blocks[i:i + 3] for i in range(0, len(blocks), 3)]
    assert all(sorted(o) == ["fastop", "numpy", "torch"] for o in orders)
    assert orders[0] != orders[1] != orders[2] and orders[0] == orders[3]
    assert len(settles) == 3 * rounds   # before every sample, whichever implementation


def test_measure_takes_fewer_rounds_of_slow_cases_down_to_the_minimum():
    clock = FakeClock()
    slow = harness.Case("g", "slow", {"fastop": clock.impl("fastop", 1.0)})
    assert len(harness.measure(slow, clock=clock)["fastop"][1]) == 6   # 6 s budget
    slower = harness.Case("g", "slower", {"fastop": clock.impl("fastop", 3.0)})
    assert len(harness.measure(slower, clock=clock)["fastop"][1]) == 5
    assert len(harness.measure(slower, quick=True, clock=clock)["fastop"][1]) == 3


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_wait_for_idle_threads_waits_for_a_busy_thread_and_not_for_a_sleeping_one():
    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    busy = threading.Thread(target=spin, args=(0.15,))
    busy.start()
    try:
        assert 0.05 < harness.wait_for_idle_threads(limit=5.0) < 5.0
    finally:
        busy.join()
    sleeper = threading.Thread(target=time.sleep, args=(1.0,))
    sleeper.start()
    try:
        assert harness.wait_for_idle_threads(limit=5.0) < 0.5
    finally:
        sleeper.join()


# -- loading bench modules --------------------------------------------------------------------
def test_load_modules_reports_broken_modules_and_keeps_the_others(tmp_path):
    write_bench(tmp_path, "a_ok", """
        def register(suite):
            suite.add("ok", "quick" if suite.quick else "full", fastop=lambda: None)
    """)
    write_bench(tmp_path, "b_raises", """
        def register(suite):
            raise RuntimeError("half-written")
    """)
    write_bench(tmp_path, "c_noregister", "X = 1\n")
    suite = harness.Suite(quick=True)
    errors = harness.load_modules(tmp_path, suite)
    assert [c.key for c in suite.cases] == ["ok/quick"]
    assert len(errors) == 2
    assert errors[0].startswith("bench_b_raises.py: RuntimeError: half-written (at ")
    assert errors[1] == "bench_c_noregister.py: no register(suite) function"


def test_repository_bench_modules_register_and_run_once():
    """Every benchmarks/bench_*.py registers in quick mode and each callable runs once
    (untimed): a bench module broken by an API change fails here, not in a run."""
    suite = harness.Suite(quick=True, threads=1, torch=None)
    assert harness.load_modules(BENCHMARKS, suite) == []
    assert suite.cases
    for case in suite.cases:
        for fn in case.impls.values():
            fn()


# -- end to end: worker processes, thread environment, files ----------------------------------
def run_bench(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "fastop", "bench", "--quick", "--no-torch",
                           *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_bench_runs_each_thread_count_in_its_own_process(tmp_path):
    bench = tmp_path / "benchmarks"
    write_bench(bench, "env", f"""
        import json, os
        def register(suite):
            record = {{n: os.environ.get(n) for n in {harness.THREAD_ENV!r}}}
            record["pid"] = os.getpid()
            path = {str(tmp_path)!r} + f"/env_{{suite.threads}}.json"
            open(path, "w").write(json.dumps(record))
            print("chatty bench module")
            suite.add("fake", "sum", fastop=lambda: sum(range(10)),
                      numpy=lambda: sum(range(20)), target="≥ 1.0× numpy")
    """)
    out, md = tmp_path / "results.json", tmp_path / "results.md"
    proc = run_bench("--threads", "1,2", "--dir", bench, "--json", out, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    envs = {t: json.loads((tmp_path / f"env_{t}.json").read_text()) for t in (1, 2)}
    for t, env in envs.items():
        assert {env[n] for n in harness.THREAD_ENV} == {str(t)}
    assert envs[1]["pid"] != envs[2]["pid"]

    suite = pyperf.BenchmarkSuite.load(str(out))   # the --json file is pyperf's format
    metas = [b.get_metadata() for b in suite]
    assert [(m["impl"], m["threads"]) for m in metas] == [
        ("fastop", 1), ("numpy", 1), ("fastop", 2), ("numpy", 2)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert [m["fastop_threads"] for m in metas] == [1, 1, min(2, cores), min(2, cores)]
    for m in metas:   # the machine record: pyperf's and the harness's own
        assert {"cpu_count", "python_version", "load_avg_1min", "date", "cpu_simd",
                "numpy_version", "fastop_version", "loops"} <= set(m)
        assert "torch_version" not in m and m["target"] == "≥ 1.0× numpy"
        assert m["command"] == f"fastop bench --quick --no-torch --threads 1,2 --dir {bench} " \
                               f"--json {out} --markdown {md}"
    assert all(len(b.get_values()) == 5 for b in suite)   # quick: 5 rounds of a fast case

    table = proc.stdout.splitlines()   # only the table: bench modules print to stderr
    assert cells(table[0]) == ["group", "case", "threads", "fastop", "numpy", "torch",
                               "vs numpy", "vs torch", "target", "met", "runs"] and len(table) == 4
    row = cells(table[2])
    assert row[:3] == ["fake", "sum", "1"] and row[5] == "—"
    assert row[8] == "≥ 1.0× numpy" and row[9] in {"✓", "✗"} and row[10] == "1"
    assert len({len(line) for line in table}) == 1   # the columns line up
    assert proc.stderr.count("chatty bench module") == 2
    markdown = md.read_text().splitlines()
    assert markdown[0].startswith("`fastop bench --quick --no-torch --threads 1,2")
    assert f"numpy {metas[0]['numpy_version']}" in markdown[2]
    assert "torch not used" in markdown[2]
    assert markdown[4:-2] == table and markdown[-1] == harness.MET_LEGEND


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
    assert [b.get_metadata()["case"] for b in pyperf.BenchmarkSuite.load(str(out))] == ["good"]
    assert "error [1 thread(s)] g/bad: ValueError: bad kernel" in proc.stderr
    assert "skipped" not in proc.stdout + proc.stderr
    proc = run_bench("--threads", "1", "--dir", tmp_path, "--filter", "no such case")
    assert proc.returncode == 1 and "no case ran (--filter 'no such case')" in proc.stderr


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


def test_bench_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "ratios.png"
    proc = run_bench("--threads", "1", "--filter", "matmul float32 256", "--plot", png)
    assert proc.returncode == 0, proc.stderr
    width, height = png_size(png)
    assert 400 <= width <= 800 and 150 <= height <= 500   # one case: a small figure


def test_bench_from_an_installed_fastop_uses_the_harness_in_dir(tmp_path):
    """Away from a checkout, ``--dir`` names a directory holding harness.py and the
    bench modules (a copy of a checkout's benchmarks/)."""
    bench = tmp_path / "mybench"
    write_bench(bench, "tiny", """
        def register(suite):
            suite.add("tiny", "noop", fastop=lambda: None, numpy=lambda: None)
    """)
    (bench / "harness.py").write_text((BENCHMARKS / "harness.py").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_bench("--threads", "1", "--dir", bench, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert cells(proc.stdout.splitlines()[2])[:2] == ["tiny", "noop"]


def test_worker_env_sets_the_thread_variables_and_finds_this_fastop(monkeypatch):
    import fastop
    root = os.path.realpath(os.path.dirname(os.path.dirname(fastop.__file__)))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(harness.site, "getsitepackages", lambda: [])   # a source checkout
    env = harness._worker_env(3)
    assert all(env[name] == "3" for name in harness.THREAD_ENV)
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"]
    monkeypatch.setattr(harness.site, "getsitepackages", lambda: [root])   # installed
    monkeypatch.delenv("PYTHONPATH")
    assert "PYTHONPATH" not in harness._worker_env(1)   # site-packages never goes there


# -- tables over several runs -----------------------------------------------------------------
def report(fastop_time, numpy_time, load=1.0, case="case"):
    """A pyperf suite as the worker writes it: one benchmark per implementation."""
    def bench(impl, value):
        return pyperf.Benchmark([pyperf.Run([value] * 3, collect_metadata=False, metadata={
            "name": f"g/{case} [{impl}, 1 thread(s)]", "group": "g", "case": case,
            "impl": impl, "threads": 1, "target": "≥ 1×", "load_avg_1min": load,
            "command": "fastop bench", "date": "2026-11-25 10:00:00"})])
    return pyperf.BenchmarkSuite([bench("fastop", fastop_time), bench("numpy", numpy_time)])


def test_table_takes_medians_of_times_and_of_the_per_run_ratios():
    rows = harness.table([report(1e-3, 4e-3), report(2e-3, 2e-3), report(4e-3, 12e-3)])
    assert len(rows) == 1
    row = rows[0]
    # times: medians 2 ms and 4 ms; ratios per run 4, 1, 3 -> median 3 (not 4 / 2 = 2)
    assert (row["fastop"], row["numpy"], row["torch"]) == (2e-3, 4e-3, None)
    assert row["vs numpy"] == pytest.approx(3.0) and row["vs torch"] is None
    assert (row["runs"], row["target"]) == (3, "≥ 1×")


def test_markdown_summary_names_every_run_and_its_load():
    text = harness.format_report([report(1e-3, 2e-3, load=0.5), report(1e-3, 3e-3, load=2.0)])
    lines = text.splitlines()
    assert lines[0] == "`fastop bench`: 2 run(s), 2026-11-25 10:00 to 2026-11-25 10:00"
    assert lines[2].endswith("load average 0.50 to 2.00")
    assert cells(lines[-3]) == ["g", "case", "1", "1 ms", "2.5 ms", "—", "2.50×", "—",
                                "≥ 1×", "", "2"]   # "≥ 1×" names no implementation


def test_bench_summarize_reads_json_reports_and_rejects_others(tmp_path):
    good = tmp_path / "run1.json"
    report(1e-3, 3e-3).dump(str(good))
    proc = run_bench("--summarize", good)
    assert proc.returncode == 0
    assert cells(proc.stdout.splitlines()[-3])[:7] == ["g", "case", "1", "1 ms", "3 ms", "—",
                                                       "3.00×"]
    pytest.importorskip("matplotlib")
    png = tmp_path / "medians.png"
    report(2e-3, 3e-3).dump(str(tmp_path / "run2.json"))
    proc = run_bench("--summarize", good, tmp_path / "run2.json", "--plot", png)
    assert proc.returncode == 0 and png_size(png)[0] >= 400
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"hello": 1}))
    proc = run_bench("--summarize", good, bad)
    assert proc.returncode == 2
    assert "cannot read" in proc.stderr and "other.json" in proc.stderr


# -- targets: the table's met column ------------------------------------------------------------
@pytest.mark.parametrize("target, goals", [
    ("≥ 3× torch, ≤ 4 µs", [("torch", 3.0, False, None), (None, 4e-6, False, None)]),
    ("< 0.5 s", [(None, 0.5, True, None)]),
    ("≤ 20 µs/run (Paddle 330 µs)", [(None, 20e-6, False, None)]),
    ("≤ 1.25 ms/step (Paddle 6.2 ms)", [(None, 1.25e-3, False, None)]),
    ("≥ 1.0× torch (1 thread), ≥ 0.9× numpy", [("torch", 1.0, False, 1),
                                                ("numpy", 0.9, False, None)]),
    ("≥ 3× torch.autograd.Function", [("torch", 3.0, False, None)]),
    ("≤ 1.5× numpy time; ≥ 10× faster than torch's DataLoader", [("numpy", 1 / 1.5, False, None)]),
    # what a row's numbers cannot say is not checked
    ("≤ 0.6 µs/op (numpy 0.57, torch 4.2 µs/op on the reference machine)", []),
    ("≤ 0.5 s for 10000 ops", []),
    ("≤ 2 % over a build without the hook (docs/profiling.md)", []),
    ("overhead over the numpy kernels ≤ 1/4 of torch's", []),
    ("", []),
])
def test_parse_target_keeps_the_parts_a_row_can_check(target, goals):
    parsed = [(g.against, g.bound, g.strict, g.threads) for g in harness.parse_target(target)]
    assert parsed == [(a, pytest.approx(b), s, t) for a, b, s, t in goals]


def row_of(target, fastop, numpy=None, torch=None, threads=1):
    return {"group": "eager", "case": "tanh", "threads": threads, "target": target, "runs": 1,
            "fastop": fastop, "numpy": numpy, "torch": torch,
            "vs numpy": numpy / fastop if numpy else None,
            "vs torch": torch / fastop if torch else None}


def test_target_mark_flags_a_row_that_misses_a_part_of_its_target():
    # the row: 4.73 µs against "≤ 4 µs" (and 4.2× torch, which it meets)
    slow = row_of("≥ 3× torch, ≤ 4 µs", 4.73e-6, torch=20e-6)
    assert harness.target_mark(slow) == "✗"
    assert [g.text for g in harness.missed_goals(slow)[1]] == ["≤ 4 µs"]
    assert harness.target_mark(row_of("≥ 3× torch, ≤ 4 µs", 3.9e-6, torch=20e-6)) == "✓"
    assert harness.target_mark(row_of("≥ 3× torch, ≤ 4 µs", 3.9e-6, torch=10e-6)) == "✗"
    assert harness.target_mark(row_of("< 0.5 s", 0.5)) == "✗"     # strict
    assert harness.target_mark(row_of("≤ 0.5 s", 0.5)) == "✓"
    assert harness.target_mark(row_of("≤ 1.5× numpy time", 1.6, numpy=1.0)) == "✗"
    assert harness.target_mark(row_of("≤ 1.5× numpy time", 1.4, numpy=1.0)) == "✓"
    # a goal for one thread count is not checked at another; nor one against a twin
    # that did not run; nor a target with nothing checkable
    assert harness.target_mark(row_of("≥ 1.0× torch (1 thread)", 2.0, torch=1.0)) == "✗"
    assert harness.target_mark(row_of("≥ 1.0× torch (1 thread)", 2.0, torch=1.0,
                                      threads=2)) == ""
    assert harness.target_mark(row_of("≥ 1.5× torch", 1.0, numpy=2.0)) == ""
    assert harness.target_mark(row_of("≤ 0.6 µs/op", 1.0)) == ""


def fake_suite(cases, threads=(1,), target="≥ 1.0× numpy", date="2026-11-28 10:00:00"):
    """A pyperf suite as the worker writes it, for ``cases`` [(group, case, fastop time,
    numpy time, torch time or None)] at each thread count."""
    benchmarks = []
    for t in threads:
        for group, case, *times in cases:
            for impl, value in zip(("fastop", "numpy", "torch"), times):
                if value is None:
                    continue
                benchmarks.append(pyperf.Benchmark([pyperf.Run(
                    [value] * 3, collect_metadata=False, metadata={
                        "name": f"{group}/{case} [{impl}, {t} thread(s)]", "group": group,
                        "case": case, "impl": impl, "threads": t, "target": target,
                        "command": "fastop bench --quick", "date": date,
                        "cpu_model_name": "Test CPU", "cpu_count": 2,
                        "load_avg_1min": 1.0})]))
    return pyperf.BenchmarkSuite(benchmarks)


def test_table_and_summary_flag_the_rows_that_miss_their_target():
    suite = fake_suite([("g", "fast", 1e-3, 2e-3, None), ("g", "slow", 2e-3, 1e-3, None)])
    lines = harness.format_table([suite]).splitlines()
    assert cells(lines[0])[8:] == ["target", "met", "runs"]
    assert [cells(line)[1] + " " + cells(line)[9] for line in lines[2:]] == ["fast ✓",
                                                                            "slow ✗"]
    assert harness.missed_summary([suite]) == [
        "✗ g/slow (1 thr): misses ≥ 1.0× numpy (fastop 2 ms, 0.50× numpy)"]
    assert harness.format_report([suite]).rstrip().endswith(harness.MET_LEGEND)


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_draws_one_readable_figure_of_many_cases(tmp_path):
    """80 cases in 10 groups at two thread counts (a full run's size): one figure about a
    screen wide and not a strip; a single case: a small one."""
    pytest.importorskip("matplotlib")
    cases = [(f"group{g}", f"case {c} with a name as long as the real ones have, f32",
              1e-3, 1e-3 * (0.5 + c / 4), 2e-3 if c % 2 else None)
             for g in range(10) for c in range(8)]
    many = tmp_path / "many.png"
    harness.plot([fake_suite(cases, threads=(1, 2))], str(many))
    width, height = png_size(many)
    assert 1000 <= width <= 1400 and 800 <= height <= 1.5 * width
    one = tmp_path / "one.png"
    harness.plot([fake_suite(cases[:1])], str(one))
    width, height = png_size(one)
    assert 400 <= width <= 800 and 150 <= height <= 500


def test_plot_columns_split_the_groups_in_order_and_evenly():
    assert harness._columns([5, 5, 5, 5], 2) == [[0, 1], [2, 3]]
    assert harness._columns([12, 2, 2, 2, 2, 2, 2], 2) == [[0], [1, 2, 3, 4, 5, 6]]
    assert harness._columns([6, 6, 2, 2, 2, 2], 2) == [[0, 1], [2, 3, 4, 5]]
    assert harness._columns([3, 4], 1) == [[0, 1]]
    assert harness._columns([30], 2) == [[0]]
