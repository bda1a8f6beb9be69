"""The plugin-contract compatibility suite: the packages next to this file were written
from fastop's documentation alone (README.md here), are installed into the test
environment through their ``fastop`` entry points (``make install``), and are never
edited to follow the code. Every op they define is

(a) called eagerly and compared with a numpy reference, its backward with central
    finite differences of that reference (all floating outputs weighted, and the first
    one alone: an output no gradient flows into);
(b) used in a static Program: ``fastop.static.append_backward`` gives the eager
    gradients, and ``SGD.minimize`` updates its parameters by them;
(c) saved with ``fastop.static.save`` and loaded with ``load_program`` in a fresh
    process, which gives the same outputs, gradients and updated parameters;
(d) checked with ``fastop.testing.opcheck`` on the samples of its plugin's
    ``fastop_op_samples`` hook.

A package that is not installed or not loaded is a failure, not a skip.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastop
from fastop import plugins, static
from fastop.ops import registry
from fastop.testing import INFERRED, Sample, assert_close, opcheck

HERE = Path(__file__).resolve().parent
COMPAT_DIR = HERE / "compat_dir"
DIRECTORY_MODULE = "compat_dir_ops"
DIRECTORY_PLUGINS = plugins.load_directory(COMPAT_DIR)   # docs/plugins.md section 1


def _package(pyproject: Path) -> tuple[str, str]:
    """(distribution name, entry point name) of a package's pyproject.toml (a regex, not
    tomllib, which Python 3.10 lacks)."""
    text = pyproject.read_text()
    name = re.search(r'(?m)^name\s*=\s*"([^"]+)"', text).group(1)
    entry = re.search(r'(?ms)^\[project\.entry-points\.fastop\]\s*^(\w+)\s*=', text).group(1)
    return name, entry


# namespace (the entry point's name, by the docs' convention) -> distribution
DISTRIBUTIONS = dict(sorted(_package(p)[::-1] for p in HERE.glob("*/pyproject.toml")))
LOADED = {p.name: p for p in plugins.list() if p.entry_point is not None}


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _topk(x, k):
    indices = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, indices, axis=-1), indices.astype(np.int64)


def _argmax_value(x):
    index = np.argmax(x, axis=-1)
    return np.max(x, axis=-1), index.astype(np.int64)


# Every op of the packages, with a numpy reference written from its doc line (outputs
# in order). An op missing here, or a package op missing from the registry, fails.
REFERENCES = {
    "compat_basic::scaled_tanh": lambda x, scale=1.0: (scale * np.tanh(x),),
    "compat_basic::split_sign": lambda x: (np.maximum(x, 0), np.minimum(x, 0)),
    "compat_basic::poly": lambda x, shift, power=2, coeffs=(1.0, 1.0): (
        coeffs[0] * x ** power + coeffs[1] * x + shift,),
    "compat_basic::cube": lambda x: (x ** 3,),
    "compat_basic::sigmoid_scaled": lambda x, t=1.0: (_sigmoid(t * x),),
    "compat_basic::select": lambda cond, x, y: (np.where(cond, x, y),),
    "compat_basic::reciprocal": lambda x: (1.0 / x,),
    "compat_basic::twice_and_square": lambda x: (2 * x, x * x),
    "compat_index::topk": _topk,
    "compat_index::argmax_value": _argmax_value,
    "compat_index::relu_mask": lambda x: (np.maximum(x, 0), x > 0),
    "compat_inputs::affine_k": lambda x, w, b: (x * w + (0 if b is None else b),),
    "compat_inputs::affine_c": lambda x, w, b: (x * w + (0 if b is None else b),),
    "compat_inputs::weighted_sum_k": lambda xs, w: (w * sum(xs),),
    "compat_inputs::prod_c": lambda xs: (np.prod(np.stack(xs), axis=0),),
    "compat_dir::softsign": lambda x: (x / (1 + np.abs(x)),),
    "compat_dir::softsign_backward": lambda x, dy: (dy / (1 + np.abs(x)) ** 2,),
    "compat_dir::pairsum": lambda x: (x[..., 0::2] + x[..., 1::2],),
}
OPS = sorted(REFERENCES)
LR = 0.1


# ----------------------------------------------------------------------------- helpers

def _op(name):
    if name not in registry:
        namespace = name.partition("::")[0]
        dist = DISTRIBUTIONS.get(namespace, f"the directory {COMPAT_DIR}")
        pytest.fail(f"{name} is not registered: {dist} was not loaded (see import fastop's "
                    f"PluginLoadWarning; make install installs tests/plugin_compat/*/)")
    return registry.get(name)


def _samples(name):
    samples = plugins.op_samples().get(name)
    if not samples:
        pytest.fail(f"{name} declares no samples in its fastop_op_samples hook")
    return samples


def _cases():
    """(op, sample index) for every sample every op's plugin declares; an op whose
    plugin is not loaded gives one case that fails."""
    loaded = plugins.op_samples()
    return [(name, i) for name in OPS for i in range(max(1, len(loaded.get(name, ()))))]


CASES = _cases()


def _split(sample):
    if isinstance(sample, Sample):
        return list(sample.inputs), dict(sample.attrs)
    return list(sample), {}


def _is_float(a):
    return a is not None and np.issubdtype(np.asarray(a).dtype, np.floating)


def _float_dtype(inputs):
    for value in inputs:
        for a in value if isinstance(value, list) else [value]:
            if _is_float(a):
                return np.asarray(a).dtype
    raise AssertionError("a sample without a floating input")


def _differentiable(op):
    names = [a.name for a in op.inputs]
    if op.grad_rule is None:
        return set()
    return set(names if op.differentiable is None else op.differentiable)


def _leaves(op, inputs):
    """[(input position, list position or None, array)] of the differentiable floating
    inputs of a sample."""
    wanted = _differentiable(op)
    found = []
    for i, (spec, value) in enumerate(zip(op.inputs, inputs)):
        if spec.name not in wanted:
            continue
        if isinstance(value, list):
            found += [(i, k, a) for k, a in enumerate(value) if _is_float(a)]
        elif _is_float(value):
            found.append((i, None, value))
    return found


def _weights(outputs, seed):
    """One fixed random weight array per floating output (the loss is the weighted sum)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) if _is_float(o)
            else None for o in outputs]


