"""The runnable examples in the docstrings of nn, optimizer, initializer, serialization."""
import doctest
import importlib

import pytest

MODULES = ["fastop.initializer", "fastop.nn.container", "fastop.nn.conv",
           "fastop.nn.functional", "fastop.nn.layer", "fastop.nn.norm",
           "fastop.optimizer.optimizer", "fastop.serialization"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
