"""The built-in distributed plugin: dist::allreduce_mean is registered at import through
the same hook as any plugin, and runs eagerly and in the executor (in a world of one
process: the concatenation, against numpy)."""
import numpy as np
import pytest

import fastop
from fastop import static
from fastop.ops import registry
from fastop.plugins import loaded_plugins


def test_registered_by_fastops_distributed_plugin():
    op = registry.get("dist::allreduce_mean")
    assert (op.plugin, op.version) == ("fastop", fastop.__version__)
    (info,) = [p for p in loaded_plugins() if p.name == "fastop"]   # one entry, all ops
    assert "dist::allreduce_mean" in info.ops and "fastop::tanh" in info.ops
    assert op.differentiable_inputs == () and op.dtypes == ["float32", "float64"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_and_static_give_the_numpy_concatenation(dtype):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in ([2, 3], [4], [1, 1, 2])]
    want = np.concatenate([a.ravel() for a in arrays])
    eager = fastop.ops.dist.allreduce_mean([fastop.to_tensor(a) for a in arrays])
    assert eager.dtype.name == dtype and np.array_equal(eager.numpy(), want)
    main = static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, static.Program()):
            xs = [static.data(f"x{i}", a.shape, dtype) for i, a in enumerate(arrays)]
            out = fastop.ops.dist.allreduce_mean(xs)
    finally:
        fastop.disable_static()
    assert out.shape == [12]
    (got,) = static.Executor().run(main, feed={f"x{i}": a for i, a in enumerate(arrays)},
                                   fetch_list=[out])
    assert np.array_equal(got, want)


def test_a_bucket_of_unknown_size_is_refused_when_the_program_is_built():
    fastop.enable_static()
    try:
        with static.program_guard(static.Program(), static.Program()):
            x = static.data("x", [None, 3], "float32")
            with pytest.raises(ValueError, match=r"dist::allreduce_mean: input xs\[0\] has "
                                                 r"an unknown dim \(\[None, 3\]\)"):
                fastop.ops.dist.allreduce_mean([x])
    finally:
        fastop.disable_static()