def _reference_loss(name, inputs, attrs, weights, first_only):
    outs = REFERENCES[name](*inputs, **attrs)
    terms = [np.sum(o * w) for o, w in zip(outs, weights) if w is not None]
    return terms[0] if first_only else sum(terms)


def _finite_differences(name, inputs, attrs, weights, first_only, leaves, eps=1e-6):
    """Central differences of the reference loss in float64, one array per leaf."""
    grads = []
    for i, k, _ in leaves:
        work = [[a.copy() for a in v] if isinstance(v, list)
                else (None if v is None else np.array(v, copy=True)) for v in inputs]
        target = work[i][k] if k is not None else work[i]
        grad = np.zeros_like(target, dtype=np.float64)
        for index in np.ndindex(target.shape):
            saved = target[index]
            target[index] = saved + eps
            up = _reference_loss(name, work, attrs, weights, first_only)
            target[index] = saved - eps
            down = _reference_loss(name, work, attrs, weights, first_only)
            target[index] = saved
            grad[index] = (up - down) / (2 * eps)
        grads.append(grad)
    return grads


def _as_tuple(out):
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def _check_outputs(name, actual, inputs, attrs, where):
    expected = REFERENCES[name](*inputs, **attrs)
    assert len(actual) == len(expected), f"{name} ({where}): {len(actual)} outputs, " \
                                         f"expected {len(expected)}"
    dtype = _float_dtype(inputs)
    for j, (a, e) in enumerate(zip(actual, expected)):
        e = np.asarray(e)
        want = dtype if np.issubdtype(e.dtype, np.floating) else e.dtype
        assert np.asarray(a).dtype == want, \
            f"{name} ({where}): output {j} is {np.asarray(a).dtype}, expected {want}"
        assert_close(a, e.astype(want), msg=f"{name} ({where}): output {j}",
                     **({"rtol": 1e-5, "atol": 1e-5} if want == np.float32 else {}))


# ----------------------------------------------------------------------------- packages

@pytest.mark.parametrize("namespace", sorted(DISTRIBUTIONS))
def test_package_is_installed_and_loaded(namespace):
    dist = DISTRIBUTIONS[namespace]
    assert dist in LOADED, (f"{dist} (tests/plugin_compat/) is not loaded: install it "
                            f"(make install does) and check import fastop's warnings")
    info = LOADED[dist]
    assert (info.entry_point, info.module, info.version) == \
        (namespace, f"{dist.replace('-', '_')}.plugin", "0.1.0")
    ops = {n for n in REFERENCES if n.startswith(namespace + "::")}
    assert ops <= set(info.ops), f"{dist}: missing {sorted(ops - set(info.ops))}"


