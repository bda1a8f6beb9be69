"""Run by tests/distributed/test_mpi.py, as every rank of an ``mpiexec`` job (or alone,
as the one-process reference). ``python mpi_worker.py SCENARIO OUT_DIR``:

* ``train`` — the same 2-layer MLP trained for STEPS steps on a global batch split
  between the ranks, five ways: DataParallel + SGD, DataParallel + Adam, DataParallel
  with gradient accumulation under no_sync, DistributedOptimizer(SGD) in eager mode
  without DataParallel, and DistributedOptimizer(SGD).minimize in a static program.
  Each rank saves its parameters (``<way>_w<world>_r<rank>.npz``); alone, the worker
  trains the same ways without any distribution (the reference). Under MPI it then
  checks the collectives, unused parameters and a model mismatch (asserting here).
* ``threads`` — prints this rank's default fastop thread count and its local ranks.
* ``fail`` — rank 1 raises an exception; the others wait in a collective.
* ``uneven`` — rank 0 runs one all_reduce more than the others, which then exit.
* ``mismatch`` — the ranks pass tensors of different dtypes or shapes (or a different
  op or src) to the collectives: each must raise the same error on every rank, and the
  collectives after it still work.
* ``shm raise|kill|timeout`` — prints the MPICH shared-memory files this rank maps,
  then rank 1 raises, or kills itself, or stops (rank 0 then times out).
* ``truncate`` — rank 0 broadcasts 3 values into rank 1's 2 (unchecked).
* ``count`` — prints how many MPI collectives one all_reduce and one DataParallel
  gradient average take (the header comparison: 2 and 1; 1 and 1 with
  ``FASTOP_DIST_SKIP_CHECKS=1``).
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time

import numpy as np

import fastop
import fastop.distributed as dist
from fastop import nn, optimizer, static
from fastop.autograd._backward import backward_end_hooks
from fastop.distributed._data_parallel import synced_by_data_parallel

SIZES = (8, 16, 4)
GLOBAL_BATCH = 48          # divisible by 1, 2 and 3 ranks
STEPS = 5
LR = 0.1


def data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((STEPS, GLOBAL_BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], (STEPS, GLOBAL_BATCH)).astype(np.int64)
    return x, y


def initial_values():
    rng = np.random.default_rng(2)
    return [(rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)
            for i, o in zip(SIZES[:-1], SIZES[1:])], \
           [rng.standard_normal(o).astype(np.float32) * 0.1 for o in SIZES[1:]]


def build(rank: int | None = 0):
    """The MLP with the initial values — rank 0's; the other ranks start from other
    values, which DataParallel's broadcast must replace (None: leave the values to the
    caller, as static mode does)."""
    weights, biases = initial_values()
    layers = []
    for k, (w, b) in enumerate(zip(weights, biases)):
        linear = nn.Linear(*w.shape)
        if rank is not None:
            linear.weight.set_value(w + rank)
            linear.bias.set_value(b - rank)
        layers += [linear, nn.Tanh()] if k < len(weights) - 1 else [linear]
    return nn.Sequential(*layers)


def share(array, rank, world):
    per = len(array) // world
    return array[rank * per:(rank + 1) * per]


def save(out, way, world, rank, params):
    label = f"{world}mpi" if os.environ.get("FASTOP_DIST_SHM") == "0" else world
    np.savez(os.path.join(out, f"{way}_w{label}_r{rank}.npz"),
             *[np.asarray(p) for p in params])


def train_eager(way, rank, world):
    x, y = data()
    distributed = world > 1
    net = build(rank if distributed else 0)
    if way == "dp_frozen":                          # not averaged, not updated
        net[0].bias.stop_gradient = True
    wrap_model = distributed and way != "distopt_eager"
    options = {"dp_buckets": dict(comm_buffer_size=1e-4, last_comm_buffer_size=1e-4),
               "dp_bf16": dict(comm_dtype="bfloat16")}.get(way, {})
    model = fastop.DataParallel(net, **options) if wrap_model else net
    if way == "distopt_eager" and distributed:       # what DataParallel would do
        for param in net.parameters():
            dist.broadcast(param, src=0)
    inner = optimizer.Adam(0.01, parameters=net.parameters()) if way == "dp_adam" \
        else optimizer.SGD(LR, parameters=net.parameters())
    opt = dist.DistributedOptimizer(inner) if way == "distopt_eager" else inner
    loss_fn = nn.CrossEntropyLoss()
    for step in range(STEPS):
        xs, ys = share(x[step], rank, world), share(y[step], rank, world)
        if way == "no_sync":            # two half batches: the first one accumulates
            half = len(xs) // 2
            with model.no_sync() if distributed else contextlib.nullcontext():
                (loss_fn(model(fastop.to_tensor(xs[:half])),
                         fastop.to_tensor(ys[:half])) * 0.5).backward()
            (loss_fn(model(fastop.to_tensor(xs[half:])),
                     fastop.to_tensor(ys[half:])) * 0.5).backward()
        else:
            loss_fn(model(fastop.to_tensor(xs)), fastop.to_tensor(ys)).backward()
        opt.step()
        opt.clear_grad()
    return [p.numpy() for p in net.parameters()]


def train_static(rank, world):
    x, y = data()
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [None, SIZES[0]], "float32")
            yv = static.data("y", [None], "int64")
            net = build(rank=None)
            loss = nn.CrossEntropyLoss()(net(xv), yv)
            opt = optimizer.SGD(LR)
            if world > 1:
                opt = dist.DistributedOptimizer(opt)
            opt.minimize(loss)
    finally:
        fastop.disable_static()
    exe = static.Executor(fastop.CPUPlace())
    exe.run(startup, scope=scope)
    weights, biases = initial_values()
    linears = [net[0], net[2]]
    for linear, w, b in zip(linears, weights, biases):
        scope.set(linear.weight.name, w)
        scope.set(linear.bias.name, b)
    for step in range(STEPS):
        exe.run(main, feed={"x": share(x[step], rank, world), "y": share(y[step], rank, world)},
                fetch_list=[loss], scope=scope)
    return [scope[p.name] for p in net.parameters()]


def check_collectives(rank, world):
    expected_sum = world * (world + 1) / 2
    for op, want in ((dist.ReduceOp.SUM, expected_sum), (dist.ReduceOp.MAX, world),
                     (dist.ReduceOp.MIN, 1), (dist.ReduceOp.AVG, expected_sum / world),
                     (dist.ReduceOp.PROD, float(np.prod(np.arange(1, world + 1))))):
        t = fastop.full([3], rank + 1.0, dtype="float64")
        dist.all_reduce(t, op=op)
        assert np.allclose(t.numpy(), want), (op, t.numpy(), want)
    ints = fastop.to_tensor(np.array([rank, 10], np.int64))
    dist.all_reduce(ints)
    assert ints.numpy().tolist() == [expected_sum - world, 10 * world], ints.numpy()
    for narrow in ("uint8", "int8", "int16"):            # sums wrap in the dtype, as MPI's
        small = fastop.to_tensor(np.array([rank + 1, 100], narrow))
        dist.all_reduce(small)
        want = np.array([expected_sum, 100 * world], np.int64).astype(narrow)
        assert small.dtype == narrow and np.array_equal(small.numpy(), want), small.numpy()
    flags = fastop.to_tensor(np.array([rank == 0, True]))
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    assert flags.numpy().tolist() == [False, True], flags.numpy()
    base = fastop.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = base.T                                       # not contiguous: reduced in place
    dist.all_reduce(view)
    assert np.array_equal(base.numpy(), world * np.arange(6).reshape(2, 3)), base.numpy()
    t = fastop.full([2], float(rank))
    dist.broadcast(t, src=world - 1)
    assert t.numpy().tolist() == [world - 1.0] * 2, t.numpy()
    gathered = []
    dist.all_gather(gathered, fastop.full([2], float(rank)))
    assert [g.numpy().tolist() for g in gathered] == [[float(r)] * 2 for r in range(world)]
    into = [fastop.zeros([2]) for _ in range(world)]
    dist.all_gather(into, fastop.full([2], float(rank)))
    assert [g.numpy().tolist() for g in into] == [[float(r)] * 2 for r in range(world)]
    dist.barrier()
    env = dist.ParallelEnv()
    assert (env.rank, env.world_size, env.nranks) == (rank, world, world)


def check_unused_parameters(rank, world):
    """Head b serves only rank 0's loss, head c no loss: after backward, b's gradient
    is rank 0's divided by the world size on every rank, c's stays None."""
    class TwoHeads(nn.Layer):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 1), nn.Linear(4, 1), nn.Linear(4, 1)

        def forward(self, x, use_b):
            out = self.a(x).sum()
            return out + self.b(x).sum() if use_b else out
    fastop.seed(0)
    heads = TwoHeads()
    model = fastop.DataParallel(heads)
    model(fastop.full([2, 4], rank + 1.0), use_b=rank == 0).backward()
    # d/dW sum(x @ W + b) = x summed over the 2 rows = 2 * (rank + 1) per entry
    want_a = np.mean([np.full((4, 1), 2.0 * (r + 1)) for r in range(world)], axis=0)
    close = dict(rtol=1e-6, atol=0)                     # float32 rounding of 1/world
    assert np.allclose(heads.a.weight.grad.numpy(), want_a, **close), heads.a.weight.grad
    assert np.allclose(heads.b.weight.grad.numpy(), np.full((4, 1), 2.0 / world), **close)
    assert np.allclose(heads.b.bias.grad.numpy(), np.full((1,), 2.0 / world), **close)
    assert heads.c.weight.grad is None and heads.c.bias.grad is None


def check_overlap_and_views(rank, world):
    """One bucket per parameter: the last layer's bucket starts during backward, before
    the first layer's gradient exists, the buckets start in order (last parameter
    first), and every .grad is a view of its bucket's buffer; under no_sync nothing
    starts."""
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(),
                        nn.Linear(4, 3))
    model = fastop.DataParallel(net, comm_buffer_size=1e-5, last_comm_buffer_size=1e-5)
    buckets = model._buckets
    first = net[0].weight
    starts = []
    original = buckets._start

    def recording_start(bucket):
        starts.append((bucket.params[0].name, first._grad_version))
        original(bucket)
    buckets._start = recording_start
    x = fastop.full([2, 6], rank + 1.0)
    with model.no_sync():
        model(x).sum().backward()
    assert starts == [], starts
    before = first._grad_version
    model(x).sum().backward()
    params = net.parameters()
    assert [name for name, _ in starts] == [p.name for p in reversed(params)], starts
    assert starts[0][1] == before, "the last layer's bucket waited for the first layer"
    for p, bucket in zip(reversed(params), buckets.buckets):
        assert bucket.params == [p]
        assert np.shares_memory(p.grad.numpy(), bucket.flat)


class SlowOnLastRank(fastop.autograd.PyLayer):
    """The identity, whose backward sleeps on the last rank: the ranks reach their
    buckets at different times."""

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        if dist.get_rank() == dist.get_world_size() - 1:
            time.sleep(0.02)
        return g * 1.0


def check_skewed_ranks_average_right(rank, world):
    """One bucket per parameter, one rank slowed between layers: the averaged gradients
    are the mean of the ranks' own (gathered separately), bitwise equal on the ranks."""
    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(5, 6), nn.Linear(6, 6), nn.Linear(6, 2)

        def forward(self, x):
            x = SlowOnLastRank.apply(fastop.tanh(self.a(x)))
            x = SlowOnLastRank.apply(fastop.tanh(self.b(x)))
            return self.c(x)
    fastop.seed(3)
    net = Net()
    model = fastop.DataParallel(net, comm_buffer_size=1e-5, last_comm_buffer_size=1e-5)
    local = Net()
    local.set_state_dict(net.state_dict())
    for step in range(3):
        x = fastop.to_tensor(np.random.default_rng(10 * step + rank)
                             .standard_normal((4, 5)).astype(np.float32))
        model(x).sum().backward()
        local(x).sum().backward()
        for p, q in zip(net.parameters(), local.parameters()):
            mine = fastop.to_tensor(q.grad.numpy())
            everyone = []
            dist.all_gather(everyone, mine)
            want = np.mean([t.numpy() for t in everyone], axis=0)
            np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-5, atol=1e-6)
            same = []
            dist.all_gather(same, fastop.to_tensor(p.grad.numpy()))
            assert all(np.array_equal(same[0].numpy(), t.numpy()) for t in same)
            q.clear_grad()
        for p in net.parameters():
            p.clear_grad()
    # passes back to back (no other collective between them), gradients accumulating
    # (without clear_grad, each pass averages .grad + the new local gradient)
    fastop.seed(4)
    plain = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    model = fastop.DataParallel(plain, comm_buffer_size=1e-5, last_comm_buffer_size=1e-5)
    x = fastop.full([2, 4], rank + 1.0)
    for _ in range(6):
        model(x).sum().backward()
    local = [q.grad.numpy() for q in _local_grads(plain, x)]
    for p, mine in zip(plain.parameters(), local):
        everyone = []
        dist.all_gather(everyone, fastop.to_tensor(mine))
        want = 6 * np.mean([t.numpy() for t in everyone], axis=0)
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def _local_grads(net, x):
    """The parameters of a copy of `net` after a plain backward on x (no averaging)."""
    copy = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    copy.set_state_dict(net.state_dict())
    copy(x).sum().backward()
    return copy.parameters()


