"""fastop._env.env_flag: every boolean switch reads the same words, and a value that is
none of them is an error naming the variable (also at ``import fastop``)."""
import os
import subprocess
import sys

import pytest

from fastop._env import env_flag


def run_python(code, **env):
    """`code` in a fresh interpreter seeing this fastop, with `env` added."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(
                              p for p in sys.path if p)})


@pytest.mark.parametrize("value", ["1", "true", "True", "YES", "on", " on "])
def test_true_words(monkeypatch, value):
    monkeypatch.setenv("FASTOP_TEST_FLAG", value)
    assert env_flag("FASTOP_TEST_FLAG") is True


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "Off", ""])
def test_false_words(monkeypatch, value):
    monkeypatch.setenv("FASTOP_TEST_FLAG", value)
    assert env_flag("FASTOP_TEST_FLAG") is False


def test_unset_is_false(monkeypatch):
    monkeypatch.delenv("FASTOP_TEST_FLAG", raising=False)
    assert env_flag("FASTOP_TEST_FLAG") is False


@pytest.mark.parametrize("value", ["2", "ture", "enabled", "y"])
def test_anything_else_is_an_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("FASTOP_TEST_FLAG", value)
    with pytest.raises(ValueError, match=f"FASTOP_TEST_FLAG={value!r} is not a boolean"):
        env_flag("FASTOP_TEST_FLAG")


@pytest.mark.parametrize("variable", ["FASTOP_STRICT", "FASTOP_DISABLE_PLUGIN_AUTOLOAD",
                                      "FASTOP_STRICT_PLUGINS"])
def test_import_fastop_refuses_a_bad_switch(variable):
    proc = run_python("import fastop", **{variable: "sometimes"})
    assert proc.returncode != 0
    assert f"{variable}='sometimes' is not a boolean" in proc.stderr


@pytest.mark.parametrize("value, strict", [("Yes", "True"), ("off", "False")])
def test_py_func_strict_mode_reads_its_switch(value, strict):
    proc = run_python("import importlib; print(importlib.import_module("
                      "'fastop.static.py_func')._strict)",
                      FASTOP_STRICT=value)
    assert proc.stdout.strip() == strict, proc.stderr
