"""fastop.io's shared argument checks: the message names owner, argument and value."""
import numpy as np
import pytest

from fastop.io._checks import check_bool, check_int, check_sized


def test_check_bool_accepts_numpy_bools_only_as_bools():
    assert check_bool("Owner", "flag", np.bool_(True)) is True
    with pytest.raises(TypeError, match="Owner: flag must be a bool, got int 1"):
        check_bool("Owner", "flag", 1)


@pytest.mark.parametrize("value, minimum, message", [
    (0, 1, "must be a positive integer, got 0"),
    (-1, 0, "must be a non-negative integer, got -1"),
    (True, 0, "got True"),
    (2.0, 1, "got 2.0"),
    (1, 2, "must be an integer >= 2, got 1"),
])
def test_check_int_refuses(value, minimum, message):
    with pytest.raises(ValueError, match=f"Owner: n .*{message}"):
        check_int("Owner", "n", value, minimum)


def test_check_int_and_sized_return_plain_values():
    assert type(check_int("Owner", "n", np.int64(3))) is int
    assert check_sized("Owner", "data", range(4)) == 4
    with pytest.raises(TypeError, match="Owner: data must have a length .* got generator"):
        check_sized("Owner", "data", (i for i in range(3)))