def test_directory_op_module_is_loaded():
    infos = [p for p in plugins.list() if p.module == DIRECTORY_MODULE]
    assert len(infos) == 1, f"load_directory({COMPAT_DIR}) gave {DIRECTORY_PLUGINS}"
    (info,) = infos
    assert info.name == str(COMPAT_DIR) and info.version == "0.1"
    assert set(info.ops) == {"compat_dir::softsign", "compat_dir::softsign_backward",
                             "compat_dir::pairsum", "compat_dir::pairsum_grad"}
    assert registry.get("compat_dir::softsign").plugin == str(COMPAT_DIR)


def test_every_op_of_the_packages_has_a_reference():
    """New ops in a package need a reference here; backward kernel ops (``<op>_grad``,
    made by ``grad_kernel``) are checked through their forward ops."""
    defined = {name for namespace in [*DISTRIBUTIONS, "compat_dir"]
               for name in (op.name for op in registry.ops(namespace))}
    backward_kernels = {n for n in defined if n.endswith("_grad") and n[:-5] in defined}
    assert defined - backward_kernels == set(REFERENCES) & defined


# ----------------------------------------------------------------------------- (a) eager

def _eager_call(op, inputs, attrs, leaves):
    """Call op eagerly; the differentiable floating inputs are tensors that take
    gradients. Returns (outputs, leaf tensors)."""
    leaf_positions = {(i, k) for i, k, _ in leaves}
    tensors, leaf_tensors = [], {}

    def tensor(a, i, k):
        t = fastop.to_tensor(a, stop_gradient=(i, k) not in leaf_positions)
        if (i, k) in leaf_positions:
            leaf_tensors[i, k] = t
        return t

    for i, value in enumerate(inputs):
        if value is None:
            tensors.append(None)
        elif isinstance(value, list):
            tensors.append([tensor(a, i, k) for k, a in enumerate(value)])
        else:
            tensors.append(tensor(value, i, None))
    outs = _as_tuple(op(*tensors, **attrs))
    return outs, [leaf_tensors[i, k] for i, k, _ in leaves]


@pytest.mark.parametrize("first_only", [False, True], ids=["all_outputs", "first_output"])
@pytest.mark.parametrize("name,index", CASES)
def test_eager_forward_and_backward(name, index, first_only):
    op = _op(name)
    inputs, attrs = _split(_samples(name)[index])
    leaves = _leaves(op, inputs)
    outs, leaf_tensors = _eager_call(op, inputs, attrs, leaves)
    _check_outputs(name, [o.numpy() for o in outs], inputs, attrs, "eager")
    if not leaves:
        return
    weights = _weights([o.numpy() for o in outs], seed=index)
    float_outs = [(o, w) for o, w in zip(outs, weights) if w is not None]
    loss = None
    for o, w in float_outs[:1] if first_only else float_outs:
        term = (o * fastop.to_tensor(w)).sum()
        loss = term if loss is None else loss + term
    grads = fastop.grad([loss], leaf_tensors, allow_unused=True)
    if _float_dtype(inputs) != np.float64:
        assert all(g is not None and g.numpy().dtype == _float_dtype(inputs) for g in grads)
        return                                          # finite differences need float64
    expected = _finite_differences(name, inputs, attrs, weights, first_only, leaves)
    for (i, k, _), g, e in zip(leaves, grads, expected):
        label = f"{name}: gradient of input {op.inputs[i].name}" + \
            ("" if k is None else f"[{k}]")
        assert g is not None, f"{label} is None"
        assert_close(g.numpy(), e, rtol=1e-5, atol=1e-6, msg=label)


# ----------------------------------------------------------------------------- (b) static

