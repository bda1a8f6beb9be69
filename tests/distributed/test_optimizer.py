"""DistributedOptimizer in a world of one process: static minimize places one
dist::allreduce_mean per bucket between the backward ops and the update ops, which read
the averaged gradients; training equals the plain optimizer's, eager and static; the
rest is the wrapped optimizer's. Several ranks: tests/distributed/test_mpi.py."""
import numpy as np
import pytest

import fastop
from fastop import nn, optimizer, static
from fastop.distributed import DistributedOptimizer

SIZES = (6, 5, 3)


def net():
    fastop.seed(1)
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.Tanh(),
                         nn.Linear(SIZES[1], SIZES[2]))


def batches(n=4):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((8, SIZES[0])).astype("float32"),
             rng.integers(0, SIZES[-1], 8)) for _ in range(n)]


def build_static(distributed, **caps):
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, SIZES[0]], "float32")
            y = static.data("y", [None], "int64")
            model = net()
            loss = nn.CrossEntropyLoss()(model(x), y)
            opt = optimizer.Momentum(0.1, momentum=0.9)
            if distributed:
                opt = DistributedOptimizer(opt, **caps)
            update_ops, params_grads = opt.minimize(loss)
    finally:
        fastop.disable_static()
    return main, startup, model, loss, update_ops, params_grads


def test_static_minimize_puts_one_allreduce_per_bucket_before_the_updates():
    # caps of ~0 MB: every gradient is a bucket of its own
    main, _, model, _, update_ops, params_grads = build_static(
        True, comm_buffer_size=1e-9, last_comm_buffer_size=1e-9)
    ops = main.global_block().ops
    types = [op.type for op in ops]
    reduces = [k for k, t in enumerate(types) if t == "dist::allreduce_mean"]
    first_update = types.index("fastop::momentum_update")
    assert len(reduces) == 4 and all(k < first_update for k in reduces)
    last_backward = max(k for k, op in enumerate(ops)
                        if any(v.name.endswith("@GRAD") for v in op.outputs)
                        and op.type != "dist::allreduce_mean")
    assert reduces[0] > last_backward
    # the update ops read the averaged gradients, the views cut from the buckets
    assert [g.name for _, g in params_grads] == [f"{p.name}@GRAD@avg"
                                                 for p in model.parameters()]
    assert [op.input("grad").name for op in update_ops] == [g.name for _, g in params_grads]
    # bucket order: the last parameter first
    assert [ops[k].inputs[0][0].name for k in reduces] == \
        [f"{p.name}@GRAD" for p in reversed(model.parameters())]


def test_static_default_caps_make_one_bucket():
    main, *_ = build_static(True)
    assert [op.type for op in main.global_block().ops].count("dist::allreduce_mean") == 1


def test_static_training_alone_equals_the_plain_optimizer():
    results = []
    for distributed in (False, True):
        main, startup, model, loss, _, _ = build_static(distributed)
        scope = static.Scope()
        exe = static.Executor(fastop.CPUPlace())
        exe.run(startup, scope=scope)
        for x, y in batches():
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        results.append([scope[p.name] for p in model.parameters()])
    for a, b in zip(*results):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("use", ["step", "minimize"])
def test_eager_training_alone_equals_the_plain_optimizer(use):
    models = [net(), net()]
    plain = optimizer.Adam(0.01, parameters=models[0].parameters())
    wrapped = DistributedOptimizer(optimizer.Adam(0.01, parameters=models[1].parameters()))
    loss_fn = nn.CrossEntropyLoss()
    for x, y in batches():
        for model, opt in zip(models, (plain, wrapped)):
            loss = loss_fn(model(fastop.to_tensor(x)), fastop.to_tensor(y))
            if use == "step":
                loss.backward()
                opt.step()
            else:
                opt.minimize(loss)
            opt.clear_grad()
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        assert np.array_equal(p.numpy(), q.numpy())


def test_everything_else_is_the_wrapped_optimizers():
    inner = optimizer.SGD(0.1, parameters=net().parameters())
    opt = DistributedOptimizer(inner)
    assert opt.inner_opt is inner and opt.get_lr() == 0.1
    opt.set_lr(0.2)
    assert inner.get_lr() == 0.2 and opt.state_dict()["LR"] == 0.2
    assert repr(opt) == "DistributedOptimizer(SGD(learning_rate=0.2))"
    with pytest.raises(AttributeError):
        opt.no_such_thing


def test_bad_use_is_refused():
    with pytest.raises(TypeError, match="DistributedOptimizer: 'optimizer' must be a fastop "
                                        "optimizer, got str"):
        DistributedOptimizer("sgd")
    opt = DistributedOptimizer(optimizer.SGD(0.1, parameters=net().parameters()))
    fastop.enable_static()
    try:
        with pytest.raises(RuntimeError, match=r"step\(\) runs in eager mode"):
            opt.step()
    finally:
        fastop.disable_static()
