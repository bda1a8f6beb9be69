"""Saving and loading programs and parameters: npz without pickle, atomic writes, ops
recorded by reference, a saved program run by a fresh process, unresolvable
references named."""
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import fastop
from fastop import static
from fastop.serialization import LoadError, UntrustedCodeError

FUNCS = '''
import numpy as np

def tanh(x):
    return np.tanh(x)

def tanh_grad(y, dy):
    return np.asarray(dy) * (1 - np.square(np.asarray(y)))
'''

# saving py_func programs warns (how to load them back); one test checks the warning
pytestmark = pytest.mark.filterwarnings(
    "ignore:static.save. the program calls Python functions:UserWarning")

# The directory fastop was imported from (site-packages after `make test`, src/ in a
# developer's PYTHONPATH run): the fresh process must load the same build.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(fastop.__file__))


@pytest.fixture
def funcs(tmp_path, monkeypatch):
    (tmp_path / "static_io_funcs.py").write_text(FUNCS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import static_io_funcs
    yield static_io_funcs
    sys.modules.pop("static_io_funcs", None)


def _build(main, funcs):
    x = static.data("x", [None, 3], "float32")
    h = static.nn.fc(x, 4, name="l1")
    t = main.current_block().create_var(name="t", dtype="float32", shape=h.shape)
    t = static.py_func(funcs.tanh, h, t, backward_func=funcs.tanh_grad,
                       skip_vars_in_backward_input=h)
    out = static.nn.fc(t, 2, name="l2").sum()
    grads = static.append_backward(out)
    return out, grads


def test_round_trip_in_a_fresh_process(static_env, exe, funcs, tmp_path):
    main, startup, scope = static_env
    fastop.seed(3)
    out, grads = _build(main, funcs)
    exe.run(startup)
    xv = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    fetch = [out.name] + [g.name for _, g in grads]
    expected = exe.run(main, feed={"x": xv}, fetch_list=fetch)
    path = str(tmp_path / "model")
    static.save(main, path)
    assert sorted(n for n in os.listdir(tmp_path) if n != "__pycache__") == [
        "model.params.npz", "model.program.json", "static_io_funcs.py"]
    with np.load(path + ".params.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == ["l1.b_0", "l1.w_0", "l2.b_0", "l2.w_0"]

    script = textwrap.dedent(f'''
        import json, numpy as np, fastop
        from fastop import static
        program = static.load_program({path!r}, allowed_modules=["static_io_funcs"])
        static.load(program, {path!r})
        xv = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
        result = static.Executor().run(program, feed={{"x": xv}}, fetch_list={fetch!r})
        print(json.dumps([r.tolist() for r in result]))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, str(tmp_path)]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for e, g in zip(expected, got):
        np.testing.assert_allclose(np.asarray(g, dtype=e.dtype), e, rtol=1e-6)


def test_loaded_program_lists_the_same(static_env, funcs, tmp_path):
    main, _, _ = static_env
    _build(main, funcs)
    path = str(tmp_path / "m")
    static.save(main, path)
    loaded = static.load_program(path, allowed_modules=["static_io_funcs"])
    assert str(loaded) == str(main)


def test_unresolvable_references_are_named(static_env, funcs, tmp_path):
    main, _, _ = static_env
    _build(main, funcs)
    path = str(tmp_path / "m")
    static.save(main, path)
    with open(path + ".program.json") as f:
        data = json.load(f)
    py = next(op for op in data["ops"] if "py_func" in op)
    py["py_func"]["func"] = "static_io_funcs:no_such_function"
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    with pytest.raises(LoadError, match="cannot resolve py_func func "
                                        "'static_io_funcs:no_such_function'"):
        static.load_program(path, allowed_modules=["static_io_funcs"])
    py["py_func"]["func"] = "static_io_funcs:tanh"
    builtin = next(op for op in data["ops"] if "op" in op)
    builtin.update(op="ghost::fc", plugin="fastop-ghost", plugin_version="1.2")
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    with pytest.raises(LoadError, match="needs op 'ghost::fc', provided by fastop-ghost 1.2"):
        static.load_program(path, allowed_modules=["static_io_funcs"])


def test_functions_not_importable_cannot_be_saved_and_files_stay_intact(static_env, funcs,
                                                                        tmp_path):
    main, _, _ = static_env
    _build(main, funcs)
    path = str(tmp_path / "m")
    static.save(main, path)
    before = open(path + ".program.json").read()
    x = main.global_block().var("x")
    static.py_func(lambda v: v, x, None)
    with pytest.raises(ValueError, match=r"cannot save py_func func .*<lambda>"):
        static.save(main, path)
    assert open(path + ".program.json").read() == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".fastop-tmp")]


def test_load_checks_parameters(static_env, exe, funcs, tmp_path):
    main, startup, scope = static_env
    _build(main, funcs)
    exe.run(startup)
    path = str(tmp_path / "m")
    static.save(main, path)
    w = scope["l1.w_0"].copy()
    scope.set("l1.w_0", np.zeros_like(w))
    static.load(main, path)
    np.testing.assert_array_equal(scope["l1.w_0"], w)
    other = static.Program()
    with static.program_guard(other, static.Program()):
        static.create_parameter([5, 5], "float32", name="l1.w_0")
        static.create_parameter([2], "float32", name="extra")
    with pytest.raises(ValueError, match=r"no value for \['extra'\]"):
        static.load(other, path)
    with pytest.raises(ValueError, match=r"'l1.w_0' is float32\[5, 5\] in the program but "
                                         r"float32\[3, 4\] in the file"):
        static.load(other, path, var_list=[other.global_block().var("l1.w_0")])


@pytest.mark.skipif("activations::swish" not in fastop.ops.registry,
                    reason="the fastop-activations plugin is not installed")
def test_plugin_ops_run_and_are_saved_with_their_distribution(static_env, exe, tmp_path):
    main, _, _ = static_env
    swish = fastop.ops.activations.swish
    x = static.data("x", [3], "float64")
    y = swish(x, beta=2.0)
    (dx,) = static.gradients([y], [x])
    xv = np.array([-1.0, 0.5, 2.0])
    out, g = exe.run(main, feed={"x": xv}, fetch_list=[y, dx])
    s = 1 / (1 + np.exp(-2 * xv))
    np.testing.assert_allclose(out, xv * s)
    np.testing.assert_allclose(g, s + 2 * xv * s * (1 - s))
    path = str(tmp_path / "m")
    static.save(main, path)
    with open(path + ".program.json") as f:
        ops = json.load(f)["ops"]
    assert {(op["op"], op["plugin"]) for op in ops} == {
        ("activations::swish", "fastop-activations"),
        ("activations::swish_grad", "fastop-activations")}
    loaded = static.load_program(path)
    out2, g2 = exe.run(loaded, feed={"x": xv}, fetch_list=[y.name, dx.name])
    np.testing.assert_array_equal(out2, out)
    np.testing.assert_array_equal(g2, g)


def test_startup_and_training_programs_round_trip(static_env, exe, funcs, tmp_path):
    """Initializer configs, optimizer update ops and py_func grads survive a save/load:
    the loaded pair trains exactly like the original."""
    main, startup, _ = static_env
    fastop.seed(5)
    out, _ = _build(main, funcs)
    fastop.optimizer.SGD(learning_rate=0.05).minimize(out)     # the output as a loss
    main_path, startup_path = str(tmp_path / "main"), str(tmp_path / "startup")
    static.save(startup, startup_path)
    static.save(main, main_path)
    loaded_startup, loaded_main = static.load_program(startup_path), \
        static.load_program(main_path, allowed_modules=["static_io_funcs"])
    assert str(loaded_main) == str(main) and str(loaded_startup) == str(startup)
    scopes = static.Scope(), static.Scope()
    exe.run(startup, scope=scopes[0])
    exe.run(loaded_startup, scope=scopes[1])
    xv = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
    losses = []
    for _ in range(3):
        (a,) = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scopes[0])
        (b,) = exe.run(loaded_main, feed={"x": xv}, fetch_list=[out.name], scope=scopes[1])
        np.testing.assert_array_equal(a, b)
        losses.append(float(a))
    assert losses[2] < losses[1] < losses[0]


# ---------------------------------------------------------------- loading runs no code

PROBE = '''
import os
open(os.environ["FASTOP_PROBE_FILE"], "a").write(__name__ + " imported\\n")

def tanh(x):
    import numpy as np
    return np.tanh(x)
'''


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """Modules that record their import in a file: `probe_mod` and the package
    `probe_pkg` with submodule `probe_pkg.sub`."""
    record = tmp_path / "imports.txt"
    record.write_text("")
    monkeypatch.setenv("FASTOP_PROBE_FILE", str(record))
    (tmp_path / "probe_mod.py").write_text(PROBE)
    (tmp_path / "probe_pkg").mkdir()
    (tmp_path / "probe_pkg" / "__init__.py").write_text("")
    (tmp_path / "probe_pkg" / "sub.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield record
    for name in ("probe_mod", "probe_pkg", "probe_pkg.sub"):
        sys.modules.pop(name, None)


def _py_func_program(tmp_path, ref):
    """A saved one-py_func program whose function reference is `ref`."""
    main = static.Program()
    with static.program_guard(main, static.Program()):
        x = static.data("x", [2], "float64")
        static.py_func(np.tanh, x, main.current_block().create_var("y", "float64", [2]))
    path = str(tmp_path / "prog")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        static.save(main, path)
    with open(path + ".program.json") as f:
        data = json.load(f)
    next(op for op in data["ops"] if "py_func" in op)["py_func"]["func"] = ref
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    return path


@pytest.mark.parametrize("ref,module", [("this:s", "this"), ("os:system", "os"),
                                        ("probe_mod:tanh", "probe_mod"),
                                        ("probe_pkg.sub:tanh", "probe_pkg.sub")])
def test_a_program_naming_functions_loads_only_when_their_modules_are_allowed(
        static_env, tmp_path, probe, ref, module):
    path = _py_func_program(tmp_path, ref)
    modules_before = set(sys.modules)
    with pytest.raises(UntrustedCodeError,
                       match=rf"load_program: .*prog\.program\.json.* py_func func '{ref}' "
                             rf".*import module '{module}'.*allowed_modules=\['{module}'\].*"
                             rf"trust_code=True"):
        static.load_program(path)
    assert set(sys.modules) == modules_before            # nothing was imported
    assert probe.read_text() == ""


def test_allowed_modules_and_their_submodules_load(static_env, exe, tmp_path, probe):
    path = _py_func_program(tmp_path, "probe_pkg.sub:tanh")
    for allowed in (["probe_pkg.other"], ["probe"], ["probe_pkg.sub.deeper"]):
        with pytest.raises(UntrustedCodeError):
            static.load_program(path, allowed_modules=allowed)
    assert probe.read_text() == ""
    for kwargs in ({"allowed_modules": ["probe_pkg"]}, {"allowed_modules": ["probe_pkg.sub"]},
                   {"trust_code": True}):
        program = static.load_program(path, **kwargs)
        (y,) = exe.run(program, feed={"x": np.array([0.5, -1.0])}, fetch_list=["y"])
        np.testing.assert_allclose(y, np.tanh([0.5, -1.0]))
    assert probe.read_text() == "probe_pkg.sub imported\n"


@pytest.mark.parametrize("ref", ["static_io_funcs:np.tanh", "static_io_funcs:np",
                                 "static_io_funcs:tanh.__globals__",
                                 "static_io_funcs:__builtins__.eval"])
def test_an_allowed_module_gives_only_the_functions_it_defines(static_env, funcs, tmp_path,
                                                              ref):
    """A name reached through an allowed module (what it imported, dunders) is not a
    function defined there."""
    path = _py_func_program(tmp_path, ref)
    with pytest.raises(LoadError, match=rf"'{re.escape(ref)}'.*(not a function defined in "
                                        rf"module 'static_io_funcs'|not a valid reference)"):
        static.load_program(path, allowed_modules=["static_io_funcs"])


@pytest.mark.parametrize("ref", ["os", "os:", ":system", "os:system()", "os;x:y",
                                 "os:system:x", "../evil:f", 42, None])
def test_malformed_references_are_load_errors(static_env, tmp_path, ref):
    path = _py_func_program(tmp_path, ref)
    with pytest.raises(LoadError, match="not a valid reference"):
        static.load_program(path, trust_code=True)


def test_saving_python_functions_says_how_to_load_them(static_env, funcs, tmp_path):
    main, _, _ = static_env
    _build(main, funcs)
    with pytest.warns(UserWarning, match=r"static.save: the program calls Python functions "
                                         r"'static_io_funcs:tanh', 'static_io_funcs:tanh_grad'"
                                         r".*static.load_program\(path, "
                                         r"allowed_modules=\['static_io_funcs'\]\)"):
        static.save(main, str(tmp_path / "m"))


def test_programs_of_registry_ops_load_without_permission(static_env, exe, tmp_path):
    main, startup, _ = static_env
    x = static.data("x", [None, 3], "float32")
    y = static.nn.fc(x, 2, name="fc").sum()
    static.append_backward(y)
    path = str(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no warning: nothing to allow
        static.save(main, path)
    assert str(static.load_program(path)) == str(main)


# ---------------------------------------------------------------- malformed program files

def _saved_program_data(main, tmp_path):
    x = static.data("x", [None, 3], "float32")
    h = static.nn.fc(x, 4, name="l1")
    (fastop.tanh(h) * 2.0).sum()
    path = str(tmp_path / "m")
    static.save(main, path)
    with open(path + ".program.json") as f:
        return path, json.load(f)


def _var_named(data, name):
    return next(v for v in data["vars"] if v["name"] == name)


def _op_named(data, name):
    return next(op for op in data["ops"] if op.get("op") == name)


CRAFTED = {
    "wrong format": (lambda d: d.update(format="other"), "not a fastop program file"),
    "vars not a list": (lambda d: d.update(vars={"a": 1}), r"'vars' must be a list"),
    "var without name": (lambda d: d["vars"][0].pop("name"), r"variable #0: missing 'name'"),
    "unknown dtype": (lambda d: d["vars"][0].update(dtype="float16x"),
                      r"variable #0 .*dtype 'float16x'"),
    "negative dim": (lambda d: d["vars"][0].update(shape=[-5, 3]), r"variable #0 .*shape"),
    "shape not a list": (lambda d: d["vars"][0].update(shape="abc"), r"variable #0 .*shape"),
    "flag not a bool": (lambda d: d["vars"][0].update(persistable="yes"),
                        r"variable #0 .*'persistable' must be true or false"),
    "duplicate var": (lambda d: d["vars"].append(dict(d["vars"][0])), r"declared twice"),
    "unknown input": (lambda d: _op_named(d, "fastop::tanh").update(inputs=["nope"]),
                      r"op #\d+ \(fastop::tanh\).*no variable 'nope'"),
    "too few inputs": (lambda d: _op_named(d, "fastop::multiply")["inputs"].pop(),
                       r"op #\d+ \(fastop::multiply\).*2 inputs .*got 1"),
    "list for a plain input": (lambda d: _op_named(d, "fastop::tanh").update(
        inputs=[["x"]]), r"op #\d+ \(fastop::tanh\).*input 'x'"),
    "too many outputs": (lambda d: _op_named(d, "fastop::tanh")["outputs"].append("x"),
                         r"op #\d+ \(fastop::tanh\).*1 output"),
    "bad attribute": (lambda d: _op_named(d, "fastop::sum")["attrs"].update(keepdim="yes"),
                      r"op #\d+ \(fastop::sum\).*keepdim"),
    "unknown attribute": (lambda d: _op_named(d, "fastop::sum")["attrs"].update(bogus=1),
                          r"op #\d+ \(fastop::sum\).*bogus"),
    "output meta differs": (lambda d: _var_named(d, _op_named(d, "fastop::tanh")["outputs"][0])
                            .update(shape=[7, 7]),
                            r"op #\d+ \(fastop::tanh\).*float32\[7, 7\].*produces"),
    "constant of another shape": (lambda d: next(v for v in d["vars"] if "constant" in v)
                                  .update(constant=[1.0, 2.0]), r"constant"),
    "ragged constant": (lambda d: next(v for v in d["vars"] if "constant" in v)
                        .update(constant=[[1.0], 2.0], shape=[2]), r"constant"),
    "op not a dict": (lambda d: d["ops"].append(3), r"op #\d+: .*must be an object"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_crafted_program_files_raise_load_error(static_env, tmp_path, case):
    main, _, _ = static_env
    path, data = _saved_program_data(main, tmp_path)
    edit, match = CRAFTED[case]
    edit(data)
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    with pytest.raises(LoadError, match=r"load_program: cannot read '.*m\.program\.json': .*"
                                        + match):
        static.load_program(path)


@pytest.mark.parametrize("content", [b"", b"{", b"[1, 2]", b"\xff\xfe garbage",
                                     b"[" * 100000 + b"]" * 100000])
def test_program_files_that_are_not_json_raise_load_error(static_env, tmp_path, content):
    (tmp_path / "m.program.json").write_bytes(content)
    with pytest.raises(LoadError, match=r"load_program: cannot read '.*m\.program\.json'"):
        static.load_program(str(tmp_path / "m"))


def test_fuzzed_program_files_raise_load_error_or_load(static_env, tmp_path):
    main, _, _ = static_env
    path, _ = _saved_program_data(main, tmp_path)
    data = open(path + ".program.json", "rb").read()
    rng = np.random.default_rng(1)
    cases = []
    for _ in range(300):
        damaged = bytearray(data)
        damaged[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        cases.append(bytes(damaged))
    cases += [data[:len(data) * k // 20] for k in range(20)]
    loaded = 0
    for k, damaged in enumerate(cases):
        with open(path + ".program.json", "wb") as f:
            f.write(damaged)
        try:
            static.load_program(path)
            loaded += 1
        except LoadError as exc:
            assert "m.program.json" in str(exc)
        except Exception as exc:
            raise AssertionError(f"case {k}: {type(exc).__name__}: {exc}") from exc
    assert loaded < len(cases) // 2


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04" + b"\0" * 40])
def test_parameter_files_that_are_not_archives_raise_load_error(static_env, tmp_path,
                                                                content):
    main, _, _ = static_env
    static.create_parameter([2], "float32", name="w")
    (tmp_path / "m.params.npz").write_bytes(content)
    with pytest.raises(LoadError, match=r"static.load: cannot read '.*m\.params\.npz'"):
        static.load(main, str(tmp_path / "m"))


def test_function_references_in_attributes_are_checked_before_any_import(static_env,
                                                                         tmp_path, probe):
    """A callable attribute (``{"$ref": ...}``) is code too: every reference of the file
    is checked before the first is imported (here an allowed py_func precedes it)."""
    path = _py_func_program(tmp_path, "probe_mod:tanh")
    with open(path + ".program.json") as f:
        data = json.load(f)
    data["ops"].append({"op": "fastop::tanh", "inputs": ["x"], "outputs": ["x"],
                        "attrs": {"hook": [{"$ref": "os:system"}]}})
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    with pytest.raises(UntrustedCodeError, match=r"op #1 \(fastop::tanh\): attribute 'hook' "
                                                 r"'os:system' is Python code"):
        static.load_program(path, allowed_modules=["probe_mod"])
    assert probe.read_text() == ""


@pytest.mark.parametrize("kwargs,match", [
    (dict(allowed_modules="numpy"), r"allowed_modules must be a list of module names"),
    (dict(allowed_modules=["numpy", 3]), r"allowed_modules must be a list"),
    (dict(allowed_modules=["../evil"]), r"allowed_modules must be a list"),
    (dict(allowed_modules=5), r"allowed_modules must be a list"),
    (dict(trust_code="yes"), r"trust_code must be True or False"),
])
def test_load_program_checks_its_policy_arguments(static_env, tmp_path, kwargs, match):
    path = _py_func_program(tmp_path, "numpy:tanh")
    with pytest.raises(TypeError, match=r"static.load_program: " + match):
        static.load_program(path, **kwargs)


def test_allowed_modules_may_be_any_iterable(static_env, tmp_path):
    path = _py_func_program(tmp_path, "numpy:tanh")
    program = static.load_program(path, allowed_modules=(m for m in ["numpy"]))
    assert "py_func" in str(program)


# -- files that are not regular files, or too large to be programs -----------------------

def run_loader(script, timeout=60):
    """Run `script` in a fresh process (a loader that blocks fails this test only)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("suffix,call", [
    (".program.json", "static.load_program(prefix)"),
    (".params.npz", "static.load(static.Program(), prefix)"),
])
def test_loading_a_fifo_is_a_load_error_not_a_hang(tmp_path, suffix, call):
    prefix = str(tmp_path / "model")
    os.mkfifo(prefix + suffix)
    proc = run_loader(f"""
        from fastop import static
        from fastop.serialization import LoadError
        prefix = {prefix!r}
        try:
            {call}
        except LoadError as exc:
            print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert f"cannot read {prefix + suffix!r}: it is a FIFO (named pipe)" in proc.stdout


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "sparse"])
def test_a_program_file_that_never_ends_or_is_huge_is_refused_unread(tmp_path, target):
    """Under a 4 GiB address-space cap, reading any of these whole would fail with a
    MemoryError (and without one, fill the memory)."""
    prefix = str(tmp_path / "model")
    if target == "sparse":
        with open(prefix + ".program.json", "wb") as f:
            f.truncate(1 << 40)                 # 1 TiB of holes
    else:
        os.symlink(target, prefix + ".program.json")
    proc = run_loader(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from fastop import static
        from fastop.serialization import LoadError
        try:
            static.load_program({prefix!r})
        except LoadError as exc:
            print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert f"static.load_program: cannot read {prefix + '.program.json'!r}: it " in proc.stdout
    expected = "1099511627776 bytes, more than" if target == "sparse" else \
        "a character device"
    assert expected in proc.stdout


def test_float16_and_uint8_parameters_save_and_load(static_env, exe, tmp_path):
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        half = static.create_parameter([2, 3], "float16", name="half")
        byte = static.create_parameter([4], "uint8", name="byte")
    scope = static.Scope()
    values = {"half": np.arange(6, dtype="float16").reshape(2, 3),
              "byte": np.arange(4, dtype="uint8")}
    for name, value in values.items():
        scope.set(name, value)
    static.save(main, str(tmp_path / "m"), scope=scope)
    loaded = static.Scope()
    static.load(main, str(tmp_path / "m"), scope=loaded)
    for name, value in values.items():
        got = np.asarray(loaded.find_var(name))
        assert got.dtype == value.dtype
        np.testing.assert_array_equal(got, value)


def test_a_parameter_member_whose_header_length_lies_is_a_load_error(static_env, tmp_path):
    import io
    import zipfile
    out = io.BytesIO()
    np.lib.format.write_array(out, np.ones(3, "float32"))
    data = bytearray(out.getvalue())
    data[8:10] = (20).to_bytes(2, "little")
    with zipfile.ZipFile(tmp_path / "m.params.npz", "w") as z:
        z.writestr("w.npy", bytes(data))
    with pytest.raises(LoadError, match=r"m\.params\.npz.*member 'w' is not a \.npy array"):
        static.load(static.Program(), str(tmp_path / "m"))


SAVE_SCRIPT = '''
import sys, warnings
import numpy as np
import fastop
from fastop import static

def my_relu(x):
    return np.maximum(x, 0)

fastop.enable_static()
x = static.data("x", [None, 3], "float32")
h = static.nn.fc(x, 4, name="l1")
out = static.default_main_program().current_block().create_var(
    name="act", dtype="float32", shape=h.shape)
static.py_func(my_relu, h, out)
static.Executor().run(static.default_startup_program())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    static.save(static.default_main_program(), sys.argv[1])
print("WARNING:", caught[0].message)
if len(sys.argv) > 2:            # the same script loads it back
    program = static.load_program(sys.argv[1], allowed_modules=["__main__"])
    print("LOADED:", [op.type for op in program.global_block().ops])
'''


def test_a_py_func_of_a_script_is_named_at_save_and_at_load(tmp_path):
    """Issue 26: a py_func defined in the training script (module __main__) loads back
    only in that script; save says so, and another script's load error says which
    function and module it looked for and what to do."""
    (tmp_path / "train.py").write_text(SAVE_SCRIPT)
    path = str(tmp_path / "model")
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    proc = subprocess.run([sys.executable, str(tmp_path / "train.py"), path, "reload"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("functions of the script itself (module '__main__': my_relu) can be loaded "
            "back only by this same script: to load the program anywhere else, move them "
            "into a module") in proc.stdout
    assert "LOADED:" in proc.stdout and "py_func" in proc.stdout   # the same script: fine

    (tmp_path / "serve.py").write_text(
        f"from fastop import static\n"
        f"static.load_program({path!r}, allowed_modules=['__main__'])\n")
    proc = subprocess.run([sys.executable, str(tmp_path / "serve.py")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot resolve py_func func '__main__:my_relu': looked for function " \
           "'my_relu' in module '__main__'" in last, last
    assert f"the script running now ({tmp_path / 'serve.py'}) does not define it" in last
    assert "Move 'my_relu' into a module" in last and "allowed_modules=['my_ops']" in last


def test_a_missing_function_of_a_module_says_what_to_do(static_env, funcs, tmp_path):
    main, _, _ = static_env
    _build(main, funcs)
    path = str(tmp_path / "m")
    static.save(main, path)
    text = open(path + ".program.json").read().replace("static_io_funcs:tanh\"",
                                                        "static_io_funcs:gone\"")
    with open(path + ".program.json", "w") as f:
        f.write(text)
    with pytest.raises(LoadError, match=r"looked for function 'gone' in module "
                                        r"'static_io_funcs' \(AttributeError: .*\)\. Make "
                                        r"module 'static_io_funcs' importable here"):
        static.load_program(path, allowed_modules=["static_io_funcs"])
