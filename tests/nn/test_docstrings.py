"""The runnable examples in the docstrings of nn, optimizer, initializer, serialization."""
import doctest
import importlib

import pytest

from fastop.ops import registry

NEEDS_OPS = {"fastop.nn.layer": (), "fastop.initializer": (), "fastop.serialization": (),
             "fastop.nn.container": (), "fastop.nn.norm": (),
             "fastop.nn.functional": ("softmax_cross_entropy", "mean"),
             "fastop.optimizer.optimizer": ("fc", "mean", "multiply")}


@pytest.mark.parametrize("module", sorted(NEEDS_OPS))
def test_docstring_examples(module):
    missing = [n for n in NEEDS_OPS[module] if f"fastop::{n}" not in registry]
    if missing:
        pytest.skip(f"ops {missing} not built yet")
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
