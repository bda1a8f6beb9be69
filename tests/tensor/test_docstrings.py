"""The runnable examples in the docstrings of the tensor-function modules."""
import doctest
import importlib

import pytest

MODULES = ["fastop.tensor.search", "fastop.tensor.logic", "fastop.tensor.inplace"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
