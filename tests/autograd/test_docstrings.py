"""The runnable examples in the docstrings of the eager modules."""
import doctest
import importlib

import pytest

from fastop.ops import registry

NEEDS_OPS = {
    "fastop._tensor": ("multiply", "sum"),
    "fastop.autograd.gradcheck": ("multiply", "sum"),
    "fastop.autograd.py_layer": ("tanh", "square", "subtract", "multiply", "sum"),
    "fastop.autograd.saved_tensors_hooks": ("multiply", "sum"),
}


@pytest.mark.parametrize("module", sorted(NEEDS_OPS))
def test_docstring_examples(module):
    missing = [f"fastop::{n}" for n in NEEDS_OPS[module] if f"fastop::{n}" not in registry]
    if missing:
        pytest.skip(f"built-in op(s) not registered yet: {', '.join(missing)}")
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
