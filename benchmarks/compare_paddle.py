"""fastop against PaddlePaddle 3.3.1, side by side: a reference comparison.

The issues quote PaddlePaddle figures (static tanh → mean → gradients, a chain of tiny
static ops, the seed 001 training network, an eager numpy PyLayer, eager ``x = x + 1``
chains, a 784-256-256-10 MLP training step); this script measures both frameworks on
this machine, in one process, 1 thread, with the harness of ``python -m fastop bench``
(``fastop.benchmark.measure_case``: samples interleaved in rotating order, medians).

It is NOT part of ``python -m fastop bench`` (which collects ``bench_*.py`` only) and
Paddle is never a dependency of fastop: it needs a scratch venv with paddlepaddle::

    python3 -m venv /tmp/paddle-venv
    /tmp/paddle-venv/bin/pip install paddlepaddle==3.3.1 numpy pluggy scipy-openblas32
    FLAGS_enable_pir_api=0 PYTHONPATH=src /tmp/paddle-venv/bin/python \\
        benchmarks/compare_paddle.py [--json FILE] [--quick]

(fastop runs from the source tree, so the venv gets fastop's own dependencies too; the
in-place built extensions import under the venv's Python when it is the same
interpreter version as the project's .venv.) ``FLAGS_enable_pir_api=0``
selects Paddle's legacy Program IR, which ``py_func`` and ``Program.current_block()``
need. The fastop side of every case is built by benchmarks/bench_static.py,
bench_eager.py and bench_training.py; the Paddle side is written as the seeds write it.
Before timing, each pair is run on the same inputs and weights and their outputs must
agree (a comparison of different work would be worthless).
"""
import os

# One thread everywhere, and Paddle's legacy IR, before numpy/fastop/paddle load.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "FASTOP_NUM_THREADS"):
    os.environ[_name] = "1"
