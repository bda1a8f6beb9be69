"""Risky calls, each run in a fresh process: a segfault or abort is a failure of that one
test (naming the signal, with the faulthandler's traceback), not the end of the test
run. Each call must end in a Python exception with a clear message, or succeed.

Covered: huge shapes (eager, static, feeds), a malformed Plan, damaged and crafted
files for every loader, the executor under threads, and two former crashes in the
eager core (a tensor subclass skipping __init__, an array assigned to .grad)."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import fastop

# The directory fastop was imported from (site-packages after `make test`, src/ in a
# developer's PYTHONPATH run): the child process must load the same build.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(fastop.__file__))

PRELUDE = """\
import json, sys
import numpy as np
import fastop
from fastop import static
"""


def run_isolated(body, timeout=300):
    """Run `body` in a fresh interpreter; ``{"error": name or None, "message": ...}``.
    Fails the test if the process dies of a signal."""
    script = PRELUDE + "try:\n" + textwrap.indent(textwrap.dedent(body), "    ") + """
except BaseException as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)[:3000],
                      "notes": getattr(exc, "__notes__", [])}))
else:
    print(json.dumps({"error": None}))
"""
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if proc.returncode < 0:
        pytest.fail(f"the process was killed by {signal.Signals(-proc.returncode).name}:\n"
                    f"{proc.stderr[-4000:]}", pytrace=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_raises(result, errors, match):
    """The child ended in one of `errors` whose message (or a note) matches `match`."""
    import re
    assert result["error"] in errors, result
    text = "\n".join([result["message"], *result.get("notes", [])])
    assert result["message"].strip(), result
    assert re.search(match, text, re.S), result


TOO_BIG = ("ValueError", "MemoryError", "OverflowError")

RAISES = {
    "zeros of 2**80 elements": ("fastop.zeros([2**40, 2**40])", TOO_BIG, "."),
    "full of 2**70 elements": ("fastop.full([2**40, 2**30], 1.0)", TOO_BIG, "."),
    "randn of 2**70 elements": ("fastop.randn([2**40, 2**30])", TOO_BIG, "."),
    "arange of 2**62 elements": ("fastop.arange(0, 2**62, 1)", TOO_BIG, "."),
    "reshape to 2**80 elements": ("fastop.zeros([4]).reshape([2**40, 2**40])",
                                  ("ValueError",), "reshape"),
    "broadcast_to 2**80 elements": (
        "fastop.ops.fastop.broadcast_to(fastop.zeros([1]), shape=[2**40, 2**40])",
        ("ValueError",), "broadcast_to"),
    "matmul with a 4 TiB result": (
        "big = fastop.ops.fastop.broadcast_to(fastop.zeros([1, 1]), shape=[2**20, 2**20])\n"
        "fastop.matmul(big, big)", ("MemoryError",), "cannot allocate"),
    "to_tensor of a 4 TiB broadcast": (
        "fastop.to_tensor(np.broadcast_to(np.zeros(1, 'float32'), (2**40,)))",
        ("MemoryError",), "cannot allocate"),
    "gather at index 2**40": (
        "fastop.ops.fastop.gather(fastop.zeros([4]), fastop.to_tensor(np.array([2**40])))",
        ("IndexOutOfRangeError",), "index must be in"),   # an IndexError and a ValueError
    "static full of 2**80 elements": (
        """
        fastop.enable_static()
        y = fastop.ops.fastop.full(shape=[2**40, 2**40], fill_value=1.0, dtype="float32")
        static.Executor().run(fetch_list=[y])
        """, TOO_BIG, "fastop::full"),
    "static feed of a 4 TiB broadcast": (
        """
        fastop.enable_static()
        x = static.data("x", [None], "float32")
        static.Executor().run(feed={"x": np.broadcast_to(np.zeros(1, "float32"), (2**40,))},
                              fetch_list=[x * 2.0])
        """, ("MemoryError",), "."),
    "static data declared with 2**62 elements": (
        """
        fastop.enable_static()
        x = static.data("x", [2**62], "float32")
        static.Executor().run(feed={"x": np.zeros(3, "float32")}, fetch_list=[x * 2.0])
        """, ("ValueError",), r"feed 'x': expected shape \[4611686018427387904\]"),
    "Plan fetching a slot it does not have": (
        """
        from fastop._core.executor import SLOT_KINDS, Plan
        Plan(["a"], [SLOT_KINDS["feed"]]).set_io([], [], [5])
        """, ("ValueError",), "fetch slot 5 is not a slot"),
    "fastop.load of a member claiming 7 TiB": (
        """
        import io, os, tempfile, zipfile
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (2**40, 2**11)})
        path = os.path.join(tempfile.mkdtemp(), "big.npz")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("w.npy", header.getvalue())
            marker = io.BytesIO()
            np.lib.format.write_array(marker, np.array(1, "int64"))
            z.writestr("__fastop_state_dict__.npy", marker.getvalue())
        fastop.load(path)
        """, ("LoadError",), r"big\.npz.*member 'w' claims float32\[1099511627776, 2048\]"),
}


@pytest.mark.parametrize("case", list(RAISES))
def test_risky_call_raises_a_python_exception(case):
    body, errors, match = RAISES[case]
    assert_raises(run_isolated(body), errors, match)


def test_damaged_and_crafted_files_never_crash_a_loader():
    """Bit flips, truncations and byte runs pasted over a state dict, a program file
    and a parameter file, each read by its loader: LoadError or a load, never a signal
    (the in-process fuzz tests check the values; this one that nothing crashes)."""
    result = run_isolated("""
        import os, tempfile
        from fastop.serialization import LoadError
        rng = np.random.default_rng(7)
        d = tempfile.mkdtemp()
        fastop.save({"w": np.ones((3, 2), "float32"), "n": {"k": np.arange(4)}},
                    os.path.join(d, "s.npz"))
        fastop.enable_static()
        x = static.data("x", [None, 3], "float32")
        y = fastop.tanh(static.nn.fc(x, 2, name="fc")).sum()
        static.append_backward(y)
        startup = static.default_startup_program()
        static.Executor().run(startup)
        static.save(static.default_main_program(), os.path.join(d, "m"))
        loaders = {"s.npz": lambda p: fastop.load(p),
                   "m.program.json": lambda p: static.load_program(p[:-len(".program.json")]),
                   "m.params.npz": lambda p: static.load(static.default_main_program(),
                                                        p[:-len(".params.npz")])}
        outcomes = {"LoadError": 0, "loaded": 0}
        for name, load in loaders.items():
            path = os.path.join(d, name)
            data = open(path, "rb").read()
            variants = [data[:len(data) * k // 40] for k in range(40)]
            for _ in range(400):
                damaged = bytearray(data)
                for _ in range(int(rng.integers(1, 4))):
                    damaged[int(rng.integers(len(data)))] = int(rng.integers(256))
                variants.append(bytes(damaged))
            for variant in variants:
                open(path, "wb").write(variant)
                try:
                    load(path)
                    outcomes["loaded"] += 1
                except LoadError:
                    outcomes["LoadError"] += 1
            open(path, "wb").write(data)
        print(json.dumps(outcomes))
    """, timeout=600)
    assert result["error"] is None, result


def test_the_executor_under_threads_never_crashes():
    """Threads running the same programs at once (C kernels releasing the GIL, a
    py_func, a training program updating parameters), while another thread builds,
    runs and drops programs and collects garbage."""
    result = run_isolated("""
        import gc, threading
        fastop.enable_static()
        main, startup = static.Program(), static.Program()
        with static.program_guard(main, startup):
            x = static.data("x", [None, 64], "float32")
            h = fastop.tanh(static.nn.fc(x, 64, name="fc"))
            y = main.current_block().create_var(name="y", dtype="float32", shape=[None, 64])
            h = static.py_func(np.tanh, h, y, backward_func=lambda t, u, du:
                               np.asarray(du) * (1 - np.square(np.asarray(u))))
            loss = (h * h).mean()
            fastop.optimizer.SGD(0.01).minimize(loss)
        infer = main.clone()
        exe = static.Executor()
        exe.run(startup)
        errors = []

        def train(k):
            feed = {"x": np.random.default_rng(k).standard_normal((32, 64)).astype("float32")}
            try:
                for i in range(60):
                    exe.run(main if i % 2 else infer, feed=feed, fetch_list=[loss.name])
            except BaseException as exc:
                errors.append(exc)

        def churn():
            try:
                for k in range(60):
                    p = static.Program()
                    with static.program_guard(p, static.Program()):
                        z = static.data("z", [8], "float32")
                        w = fastop.tanh(z) + float(k)
                    exe.run(p, feed={"z": np.ones(8, "float32")}, fetch_list=[w])
                    if k % 10 == 0:
                        gc.collect()
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=train, args=(k,)) for k in range(6)]
        threads.append(threading.Thread(target=churn))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    """, timeout=600)
    assert result["error"] is None, result


def test_a_tensor_subclass_that_skips_init_raises():
    result = run_isolated("""
        class T(fastop.Tensor):
            def __init__(self):
                pass
        fastop.tanh(T())
    """)
    assert_raises(result, ("TypeError", "ValueError", "RuntimeError"), r"this T was never initialised")


def test_an_array_assigned_to_grad_then_cleared_raises_or_works():
    result = run_isolated("""
        x = fastop.to_tensor(np.ones(3, "float32"), stop_gradient=False)
        x.grad = np.ones(3, "float32")
        x.clear_grad()
    """)
    assert result["error"] is None or result["error"] in ("TypeError", "ValueError"), result
