"""The runnable examples in the docstrings of fastop.io."""
import doctest
import importlib

import pytest

MODULES = ["fastop.io", "fastop.io.sampler", "fastop.io.batch_sampler", "fastop.io.dataset",
           "fastop.io.collate", "fastop.io.dataloader", "fastop.io.worker"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
