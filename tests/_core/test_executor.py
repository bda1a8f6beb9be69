"""The compiled Plan itself: its builders refuse slots and kinds outside the plan (a
bad index would read or write C arrays out of bounds), and a clone runs the same
program with memory of its own."""
import numpy as np
import pytest

from fastop._core import elementwise
from fastop._core.executor import SLOT_KINDS, Plan
from fastop._core.storage import float32, from_numpy

ARENA, FEED, FRESH = SLOT_KINDS["arena"], SLOT_KINDS["feed"], SLOT_KINDS["fresh"]
F32 = float32.code          # the dtype code the plans below run in


def _tanh_plan():
    """feed x -> tanh -> arena t -> tanh -> fresh y (fetched)."""
    plan = Plan(["x", "t", "y"], [FEED, ARENA, FRESH])
    plan.add_ckernel(elementwise.tanh, F32, [0], [1], {})
    plan.add_ckernel(elementwise.tanh, F32, [1], [2], {})
    plan.set_io([("x", 0, np.zeros(4, "float32"))], [], [2])
    return plan


def test_a_plan_runs_and_its_clone_gives_the_same_with_its_own_arena():
    plan = _tanh_plan()
    x = np.linspace(-1, 1, 4, dtype="float32")
    (y,) = plan.run({"x": x}, {})
    np.testing.assert_allclose(np.asarray(y), np.tanh(np.tanh(x)), rtol=1e-6)
    clone = plan.clone()
    assert not clone.traced and clone.n_ops == plan.n_ops
    (y2,) = clone.run({"x": x}, {})
    np.testing.assert_array_equal(np.asarray(y2), np.asarray(y))
    assert clone.traced
    (t_plan,), (t_clone,) = plan.arena_layout(), clone.arena_layout()
    assert t_plan[0] == t_clone[0] == "t" and t_plan[2] == t_clone[2] == 16


@pytest.mark.parametrize("build,match", [
    (lambda: Plan(["a"], [99]), r"slot 'a' has kind 99"),
    (lambda: Plan(["a", "b"], [FEED]), r"2 names but 1 kinds"),
    (lambda: Plan(["a"], [FEED]).add_ckernel(elementwise.tanh, F32, [0], [5], {}),
     r"tanh: output slot 5 is not a slot of this plan \(it has 1\)"),
    (lambda: Plan(["a"], [FEED]).add_ckernel(elementwise.tanh, F32, [-2], [0], {}),
     r"input slot -2 is not a slot"),
    (lambda: Plan(["a"], [FEED]).add_python(lambda t: (t,), [3], [0]),
     r"input slot 3 is not a slot"),
    (lambda: Plan(["a"], [FEED]).add_python(lambda t: (t,), [0], [-1]),
     r"output slot -1 is not a slot"),
    (lambda: Plan(["a"], [FEED]).set_const(4, from_numpy(np.zeros(1))),
     r"constant slot 4 is not a slot"),
    (lambda: Plan(["a"], [FEED]).set_io([], [], [5]), r"fetch slot 5 is not a slot"),
    (lambda: Plan(["a"], [FEED]).set_io([("a", 2, np.zeros(1))], [], []),
     r"feed slot 2 is not a slot"),
    (lambda: Plan(["a"], [FEED]).set_io([], [("a", 9, None, F32, [2])], []),
     r"persistable slot 9 is not a slot"),
])
def test_builders_refuse_what_is_not_in_the_plan(build, match):
    with pytest.raises(ValueError, match=match):
        build()
