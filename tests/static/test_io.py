"""Saving and loading programs and parameters: npz without pickle, atomic writes, ops
recorded by reference, a saved program run by a fresh process, unresolvable
references named."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastop
from fastop import static

FUNCS = '''
import numpy as np

def tanh(x):
    return np.tanh(x)

def tanh_grad(y, dy):
    return np.asarray(dy) * (1 - np.square(np.asarray(y)))
'''

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
        program = static.load_program({path!r})
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
    loaded = static.load_program(path)
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
    with pytest.raises(ValueError, match="cannot resolve py_func func "
                                         "'static_io_funcs:no_such_function'"):
        static.load_program(path)
    py["py_func"]["func"] = "static_io_funcs:tanh"
    builtin = next(op for op in data["ops"] if "op" in op)
    builtin.update(op="ghost::fc", plugin="fastop-ghost", plugin_version="1.2")
    with open(path + ".program.json", "w") as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match="needs op 'ghost::fc', provided by fastop-ghost 1.2"):
        static.load_program(path)


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
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


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
        static.load_program(main_path)
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
