"""``fastop.distributed.DistributedOptimizer``: an optimizer whose updates use gradients
averaged over all ranks, in eager mode (``step``) and in static mode (``minimize``
appends one ``dist::allreduce_mean`` op per bucket between the backward ops and the
update ops)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop.distributed._buckets import GradientBuckets, plan_buckets
from fastop.distributed._data_parallel import synced_by_data_parallel
from fastop.distributed._world import init_parallel_env, world
from fastop.ops import registry
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B
from fastop.optimizer import Optimizer

__all__ = ["DistributedOptimizer"]

_allreduce_mean = registry.get("dist::allreduce_mean")


class DistributedOptimizer:
    """Wrap `optimizer` so that the gradients it applies are the mean over all ranks
    (PaddlePaddle's ``fleet.distributed_optimizer``, Horovod's ``DistributedOptimizer``).

    Eager mode: :meth:`step` averages the gradients of the optimizer's parameters in
    fixed-order buckets, then steps — except parameters of a model wrapped in
    :class:`fastop.DataParallel`, whose backward pass has averaged them already.
    Static mode: :meth:`minimize` appends the backward ops, one ``dist::allreduce_mean``
    op per bucket of gradients (plus the views that cut each gradient back out of it),
    then the update ops, which read the averaged gradients. Everything else (learning
    rate, state dicts, ``clear_grad``) is the wrapped optimizer's.

    Args:
        optimizer: a fastop optimizer.
        strategy: accepted for PaddlePaddle compatibility (unused).
        comm_buffer_size, last_comm_buffer_size: bucket sizes in MB, as
            :class:`fastop.DataParallel`'s.
    """

    def __init__(self, optimizer: Optimizer, strategy: Any = None,
                 comm_buffer_size: float = 25, last_comm_buffer_size: float = 1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"DistributedOptimizer: 'optimizer' must be a fastop optimizer, "
                            f"got {type(optimizer).__name__}")
        init_parallel_env()
        self._inner_opt = optimizer
        self._caps = (float(comm_buffer_size), float(last_comm_buffer_size))
        self._averager: GradientBuckets | None = None
        self._averaged: tuple[int, ...] = ()

    @property
    def inner_opt(self) -> Optimizer:
        """The wrapped optimizer."""
        return self._inner_opt

    def __getattr__(self, name: str) -> Any:
        if name == "_inner_opt":
            raise AttributeError(name)
        return getattr(self._inner_opt, name)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self._inner_opt!r})"

    # -- eager ------------------------------------------------------------------------
    def _average(self, params: list) -> None:
        """Average, over the ranks, the gradients of `params` no DataParallel averages."""
        if world().size == 1:
            return
        mine = [p for p in params if not p.stop_gradient and p.dtype.is_floating
                and not synced_by_data_parallel(p)]
        key = tuple(map(id, mine))
        if key != self._averaged:
            if self._averager is not None:
                self._averager.close()
            self._averager = GradientBuckets(mine, *self._caps, "DistributedOptimizer")
            self._averaged = key
        self._averager.average()

    def step(self) -> None:
        """Average the gradients over the ranks, then update the parameters (eager)."""
        if current_mode() != "eager":
            raise RuntimeError("DistributedOptimizer.step() runs in eager mode; in static "
                               "mode call minimize(loss) while building the program")
        self._average(self._inner_opt._parameter_list)
        self._inner_opt.step()

    def minimize(self, loss: Any, startup_program: Any = None, parameters: Any = None,
                 no_grad_set: Any = None) -> tuple[list, list]:
        """As :meth:`fastop.optimizer.Optimizer.minimize`, with the gradients averaged
        over the ranks before the update. Returns ``(update_ops, [(param, grad), ...])``
        (static mode: the averaged gradient variables)."""
        inner = self._inner_opt
        if current_mode() == "eager":
            params = list(parameters) if parameters is not None else inner._parameter_list
            if inner._needs_backward(params):
                loss.backward()
            self._average(params)
            params_grads = [(p, p.grad) for p in params if p.grad is not None]
            return inner.apply_gradients(params_grads), params_grads
        from fastop import static
        startup = startup_program or static.default_startup_program()
        with static.program_guard(loss.block.program, startup):
            params_grads = inner.backward(loss, startup, parameters, no_grad_set)
            params_grads = self._append_averaging(params_grads)
            return inner.apply_gradients(params_grads), params_grads

    # -- static -----------------------------------------------------------------------
    def _append_averaging(self, params_grads: list) -> list:
        """Append one ``dist::allreduce_mean`` per bucket of gradients and the views
        that cut each averaged gradient out of its bucket; the pairs with them."""
        grads = [g for _, g in params_grads]
        sizes = [int(np.prod(g.shape, dtype=np.int64)) for g in grads]
        plan = plan_buckets([n * g.dtype.itemsize for n, g in zip(sizes, grads)],
                            [g.dtype.name for g in grads], *self._caps)
        averaged = list(grads)
        block = grads[0].block
        for members in plan:
            flat = _allreduce_mean([grads[i] for i in members])
            offset = 0
            for i in members:
                grad = grads[i]
                out = block.create_var(f"{grad.name}@avg", grad.dtype, grad.shape)
                piece = dict(axes=[0], starts=[offset], ends=[offset + sizes[i]])
                if grad.ndim == 1:
                    averaged[i] = B.slice(flat, **piece, out=out)
                else:
                    averaged[i] = B.reshape(B.slice(flat, **piece), shape=list(grad.shape),
                                            out=out)
                offset += sizes[i]
        return [(param, g) for (param, _), g in zip(params_grads, averaged)]

    # -- delegated explicitly (not through __getattr__): they take part in training
    def clear_grad(self, set_to_zero: bool = True) -> None:
        self._inner_opt.clear_grad(set_to_zero)

    clear_gradients = clear_grad
