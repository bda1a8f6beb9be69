"""Data-parallel training with fastop.DataParallel: an MLP on scikit-learn's digits.

    . .venv/bin/activate        # make installs mpi4py and MPICH there (or: pip install ".[mpi]")
    python -m fastop.distributed.launch -n 2 examples/train_digits_dp.py   # 2 ranks
    python examples/train_digits_dp.py                                      # one process
    python -m fastop.distributed.launch -n 2 examples/train_digits_dp.py --comm-dtype bfloat16

(``mpiexec -n 2 python -m mpi4py
examples/train_digits_dp.py`` does the same.) ``--comm-dtype bfloat16`` (or float16)
sends the gradients as half the bytes, summed in float32.

Every rank builds the same model (DataParallel broadcasts rank 0's parameters anyway),
walks the same shuffled order of the training set, and takes its own slice of each
global batch of 64 (PaddlePaddle's ``DistributedBatchSampler`` does this for a
DataLoader). ``loss.backward()`` averages the gradients over the ranks, so every rank
makes the update one process would make for the whole global batch: the accuracies are
the same as in one process (up to float rounding). Rank 0 prints the held-out accuracy
and the time per epoch (the median over epochs, the slowest rank's).

Two ranks are not faster here. Measured on the 2-vCPU development machine, shared with
other work (load average 3.4-6.5), 2026-11-28, 5 interleaved runs with
OMP_NUM_THREADS=1: one process took 14-38 ms per epoch, two ranks 65-194 ms. A global
batch of 64 is 32 rows per rank: a rank's step is mostly per-op overhead, not
arithmetic, so halving the rows saves little, while every step adds a gradient
all-reduce and the ranks compete with everything else for the two cores. Data
parallelism pays when a rank's share of a step is much more work than the communication
(bigger batches and models, a core or more per rank).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import fastop
import fastop.distributed as dist

GLOBAL_BATCH = 64
EPOCHS = 30


def load_data():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)           # pixel values 0..16
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)


def accuracy(model, x, y) -> float:
    with fastop.no_grad():
        predicted = model(fastop.to_tensor(x)).numpy().argmax(axis=1)
    return float(np.mean(predicted == y))


def main() -> int:
    parser = argparse.ArgumentParser(description="data-parallel MLP on the digits")
    parser.add_argument("--comm-dtype", default="float32",
                        choices=["float32", "bfloat16", "float16"],
                        help="what the gradients travel as between the ranks")
    args = parser.parse_args()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if GLOBAL_BATCH % world:
        raise SystemExit(f"the global batch ({GLOBAL_BATCH}) must divide among {world} ranks")
    x_train, x_test, y_train, y_test = load_data()

    fastop.seed(0)
    net = fastop.nn.Sequential(fastop.nn.Linear(64, 128), fastop.nn.Tanh(),
                               fastop.nn.Linear(128, 10))
    model = fastop.DataParallel(net, comm_dtype=args.comm_dtype)
    opt = fastop.optimizer.Adam(learning_rate=0.003, parameters=model.parameters())
    loss_fn = fastop.nn.CrossEntropyLoss()

    order = np.random.default_rng(0)                       # the same on every rank
    share = GLOBAL_BATCH // world
    epoch_times = []
    for epoch in range(EPOCHS):
        start_time = time.perf_counter()
        indices = order.permutation(len(x_train))
        for start in range(0, len(indices) - GLOBAL_BATCH + 1, GLOBAL_BATCH):
            mine = indices[start + rank * share:start + (rank + 1) * share]
            loss = loss_fn(model(fastop.to_tensor(x_train[mine])),
                           fastop.to_tensor(y_train[mine]))
            loss.backward()
            opt.step()
            opt.clear_grad()
        epoch_times.append(time.perf_counter() - start_time)
        if rank == 0 and (epoch + 1) % 10 == 0:
            print(f"epoch {epoch + 1}: loss on rank 0's share {float(loss):.4f}, held-out accuracy "
                  f"{accuracy(net, x_test, y_test):.4f}, {epoch_times[-1] * 1e3:.0f} ms",
                  flush=True)
    # the slowest rank sets the pace: each epoch's time is the maximum over the ranks
    slowest = fastop.to_tensor(np.array(epoch_times))
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"ranks: {world}, final held-out accuracy: {accuracy(net, x_test, y_test):.4f}, "
              f"time per epoch {statistics.median(slowest.numpy()) * 1e3:.0f} ms (median over "
              f"{EPOCHS} epochs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
