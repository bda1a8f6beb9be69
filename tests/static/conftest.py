"""Fixtures of the static-mode tests: every test builds into fresh main/startup programs
and a fresh scope, in static mode."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import registry

TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def assert_arena_sound(plan):
    """No two arena slots whose live ranges overlap share a byte; the arena holds at
    least the largest live set."""
    layout = plan.arena_layout()
    for i, (_, off_a, size_a, first_a, last_a) in enumerate(layout):
        assert off_a + size_a <= plan.arena_bytes
        for _, off_b, size_b, first_b, last_b in layout[i + 1:]:
            if first_a <= last_b and first_b <= last_a:
                assert off_a + size_a <= off_b or off_b + size_b <= off_a
    assert plan.arena_bytes >= plan.min_live_bytes


@pytest.fixture(autouse=True)
def static_env():
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup), static.scope_guard(scope):
            yield main, startup, scope
    finally:
        fastop.disable_static()
        static.set_strict(False)


@pytest.fixture
def exe():
    return static.Executor(static.CPUPlace())


@pytest.fixture
def define_op():
    """``define_op(name, kernel, meta, inputs=("x",))``: a test op with a numpy kernel,
    removed from the registry after the test."""
    names = []

    def define(name, kernel, meta, inputs=("x",)):
        op = registry.define(name, inputs=inputs, outputs=["out"], meta=meta)
        op.kernel()(kernel)
        names.append(name)
        return op
    yield define
    for name in names:
        registry.remove(name)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
