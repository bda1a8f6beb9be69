"""The runnable examples in the docstrings of fastop.metric."""
import doctest

from fastop.metric import metrics


def test_docstring_examples():
    result = doctest.testmod(metrics, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
