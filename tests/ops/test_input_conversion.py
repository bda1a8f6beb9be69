"""One input conversion (``fastop.ops._dispatch.convert_inputs``): eager and static calls
take the same values, give them the same dtypes and refuse the same ones with the same
error. Eager makes Tensors and static makes Variables and constants, but what each input
becomes is decided once."""
from __future__ import annotations

import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import registry
from fastop.ops._dispatch import mode_guard

TENSORS = {"int32": np.array([1, 2, 3], np.int32), "bool": np.array([True, False, True]),
           "float32": np.array([0.5, 1.0, 2.0], np.float32),
           "float16": np.array([0.5, 1.0, 2.0], np.float16)}


class Opaque:
    """An object that is neither a tensor, an array nor a number."""

    def __repr__(self) -> str:
        return "Opaque()"


# (op, tensor dtype, the other input): good, mixed and bad values for the second input
CASES = [
    ("add", "int32", 2),
    ("add", "int32", 2.5),
    ("add", "bool", 2),
    ("add", "bool", True),
    ("add", "int32", [1, 2, 3]),
    ("add", "int32", [1, 2.5, 3]),          # a list holding a float: float32
    ("add", "int32", [True, False, True]),
    ("add", "bool", (1, 0, 1)),
    ("add", "float32", np.float64(2.5)),
    ("add", "int32", np.int64(7)),
    ("add", "float32", np.arange(3)),       # an int64 array meets a float32 tensor
    ("add", "int32", np.arange(3, dtype=np.int32)),
    ("add", "float16", 1.5),                # a storage dtype computes in float32
    ("add", "int32", ["a", "b", "c"]),      # a list holding non-numbers
    ("add", "int32", [1, "b", 3]),
    ("add", "int32", [[1], [1, 2]]),        # a ragged list
    ("add", "int32", 2 ** 40),              # does not fit the group's dtype
    ("add", "int32", np.int64(2 ** 40)),
    ("add", "int32", [1, 2 ** 40, 3]),
    ("add", "float32", Opaque()),
    ("add", "float32", "abc"),
    ("add", "float32", np.ones(3, np.complex64)),
    ("divide", "int32", 2),                 # int_to_float: integers compute in float32
    ("divide", "bool", [1, 2, 3]),
    ("exp", "float16", None),
    ("where", "bool", 1.5),                 # the condition is outside the dtype group
]


def outcome(call) -> tuple[str, str]:
    """('ok', the output's dtype) or (the exception's type, its message)."""
    try:
        return "ok", call().dtype.name
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _call(op_name: str, tensor, other):
    op = registry.get(f"fastop::{op_name}")
    if other is None:
        return lambda: op(tensor)
    if op_name == "where":
        return lambda: op(tensor, other, np.zeros(3, np.float32))
    return lambda: op(tensor, other)


@pytest.mark.parametrize("op_name, dtype, other", CASES)
def test_eager_and_static_give_the_same_dtype_or_error(op_name, dtype, other):
    eager = outcome(_call(op_name, fastop.to_tensor(TENSORS[dtype]), other))
    with mode_guard("static"), static.program_guard(static.Program(), static.Program()):
        x = static.data("x", [3], dtype)
        in_static = outcome(_call(op_name, x, other))
    assert eager == in_static
    assert eager[0] in ("ok", "TypeError", "ValueError", "OverflowError")
    if eager[0] != "ok":                    # errors name the op
        assert eager[1].startswith(f"fastop::{op_name}: "), eager[1]


def test_the_outcomes_are_the_documented_ones():
    """A few of CASES, spelled out (so the test above cannot pass by both modes agreeing
    on something wrong)."""
    ints, bools = fastop.to_tensor(TENSORS["int32"]), fastop.to_tensor(TENSORS["bool"])
    assert outcome(lambda: ints + [1, 2.5, 3]) == ("ok", "float32")
    assert outcome(lambda: bools + 2) == ("ok", "int64")
    assert outcome(lambda: ints + np.int64(7)) == ("ok", "int32")
    assert outcome(lambda: fastop.exp(fastop.to_tensor(TENSORS["float16"]))) == \
        ("ok", "float32")
    assert outcome(lambda: ints + ["a", "b", "c"]) == (
        "TypeError", "fastop::add: input 'y' must hold numbers, got ['a', 'b', 'c']")
    kind, message = outcome(lambda: ints + np.int64(2 ** 40))
    assert kind == "OverflowError" and message == (
        "fastop::add: input 'y' is 1099511627776, which does not fit the int32 the op "
        "computes in")
    kind, message = outcome(lambda: fastop.add(fastop.ones([3]), Opaque()))
    assert kind == "TypeError" and message.startswith(
        "fastop::add: input 'y' must be a tensor, an array or a number, got Opaque()")


def test_a_variadic_input_converts_each_tensor_the_same_way():
    concat = registry.get("fastop::concat")
    arrays = [np.ones((1, 2), np.float16), np.zeros((1, 2), np.float16)]
    eager = concat([fastop.to_tensor(a) for a in arrays], axis=0)
    with mode_guard("static"), static.program_guard(static.Program(), static.Program()):
        out = concat([static.data(f"x{i}", [1, 2], "float16") for i in range(2)], axis=0)
        bad = outcome(lambda: concat([static.data("y", [1, 2], "float32"), Opaque()]))
    assert eager.dtype.name == out.dtype.name
    assert bad == outcome(lambda: concat([fastop.ones([1, 2]), Opaque()]))
    assert bad[1].startswith("fastop::concat: input 'xs' must be a tensor")