os.environ["FLAGS_enable_pir_api"] = "0"
# Paddle's executor runs the ops in the calling thread instead of handing them to its
# scheduler threads: Paddle's best one-thread setting (up to 2x faster on the (2, 3)
# programs when checked here). Its INFO log lines stay out of the output.
os.environ.setdefault("FLAGS_new_executor_serial_run", "1")
os.environ.setdefault("GLOG_minloglevel", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import fastop  # noqa: E402
from fastop import benchmark  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_eager  # noqa: E402
import bench_static  # noqa: E402
import bench_training  # noqa: E402

try:
    import paddle  # noqa: E402
    from paddle.autograd import PyLayer  # noqa: E402
    from paddle.base.layer_helper import LayerHelper  # noqa: E402
except ImportError:
    sys.exit("compare_paddle.py needs paddlepaddle: see the module docstring for the "
             "scratch venv")

paddle.set_device("cpu")
paddle.base.core.set_num_threads(1)   # Paddle's CPU math library threads
PADDLE_FLAGS = ("FLAGS_enable_pir_api", "FLAGS_new_executor_serial_run")


# ----------------------------------------------------------------------------- Paddle side

def legacy_tanh(x):
    """Append Paddle's built-in ``tanh`` op to the legacy Program. In Paddle 3.3.1
    ``paddle.tanh`` only accepts PIR values, and the legacy IR is the one ``py_func``
    needs; this is what ``paddle.tanh`` appended in Paddle 2.x."""
    helper = LayerHelper("tanh")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="tanh", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def paddle_small_program(use_py_func, x_value):
    """tanh → mean → gradient w.r.t. x on (2, 3), as seed 001 builds static programs."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 3], "float32")
        x.stop_gradient = False
        if use_py_func:
            y = main.current_block().create_var(name="y", dtype="float32", shape=[2, 3])
            y = paddle.static.py_func(func=bench_static.tanh, x=x, out=y,
                                      backward_func=bench_static.tanh_grad,
                                      skip_vars_in_backward_input=x)
        else:
            y = legacy_tanh(x)
        loss = paddle.mean(y)
        (dx,) = paddle.static.gradients([loss], [x])
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": x_value}
    return lambda: exe.run(main, feed=feed, fetch_list=[loss, dx], scope=scope)


def paddle_chain_program(x_value):
    """`bench_static.CHAIN` tanh ops in a row on (2, 3)."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        h = paddle.static.data("x", [2, 3], "float32")
        for _ in range(bench_static.CHAIN):
            h = legacy_tanh(h)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": x_value}
    return lambda: exe.run(main, feed=feed, fetch_list=[h], scope=scope)


def paddle_seed_step(weights, biases, x_value, labels):
    """Seed 001's ``simple_net`` (without its printing debug op) trained with SGD,
    its parameters set to ``weights``/``biases``."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, bench_static.SEED_SIZES[0]], "float32")
        label = paddle.static.data("label", [None], "int64")
        hidden = x
        for idx, size in enumerate(bench_static.SEED_SIZES[1:-1]):
            hidden = paddle.static.nn.fc(hidden, size=size)
            new_hidden = main.current_block().create_var(
                name=f"hidden_{idx}", dtype=hidden.dtype, shape=hidden.shape)
            hidden = paddle.static.py_func(func=bench_static.tanh, x=hidden,
                                           out=new_hidden,
                                           backward_func=bench_static.tanh_grad,
                                           skip_vars_in_backward_input=hidden)
        prediction = paddle.static.nn.fc(hidden, size=bench_static.SEED_SIZES[-1],
                                         activation="softmax")
        loss = paddle.nn.CrossEntropyLoss()(prediction, label)
        paddle.optimizer.SGD(learning_rate=bench_static.LR).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    values = [a for pair in zip(weights, biases) for a in pair]
    params = main.all_parameters()
    if [tuple(p.shape) for p in params] != [a.shape for a in values]:
        raise RuntimeError(f"seed net: Paddle's parameters "
                           f"{[tuple(p.shape) for p in params]} do not line up with "
                           f"fastop's {[a.shape for a in values]}")
    for param, value in zip(params, values):
        scope.find_var(param.name).get_tensor().set(value, paddle.CPUPlace())
    feed = {"x": x_value, "label": labels}
    return lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope)


class PaddleNumpyTanh(PyLayer):
    """Seed 004's cus_tanh, computing with numpy (the twin of bench_eager.NumpyTanh)."""

    @staticmethod
    def forward(ctx, x):
        y = paddle.to_tensor(np.tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensor()
        return paddle.to_tensor(dy.numpy() * (1 - np.square(y.numpy())))


def paddle_pylayer_step(a, g):
    """Forward + backward of the numpy PyLayer; returns (step, x, dz): the checks
    read x.grad."""
    x, dz = paddle.to_tensor(a, stop_gradient=False), paddle.to_tensor(g)

    def step():
        PaddleNumpyTanh.apply(x).backward(dz)
        x.clear_gradient(set_to_zero=False)
    return step, x, dz


def paddle_mlp_step(weights, biases, x_value, labels):
    """bench_training's network in Paddle eager: Linear/Tanh, CrossEntropyLoss, SGD."""
    layers = []
    for i, (w, b) in enumerate(zip(weights, biases)):
        linear = paddle.nn.Linear(*w.shape)
        linear.weight.set_value(w)
        linear.bias.set_value(b)
        layers.append(linear)
        if i < len(weights) - 1:
            layers.append(paddle.nn.Tanh())
    model = paddle.nn.Sequential(*layers)
    opt = paddle.optimizer.SGD(learning_rate=bench_training.LR,
                               parameters=model.parameters())
    loss_fn = paddle.nn.CrossEntropyLoss()
    tx, tl = paddle.to_tensor(x_value), paddle.to_tensor(labels)

    def step():
        loss = loss_fn(model(tx), tl)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
        return loss
    return step


# ----------------------------------------------------------------------------- checks

class Mismatch(Exception):
    """fastop and Paddle computed different things."""


def agree(what, fastop_values, paddle_values, rtol=1e-5, atol=1e-6):
    """Raise ``Mismatch`` unless the values (arrays or tensors) agree; returns the
    largest difference."""
    worst = 0.0
    for i, (f, p) in enumerate(zip(fastop_values, paddle_values, strict=True)):
        f, p = np.asarray(f, dtype=np.float64), np.asarray(p, dtype=np.float64)
        if f.shape != p.shape:
            raise Mismatch(f"{what}: output {i} has shape {f.shape} in fastop, "
                           f"{p.shape} in Paddle")
        if not np.allclose(f, p, rtol=rtol, atol=atol):
            raise Mismatch(f"{what}: output {i} differs by up to "
                           f"{np.abs(f - p).max():.3g} (rtol {rtol}, atol {atol})")
        worst = max(worst, float(np.abs(f - p).max()) if f.size else 0.0)
    return worst


def steps(fn, n):
    """The values of ``n`` successive calls (training steps: the losses)."""
    return [np.asarray(_first(fn())) for _ in range(n)]


def _first(value):
    return value[0] if isinstance(value, (list, tuple)) else value


# ----------------------------------------------------------------------------- cases

def static_mode_case(case):
    """Paddle static cases run with static mode on (as the seeds do)."""
    case.setup = paddle.enable_static
    return case


def eager_mode_case(case):
    case.setup = paddle.disable_static
    return case


def build_cases():
    """The cases, each checked for equal results; returns (cases, checks)."""
    cases, checks = [], {}

    def add(group, name, fastop_fn, paddle_fn, work, unit, target, mode):
        case = benchmark.Case(group, name, {"fastop": fastop_fn, "paddle": paddle_fn},
                              work, unit, target)
        cases.append(mode(case))

    # static: tanh → mean → gradients on (2, 3), built-in and py_func
    for use_py_func, paddle_ref in ((False, "330 µs"), (True, "430 µs")):
        name = "tanh→mean→grad (2,3) f32" + (" py_func" if use_py_func else "")
        run, x = bench_static.small_program(use_py_func)
        paddle_run = paddle_small_program(use_py_func, x)
        checks["static/" + name] = agree(name, run(), paddle_run())
        add("static", name, run, paddle_run, 1, "run",
            f"≤ 20 µs/run (Paddle {paddle_ref})", static_mode_case)

    # static: a chain of tiny ops
    name = f"chain of {bench_static.CHAIN} tanh (2,3) f32"
    run = bench_static.chain_program("fastop::tanh")
    paddle_run = paddle_chain_program(np.full((2, 3), 0.5, "float32"))
    checks["static/" + name] = agree(name, run(), paddle_run())
    add("static", name, run, paddle_run, bench_static.CHAIN, "op",
        "≤ 0.25 µs/op overhead (Paddle ~12 µs/op)", static_mode_case)

    # static: seed 001's network, one SGD step, identical initial weights
    rng = np.random.default_rng(0)
    x = rng.standard_normal((bench_static.BATCH, bench_static.SEED_SIZES[0])
                            ).astype(np.float32)
    labels = rng.integers(0, bench_static.SEED_SIZES[-1], bench_static.BATCH
                          ).astype(np.int64)
    make, weights, biases = bench_static.seed_static_step()
    run = make(x, labels)
    paddle_run = paddle_seed_step(weights, biases, x, labels)
    name = "seed net 784-4x200 py_func tanh-10 b64 SGD f32"
    checks["static/" + name + " (3 steps' losses)"] = agree(
        name, steps(run, 3), steps(paddle_run, 3))
    add("static", name, run, paddle_run, bench_static.BATCH, "sample",
        "≥ 5× Paddle static (Paddle 6.2 ms)", static_mode_case)

    paddle.disable_static()

    # eager: the numpy PyLayer, forward + backward on (2, 3) float64
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal((2, 3)), np.ones((2, 3))
    fx = fastop.to_tensor(a, stop_gradient=False)
    fdz = fastop.to_tensor(g)
    bench_eager.NumpyTanh.apply(fx).backward(fdz)
    paddle_step, px, pdz = paddle_pylayer_step(a, g)
    PaddleNumpyTanh.apply(px).backward(pdz)
    name = "numpy PyLayer tanh fwd+bwd 2x3 f64"
    checks["pylayer/" + name] = agree(name, [fx.grad.numpy()], [px.grad.numpy()],
                                      rtol=1e-12, atol=1e-14)
    fx.grad = None

    def fastop_pylayer_step():
        bench_eager.NumpyTanh.apply(fx).backward(fdz)
        fx.grad = None
    add("pylayer", name, fastop_pylayer_step, paddle_step, a.size, "elem",
        "Paddle 48 µs (fastop: ≥ 3× torch.autograd.Function)", eager_mode_case)

    # eager: x = x + 1, 100 times on (4,) float32, without and with autograd
    ones = np.ones(4, dtype=np.float32)
    for tracked, target in ((False, "≤ 0.6 µs/op (Paddle 1.5 µs/op)"),
                            (True, "≤ 1.0 µs/op (Paddle 2.3 µs/op)")):
        ft = fastop.to_tensor(ones, stop_gradient=not tracked)
        pt = paddle.to_tensor(ones, stop_gradient=not tracked)
        name = f"x+1 chain x{bench_eager.CHAIN} (4,) f32" + (" autograd" if tracked else "")
        checks["eager/" + name] = agree(name, [bench_eager._chain(ft)],
                                        [bench_eager._chain(pt)])
        add("eager", name, lambda ft=ft: bench_eager._chain(ft),
            lambda pt=pt: bench_eager._chain(pt), bench_eager.CHAIN, "op", target,
            eager_mode_case)

    # eager: the 784-256-256-10 tanh MLP training step, identical initial weights
    rng = np.random.default_rng(0)
    x = rng.standard_normal((bench_training.BATCH, bench_training.SIZES[0])
                            ).astype(np.float32)
    labels = rng.integers(0, bench_training.SIZES[-1], bench_training.BATCH
                          ).astype(np.int64)
    reference = bench_training.fastop_model(fastop.nn.Tanh)
    linears = [layer for layer in reference if isinstance(layer, fastop.nn.Linear)]
    weights = [layer.weight.numpy().copy() for layer in linears]
    biases = [layer.bias.numpy().copy() for layer in linears]
    run = bench_training.fastop_step(fastop.nn.Tanh, x, labels)
    paddle_run = paddle_mlp_step(weights, biases, x, labels)
    name = "MLP 784-256-256-10 tanh b64 SGD f32"
    checks["training/" + name + " (3 steps' losses)"] = agree(
        name, steps(run, 3), steps(paddle_run, 3))
    add("training", name, run, paddle_run, bench_training.BATCH, "sample",
        "≥ 1.2× torch (Paddle 3.3 ms)", eager_mode_case)
    return cases, checks


# ----------------------------------------------------------------------------- report

HEADER = ["case", "fastop", "paddle", "paddle/fastop", "target"]


def table(results):
    rows = [[f"{r.group}/{r.name}", benchmark.format_time(r.times["fastop"]),
             benchmark.format_time(r.times["paddle"]),
             benchmark.format_ratio(benchmark.speedup(r.times["paddle"], r.times["fastop"])),
             r.target] for r in results]
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(row):
        return "  ".join(cell.rjust(w) if 1 <= i <= 3 else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *map(line, rows)])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    parser.add_argument("--filter", metavar="SUBSTR",
                        help="only cases whose 'group/name' contains SUBSTR")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    cases, checks = build_cases()
    for what, diff in checks.items():
        print(f"same results: {what} (max |fastop - paddle| = {diff:.2g})", file=sys.stderr)
    settings = benchmark.Settings.for_mode(args.quick)
    results = []
    for case in cases:
        if args.filter and args.filter.lower() not in case.key.lower():
            continue
        results.append(benchmark.measure_case(case, settings, threads=1))
        r = results[-1]
        print(f"  {r.group}/{r.name}: fastop {benchmark.format_time(r.times['fastop'])}, "
              f"paddle {benchmark.format_time(r.times['paddle'])}", file=sys.stderr)
    print(table(results))
    if args.json:
        report = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["compare_paddle.py", *(argv or sys.argv[1:])]),
            "machine": benchmark.machine_info(),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "versions": {"fastop": fastop.__version__, "paddle": paddle.__version__,
                         "numpy": version("numpy")},
            "paddle_flags": paddle.get_flags(list(PADDLE_FLAGS)),
            "threads": {"fastop": fastop.get_num_threads()},
            "checks_max_abs_diff": checks,
            "results": [dict(r.to_json(),
                             paddle_over_fastop=benchmark.speedup(r.times["paddle"],
                                                                  r.times["fastop"]))
                        for r in results],
        }
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
        print(f"results written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
