"""Every Cython module ships a .pyi stub beside it that declares its public names."""
import ast
import importlib
from pathlib import Path

import pytest

import fastop

PACKAGE = Path(fastop.__file__).parent
CYTHON_MODULES = sorted(
    ".".join(("fastop",) + p.relative_to(PACKAGE).with_suffix("").parts).split(".cpython")[0]
    for p in PACKAGE.rglob("*.so"))


def test_the_extension_modules_are_found():
    assert "fastop._core.storage" in CYTHON_MODULES and "fastop._tensor" in CYTHON_MODULES


@pytest.mark.parametrize("name", CYTHON_MODULES)
def test_stub_declares_the_public_names(name):
    module = importlib.import_module(name)
    stub = Path(module.__file__).parent / (name.rsplit(".", 1)[1] + ".pyi")
    assert stub.is_file(), f"{name}: no stub {stub.name}"
    tree = ast.parse(stub.read_text())
    declared = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 if isinstance(t, ast.Name)}
    public = getattr(module, "__all__", [])
    assert all(hasattr(module, n) for n in public), f"{name}: __all__ names a missing attribute"
    missing = sorted(set(public) - declared)
    assert not missing, f"{name}: {stub.name} does not declare {missing}"