def _build(name, index, train):
    """A static Program calling the op on one sample: the differentiable floating inputs
    are parameters initialized to the sample, the others data; the loss weights the
    floating outputs. ``train``: ``SGD.minimize(loss)``, else
    ``static.append_backward(loss)``. Returns a dict describing the Program."""
    op = _op(name)
    inputs, attrs = _split(_samples(name)[index])
    leaves = {(i, k) for i, k, _ in _leaves(op, inputs)}
    main, startup = static.Program(), static.Program()
    feed, params = {}, {}

    def variable(a, i, k):
        label = f"in_{op.inputs[i].name}" + ("" if k is None else f"_{k}")
        a = np.asarray(a)
        if (i, k) in leaves:
            params[label] = a
            return static.create_parameter(list(a.shape), a.dtype.name, name=label,
                                           initializer=lambda shape, dtype, a=a: a.copy())
        feed[label] = a
        return static.data(label, list(a.shape), a.dtype.name)

    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            args = [None if v is None else
                    [variable(a, i, k) for k, a in enumerate(v)] if isinstance(v, list)
                    else variable(v, i, None) for i, v in enumerate(inputs)]
            outs = _as_tuple(op(*args, **attrs))
            expected = REFERENCES[name](*inputs, **attrs)
            pairs = []
            if params:
                loss = None
                for j, w in enumerate(_weights(expected, seed=index)):
                    if w is None:
                        continue
                    feed[f"weight_{j}"] = w.astype(_float_dtype(inputs))
                    term = (outs[j] * static.data(f"weight_{j}", list(w.shape),
                                                  feed[f"weight_{j}"].dtype.name)).sum()
                    loss = term if loss is None else loss + term
                if train:
                    _, pairs = fastop.optimizer.SGD(learning_rate=LR).minimize(loss)
                else:
                    pairs = static.append_backward(loss)
    finally:
        fastop.disable_static()
    return {"main": main, "startup": startup, "feed": feed, "params": params,
            "fetch": [o.name for o in outs], "grads": {p.name: g.name for p, g in pairs},
            "inputs": inputs, "attrs": attrs}


def _run(built, scope):
    exe = static.Executor(fastop.CPUPlace())
    block = built["main"].global_block()
    names = built["fetch"] + list(built["grads"].values())
    values = exe.run(built["main"], feed=built["feed"],
                     fetch_list=[block.var(n) for n in names], scope=scope)
    return dict(zip(names, values))


def _fresh_scope(built):
    scope = static.Scope()
    static.Executor(fastop.CPUPlace()).run(built["startup"], scope=scope)
    return scope


@pytest.mark.parametrize("name,index", CASES)
def test_static_append_backward_gives_the_eager_gradients(name, index):
    built = _build(name, index, train=False)
    fetched = _run(built, _fresh_scope(built))
    inputs, attrs = built["inputs"], built["attrs"]
    _check_outputs(name, [fetched[n] for n in built["fetch"]], inputs, attrs, "static")
    op = registry.get(name)
    leaves = _leaves(op, inputs)
    assert set(built["grads"]) == set(built["params"]), \
        f"{name}: append_backward gave gradients of {sorted(built['grads'])}, " \
        f"expected {sorted(built['params'])}"
    if not leaves:
        return
    outs, leaf_tensors = _eager_call(op, inputs, attrs, leaves)
    weights = _weights([o.numpy() for o in outs], seed=index)
    eager = fastop.grad([o for o, w in zip(outs, weights) if w is not None], leaf_tensors,
                        grad_outputs=[fastop.to_tensor(w) for w in weights if w is not None],
                        allow_unused=True)
    for param, g in zip(built["params"], eager):
        assert g is not None, f"{name}: eager gradient of {param} is None"
        assert_close(fetched[built["grads"][param]], g.numpy(),
                     msg=f"{name}: static gradient of {param} vs eager")


@pytest.mark.parametrize("name,index", CASES)
def test_static_sgd_minimize_step(name, index):
    built = _build(name, index, train=True)
    scope = _fresh_scope(built)
    fetched = _run(built, scope)
    _check_outputs(name, [fetched[n] for n in built["fetch"]], built["inputs"],
                   built["attrs"], "static, training")
    for param, before in built["params"].items():
        grad = fetched[built["grads"][param]]
        assert_close(np.asarray(scope.find_var(param)), before - LR * grad,
                     msg=f"{name}: SGD update of {param}")


# ----------------------------------------------------------------------------- (c) save/load