def check_no_second_averaging(rank, world):
    """DistributedOptimizer leaves a DataParallel model's gradients alone (they are
    averaged already): its step runs no collective; the gradients it does average are
    those of parameters outside the model."""
    model = fastop.DataParallel(nn.Linear(3, 2))
    extra = fastop.to_tensor(np.zeros(2, np.float32), stop_gradient=False)
    opt = dist.DistributedOptimizer(optimizer.SGD(
        0.1, parameters=model.parameters() + [extra]))
    (model(fastop.ones([1, 3])).sum() + (extra * (rank + 1.0)).sum()).backward()
    opt.step()
    averaged = [p for bucket in opt._averager.buckets for p in bucket.params]
    assert averaged == [extra], "DistributedOptimizer averages 'extra' only"
    want = np.full(2, -0.1 * np.mean(np.arange(1, world + 1)), np.float32)
    assert np.allclose(extra.numpy(), want, rtol=1e-6), extra.numpy()
    params, hooks = model.parameters(), len(backward_end_hooks)
    del model, opt
    gc.collect()                # a dropped DataParallel averages nothing any more
    assert not any(synced_by_data_parallel(p) for p in params)
    assert len(backward_end_hooks) == hooks - 1


def check_default_data_share(rank, world):
    """DistributedBatchSampler takes its default rank and world size from the process
    group (which fastop.distributed installs below the io layer)."""
    sampler = fastop.io.DistributedBatchSampler(range(2 * world), 1)
    assert (sampler.nranks, sampler.local_rank) == (world, rank), \
        (sampler.nranks, sampler.local_rank)
    assert list(sampler) == [[rank], [world + rank]], list(sampler)


