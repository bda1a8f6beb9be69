"""The runnable examples in the docstrings of the eager modules."""
import doctest
import importlib

import pytest

MODULES = ["fastop._tensor", "fastop.autograd.gradcheck", "fastop.autograd.hooks",
           "fastop.autograd.py_layer", "fastop.autograd.saved_tensors_hooks"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