LOAD_SCRIPT = textwrap.dedent("""
    import json, sys, traceback
    import numpy as np
    import fastop
    from fastop import static

    manifest = json.load(open(sys.argv[1]))
    results = {}
    for case in manifest:
        try:
            program = static.load_program(case["path"],
                                          allowed_modules=case["allowed_modules"])
            scope = static.Scope()
            exe = static.Executor(fastop.CPUPlace())
            static.load(program, case["path"], exe, scope=scope)
            feed = dict(np.load(case["path"] + ".feed.npz"))
            block = program.global_block()
            values = exe.run(program, feed=feed, scope=scope,
                             fetch_list=[block.var(n) for n in case["fetch"]])
            out = dict(zip(case["fetch"], values))
            out.update({"param:" + p: np.asarray(scope.find_var(p)) for p in case["params"]})
            np.savez(case["path"] + ".result.npz", **out)
            results[case["key"]] = "ok"
        except Exception:
            results[case["key"]] = traceback.format_exc()
    json.dump(results, open(sys.argv[2], "w"))
""")


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory):
    """Every case's training Program, saved before its step and run once here; then
    loaded and run in one fresh process. ``{case: (here, there or error text)}``."""
    root = tmp_path_factory.mktemp("saved")
    here, manifest = {}, []
    for name, index in CASES:
        key = f"{name}[{index}]"
        try:
            built = _build(name, index, train=True)
            scope = _fresh_scope(built)
            path = str(root / re.sub(r"\W", "_", key))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # a directory op's module is recorded
                static.save(built["main"], path, scope=scope)
            np.savez(path + ".feed.npz", **built["feed"])
            result = _run(built, scope)
            result.update({"param:" + p: np.asarray(scope.find_var(p))
                           for p in built["params"]})
            fetch = built["fetch"] + list(built["grads"].values())
            here[key] = result
            manifest.append({"key": key, "path": path, "fetch": fetch,
                             "params": list(built["params"]),
                             "allowed_modules": [DIRECTORY_MODULE]
                             if name.startswith("compat_dir::") else None})
        except (Exception, pytest.fail.Exception) as exc:   # reported by its own test
            here[key] = exc
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "load.py").write_text(LOAD_SCRIPT)
    done = subprocess.run([sys.executable, str(root / "load.py"), str(root / "manifest.json"),
                           str(root / "results.json")], capture_output=True, text=True,
                          env=dict(os.environ), cwd=root, timeout=600)
    assert done.returncode == 0, f"the loading process failed:\n{done.stderr[-3000:]}"
    there = json.loads((root / "results.json").read_text())
    return {key: (value, there.get(key), root / re.sub(r"\W", "_", key))
            for key, value in here.items()}


@pytest.mark.parametrize("name,index", CASES)
def test_saved_program_runs_the_same_in_a_fresh_process(reloaded, name, index):
    here, status, path = reloaded[f"{name}[{index}]"]
    if isinstance(here, BaseException):
        raise AssertionError(f"{name}: building, saving or running the training Program "
                             f"failed: {type(here).__name__}: {here}") from here
    assert status == "ok", f"{name}: load_program in a fresh process failed:\n{status}"
    there = dict(np.load(str(path) + ".result.npz"))
    assert set(there) == set(here)
    for key in here:
        assert_close(there[key], here[key], msg=f"{name}: {key} after save/load")


# ----------------------------------------------------------------------------- (d) opcheck

@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    op = _op(name)
    report = opcheck(name, _samples(name))
    meta = "ok" if op.meta_fn is not None else INFERRED     # an op without meta says so
    assert report["meta"] == meta and report["eager_static"] == "ok", report
    if op.grad_rule is not None:
        assert report["gradient"] == "ok", report
    assert all(v in ("ok", INFERRED) or v.startswith("skipped: ")
               for v in report.values()), report


# ----------------------------------------------------------------------------- patterns

def test_required_attribute_missing_is_a_type_error_naming_the_op():
    poly = _op("compat_basic::poly")
    with pytest.raises(TypeError, match="compat_basic::poly"):
        poly(fastop.to_tensor(np.ones(3)))


def test_attributes_are_converted_to_their_type():
    poly = _op("compat_basic::poly")
    x = np.array([0.5, -1.0, 2.0])
    y = poly(fastop.to_tensor(x), shift=1, power=3, coeffs=[2, 1])  # int for float: converted
    assert_close(y.numpy(), 2 * x ** 3 + x + 1.0)


def test_star_kernel_serves_dtypes_without_their_own(run_static):
    cube = _op("compat_basic::cube")
    x = np.array([1, -2, 3], np.int32)
    y = cube(fastop.to_tensor(x))
    assert y.numpy().dtype == np.int32 and y.numpy().tolist() == [1, -8, 27]
    (static_y,) = run_static(cube, x)
    assert static_y.dtype == np.int32 and static_y.tolist() == [1, -8, 27]
    y32 = cube(fastop.to_tensor(x.astype(np.float32)))
    assert y32.numpy().dtype == np.float32 and y32.numpy().tolist() == [1.0, -8.0, 27.0]