def check_model_mismatch(rank, world):
    width = 5 if rank == world - 1 else 4
    try:
        fastop.DataParallel(nn.Sequential(nn.Linear(3, width), nn.Linear(width, 2)))
    except ValueError as exc:
        assert f"'0.weight' is float32[3, 4] on rank 0 but float32[3, 5] on rank " \
               f"{world - 1}" in str(exc), str(exc)
    else:
        raise AssertionError("DataParallel accepted different models on the ranks")


def check_mismatches(rank, world):
    """Each case: what rank 0 and the others pass; every rank must raise a ValueError
    naming the collective, this rank, and both ranks' tensors."""
    last = world - 1
    cases = [
        ("all_reduce", lambda: dist.all_reduce(fastop.ones([3], "float32" if rank == 0
                                                          else "float64")),
         f"rank 0 calls all_reduce(SUM) of float32[3] and rank 1 calls all_reduce(SUM) "
         f"of float64[3]"),
        ("all_reduce", lambda: dist.all_reduce(fastop.ones([3 if rank == 0 else 4])),
         "rank 0 calls all_reduce(SUM) of float32[3] and rank 1 calls all_reduce(SUM) "
         "of float32[4]"),
        ("all_reduce", lambda: dist.all_reduce(
            fastop.ones([2]), op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX),
         "rank 0 calls all_reduce(SUM) of float32[2] and rank 1 calls all_reduce(MAX)"),
        ("broadcast", lambda: dist.broadcast(fastop.ones([2 if rank == 0 else 3]), src=0),
         "rank 0 calls broadcast(src=0) of float32[2] and rank 1 calls broadcast(src=0) "
         "of float32[3]"),
        ("broadcast", lambda: dist.broadcast(fastop.ones([2]), src=0 if rank == 0 else last),
         f"rank 0 calls broadcast(src=0) of float32[2] and rank 1 calls "
         f"broadcast(src={last}) of float32[2]"),
        ("all_gather", lambda: dist.all_gather([], fastop.ones([2], "float32" if rank == 0
                                                              else "int64")),
         "rank 0 calls all_gather of float32[2] and rank 1 calls all_gather of int64[2]"),
        ("all_reduce" if rank == 0 else "broadcast",
         lambda: dist.all_reduce(fastop.ones([2])) if rank == 0 else
         dist.broadcast(fastop.ones([2]), src=0),
         "rank 0 calls all_reduce(SUM) of float32[2] and rank 1 calls broadcast(src=0)"),
    ]
    for fn, call, expected in cases:
        try:
            call()
        except ValueError as exc:
            assert str(exc).startswith(f"fastop.distributed.{fn} on rank {rank} of "
                                       f"{world}: "), str(exc)
            assert expected in str(exc), (expected, str(exc))
        else:
            raise AssertionError(f"rank {rank}: no error for {expected}")
    t = fastop.full([2], rank + 1.0)
    dist.all_reduce(t)                              # the ranks are still in step
    assert t.numpy().tolist() == [world * (world + 1) / 2] * 2, t.numpy()
    print(f"rank {rank}: mismatches named", flush=True)


