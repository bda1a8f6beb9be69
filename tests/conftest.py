"""Test-suite settings and fixtures shared by every test module."""
import os

import pytest
from hypothesis import settings

# CI runs the property tests on a fixed example sequence, so a submission's result does
# not depend on which random examples a run happens to draw; developers' runs explore.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def run_static():
    """Run ``fn(*variables)`` as a static program and return its outputs (numpy).

    Each array of `arrays` is fed through a ``static.data`` variable of its shape and
    dtype, in fresh main/startup programs and a fresh scope; ``before_run(scope)``, when
    given, runs after the startup program (to load parameters). ``runs`` > 1 returns the
    outputs of each run. The eager-equals-static checks use it: the same function, one
    op (or one layer) per program.
    """
    def run(fn, *arrays, before_run=None, runs=1):
        import fastop
        from fastop import static
        main, startup, scope = static.Program(), static.Program(), static.Scope()
        fastop.enable_static()
        try:
            with static.program_guard(main, startup), static.scope_guard(scope):
                names = [f"input_{i}" for i in range(len(arrays))]
                variables = [static.data(n, list(a.shape), a.dtype.name)
                             for n, a in zip(names, arrays)]
                out = fn(*variables)
                outs = list(out) if isinstance(out, (list, tuple)) else [out]
                exe = static.Executor(fastop.CPUPlace())
                exe.run(startup)
                if before_run is not None:
                    before_run(scope)
                results = [exe.run(main, feed=dict(zip(names, arrays)), fetch_list=outs)
                           for _ in range(runs)]
        finally:
            fastop.disable_static()
        return results[0] if runs == 1 else results
    return run