def test_promotes_computes_a_python_scalar_in_the_inputs_dtype(run_static):
    select = _op("compat_basic::select")
    cond = fastop.to_tensor(np.array([True, False, True]))
    x = fastop.to_tensor(np.array([1, 2, 3], np.int32))
    out = select(cond, x, 2.5)                      # int32 with a Python float: float32
    assert out.numpy().dtype == np.float32 and out.numpy().tolist() == [1.0, 2.5, 3.0]
    (static_out,) = run_static(lambda c, v: select(c, v, 2.5), cond.numpy(), x.numpy())
    assert static_out.dtype == np.float32 and static_out.tolist() == [1.0, 2.5, 3.0]
    same = select(cond, fastop.to_tensor(np.ones(3)), 0)   # an int scalar: float64 x's
    assert same.numpy().dtype == np.float64 and same.numpy().tolist() == [1.0, 0.0, 1.0]


def test_promotes_computes_the_promoted_tensors_in_one_dtype():
    """Registry.define: the promoted inputs "compute in one dtype with Python scalars and
    with each other"; float32 and float64 tensors together compute in float64."""
    select = _op("compat_basic::select")
    cond = fastop.to_tensor(np.array([True, False, True]))
    wide = select(cond, fastop.to_tensor(np.ones(3, np.float32)),
                  fastop.to_tensor(np.zeros(3, np.float64)))
    assert wide.numpy().dtype == np.float64 and wide.numpy().tolist() == [1.0, 0.0, 1.0]


def test_int_to_float_computes_integer_inputs_in_float32(run_static):
    reciprocal = _op("compat_basic::reciprocal")
    x = np.array([1, 2, 4], np.int32)
    y = reciprocal(fastop.to_tensor(x))
    assert y.numpy().dtype == np.float32 and y.numpy().tolist() == [1.0, 0.5, 0.25]
    (static_y,) = run_static(reciprocal, x)
    assert static_y.dtype == np.float32 and static_y.tolist() == [1.0, 0.5, 0.25]


@pytest.mark.parametrize("name", ["compat_inputs::affine_k", "compat_inputs::affine_c"])
def test_optional_input_may_be_left_out(name):
    op = _op(name)
    x = fastop.to_tensor(np.array([1.0, 2.0]), stop_gradient=False)
    w = fastop.to_tensor(np.array([3.0, 4.0]), stop_gradient=False)
    y = op(x, w)
    assert y.numpy().tolist() == [3.0, 8.0]
    dx, dw = fastop.grad([y.sum()], [x, w])
    assert dx.numpy().tolist() == [3.0, 4.0] and dw.numpy().tolist() == [1.0, 2.0]


def test_integer_outputs_take_no_gradient():
    topk = _op("compat_index::topk")
    x = fastop.to_tensor(np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.3]]), stop_gradient=False)
    values, indices = topk(x, k=2)
    assert indices.numpy().dtype == np.int64 and indices.stop_gradient
    assert indices.numpy().tolist() == [[1, 2], [0, 2]]
    (dx,) = fastop.grad([values.sum()], [x])
    assert dx.numpy().tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]


@pytest.mark.parametrize("name", ["compat_basic::cube", "compat_inputs::affine_c",
                                  "compat_inputs::prod_c"])
def test_composite_gradient_is_differentiable_again(name):
    """Double backward against finite differences of the first gradient."""
    op = _op(name)
    inputs, attrs = _split(_samples(name)[0])
    leaves = _leaves(op, inputs)
    outs, leaf_tensors = _eager_call(op, inputs, attrs, leaves)
    (first,) = fastop.grad([outs[0].sum()], leaf_tensors[:1], create_graph=True)
    second = fastop.grad([first.sum()], leaf_tensors, allow_unused=True)

    eps = 1e-6
    for (i, k, a), g in zip(leaves, second):
        numeric = np.zeros_like(a)
        for index in np.ndindex(a.shape):
            sums = []
            for sign in (1, -1):
                work = [[b.copy() for b in v] if isinstance(v, list)
                        else (None if v is None else v.copy()) for v in inputs]
                (work[i][k] if k is not None else work[i])[index] += sign * eps
                o, ts = _eager_call(op, work, attrs, leaves)
                (d,) = fastop.grad([o[0].sum()], ts[:1])
                sums.append(d.numpy().sum())
            numeric[index] = (sums[0] - sums[1]) / (2 * eps)
        got = np.zeros_like(a) if g is None else g.numpy()
        assert_close(got, numeric, rtol=1e-4, atol=1e-5,
                     msg=f"{name}: second derivative through input {op.inputs[i].name}")