def main() -> int:
    scenario, out = sys.argv[1], sys.argv[2]
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if scenario == "train":
        for way in ("dp_sgd", "dp_adam", "no_sync", "distopt_eager", "dp_buckets", "dp_bf16",
                    "dp_frozen"):
            save(out, way, world, rank, train_eager(way, rank, world))
        save(out, "distopt_static", world, rank, train_static(rank, world))
        if world > 1:
            check_collectives(rank, world)
            check_unused_parameters(rank, world)
            check_overlap_and_views(rank, world)
            check_skewed_ranks_average_right(rank, world)
            check_no_second_averaging(rank, world)
            check_default_data_share(rank, world)
            check_model_mismatch(rank, world)
        print(f"rank {rank} of {world}: done", flush=True)
    elif scenario == "threads":
        print(f"rank {rank}: threads {fastop.get_num_threads()} local ranks "
              f"{dist.ParallelEnv().local_rank}", flush=True)
    elif scenario == "fail":
        if rank == 1:
            print(f"failing at {time.time()}", flush=True)
            raise RuntimeError("deliberate failure on rank 1")
        dist.barrier()
    elif scenario == "mismatch":
        check_mismatches(rank, world)
    elif scenario == "shm":
        mapped = sorted({line.split(maxsplit=5)[5].strip().removesuffix(" (deleted)")
                         for line in open("/proc/self/maps")
                         if "/dev/shm/mpich_shm_" in line})
        print(f"rank {rank} maps {' '.join(mapped)}", flush=True)
        dist.barrier()
        if rank == 1 and out == "raise":
            raise RuntimeError("deliberate failure on rank 1")
        if rank == 1 and out == "kill":
            os.kill(os.getpid(), 9)
        if rank == 0 or out == "kill":
            dist.barrier()                  # alone: the timeout, or the launcher, ends it
    elif scenario == "truncate":            # run with FASTOP_DIST_SKIP_CHECKS=1
        try:
            dist.broadcast(fastop.ones([3 if rank == 0 else 2]), src=0)
            print(f"rank {rank}: broadcast done", flush=True)
        except RuntimeError as exc:
            print(f"rank {rank}: {exc}", flush=True)
    elif scenario == "count":
        from fastop.distributed._world import world as process_group
        model = fastop.DataParallel(nn.Linear(3, 1))
        before = process_group().collectives
        dist.all_reduce(fastop.ones([3]))
        middle = process_group().collectives
        model(fastop.ones([2, 3])).sum().backward()
        print(f"rank {rank}: all_reduce {middle - before} backward "
              f"{process_group().collectives - middle}", flush=True)
    elif scenario == "uneven":          # rank 0 takes one step more, the others leave
        for step in range(3 if rank == 0 else 2):
            if step == 2:
                print(f"stepping alone at {time.time()}", flush=True)
            dist.all_reduce(fastop.ones([4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
