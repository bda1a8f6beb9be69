"""The runnable examples in fastop.static's docstrings."""
import doctest

import fastop
from fastop import static


def test_package_docstring_example(static_env):
    fastop.disable_static()          # the example switches modes itself
    result = doctest.testmod(static, verbose=False)
    assert result.attempted >= 4 and result.failed == 0
