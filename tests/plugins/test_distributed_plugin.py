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


def test_the_kernel_averages_through_the_process_group_fastop_distributed_installs(monkeypatch):
    """The plugin (below fastop.distributed) reaches the process group through
    fastop._job: installed by importing fastop.distributed, it is what the kernel calls."""
    import fastop.distributed
    from fastop import _job
    from fastop.distributed._buckets import average_flat
    assert _job._allreduce_mean is average_flat
    seen = []
    monkeypatch.setattr(_job, "_allreduce_mean",
                        lambda arrays: seen.append(len(arrays)) or average_flat(arrays) / 2)
    out = fastop.ops.dist.allreduce_mean([fastop.to_tensor([2.0, 4.0]), fastop.to_tensor([6.0])])
    assert seen == [2] and out.numpy().tolist() == [1.0, 2.0, 3.0]


def test_without_fastop_distributed_the_kernel_is_a_world_of_one_unless_launched(monkeypatch):
    from fastop import _job
    monkeypatch.setattr(_job, "_allreduce_mean", None)     # fastop.distributed not imported
    for var in _job.LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    xs = [fastop.to_tensor([1.0, 2.0]), fastop.to_tensor([[3.0]])]
    assert fastop.ops.dist.allreduce_mean(xs).numpy().tolist() == [1.0, 2.0, 3.0]
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(RuntimeError, match="dist::allreduce_mean: this process was started "
                                           "by an MPI launcher, but fastop.distributed"):
        fastop.ops.dist.allreduce_mean(xs)
