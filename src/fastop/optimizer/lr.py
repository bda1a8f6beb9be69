"""Learning-rate schedules (PaddlePaddle's ``paddle.optimizer.lr``).

A scheduler holds the current learning rate (``scheduler()`` or ``last_lr``) and the
epoch (or step) it belongs to (``last_epoch``); ``step()`` advances one epoch,
``step(epoch)`` jumps to one. Creating a scheduler performs the first step, so
``last_epoch`` is 0 and the rate is the one of epoch 0. The formulas, defaults and the
order of events are Paddle's; each class's docstring gives its formula, with
``epoch`` = ``last_epoch`` and ``learning_rate`` the initial rate (``base_lr``).

>>> sched = StepDecay(learning_rate=0.5, step_size=2, gamma=0.1)
>>> rates = []
>>> for epoch in range(5):
...     rates.append(round(sched(), 6))
...     sched.step()
>>> rates
[0.5, 0.5, 0.05, 0.05, 0.005]
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["LRScheduler", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay",
           "InverseTimeDecay", "PolynomialDecay", "LinearWarmup", "ExponentialDecay",
           "MultiStepDecay", "StepDecay", "LambdaDecay", "ReduceOnPlateau",
           "CosineAnnealingDecay", "MultiplicativeDecay", "OneCycleLR", "CyclicLR",
           "LinearLR", "CosineAnnealingWarmRestarts"]


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a float or int, got "
                        f"{type(value).__name__} {value!r}")
    return float(value)


def _positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _typed_positive_int(owner: str, name: str, value: Any) -> int:
    """An int argument Paddle type-checks: a non-int is a TypeError, one <= 0 a ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} "
                        f"{value!r}")
    return _positive_int(owner, name, value)


def _plain(value: Any) -> Any:
    """A number read back from a saved state dict (``fastop.load`` gives one-element
    tensors) as the Python number it was."""
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (int, float)) \
            and getattr(value, "size", None) == 1:
        return item()
    return value


def _require(condition: bool, owner: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{owner}: {message}")


class LRScheduler:
    """Base class of learning-rate schedules: a subclass defines ``get_lr()``, the rate
    at epoch ``self.last_epoch`` (it may read ``self.base_lr`` and ``self.last_lr``,
    the previous rate).

    >>> class Halving(LRScheduler):
    ...     def get_lr(self):
    ...         return self.base_lr * 0.5 ** self.last_epoch
    >>> s = Halving(learning_rate=1.0)
    >>> s.step(); s.step()
    >>> s.last_epoch, s()
    (2, 0.25)
    """

    def __init__(self, learning_rate: float = 0.1, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        owner = type(self).__name__
        lr = _number(owner, "learning_rate", learning_rate)
        _require(lr >= 0, owner, f"learning_rate must be non-negative, got {learning_rate}")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"{owner}: last_epoch must be an integer >= -1, got "
                             f"{last_epoch!r}")
        self.base_lr = lr
        self.last_lr = lr
        self.last_epoch = last_epoch
        self.verbose = verbose
        self.step()

    def __call__(self) -> float:
        """The current learning rate."""
        return self.last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance to the next epoch (or to `epoch`) and compute its learning rate.
        Call it after ``optimizer.step()``: the new rate applies to the next update."""
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed_form() if closed_form is not None else self.get_lr()
        self._report()

    def _report(self) -> None:
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to "
                  f"{self.last_lr}.")

    def get_lr(self) -> float:
        """The learning rate at ``self.last_epoch`` (subclasses define it)."""
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def state_keys(self) -> None:
        """Set ``self.keys``, the attributes ``state_dict`` saves."""
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state (to resume training): ``last_epoch`` and ``last_lr``,
        plus what a subclass adds in ``state_keys``."""
        self.state_keys()
        state = {}
        for key in self.keys:
            if key in self.__dict__:
                value = self.__dict__[key]
                if hasattr(value, "numpy"):           # a one-element Tensor
                    value = float(value)
                state[key] = value
        return state

    def set_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by ``state_dict``."""
        self.state_keys()
        missing = [key for key in self.keys if key not in state_dict]
        if missing:
            raise RuntimeError(f"{type(self).__name__}.set_state_dict: the state has no "
                               f"{missing} (it was saved by another kind of scheduler?)")
        for key in self.keys:
            self.__dict__[key] = _plain(state_dict[key])
        if len(state_dict) > len(self.keys):
            warnings.warn(f"{type(self).__name__}.set_state_dict: unused entries "
                          f"{sorted(set(state_dict) - set(self.keys))}", stacklevel=2)

    set_dict = set_state_dict


class NoamDecay(LRScheduler):
    """The Transformer's schedule ("Attention Is All You Need"): linear warm-up, then
    decay with the inverse square root of the step::

        lr = learning_rate * d_model ** -0.5 * min(epoch ** -0.5,
                                                   epoch * warmup_steps ** -1.5)

    (epoch 0 counts as ``epoch ** -0.5 = 1``, so it gives 0).
    """

    def __init__(self, d_model: float, warmup_steps: int, learning_rate: float = 1.0,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        _require(_number("NoamDecay", "d_model", d_model) > 0, "NoamDecay",
                 f"d_model must be positive, got {d_model}")
        self.d_model = d_model
        self.warmup_steps = _positive_int("NoamDecay", "warmup_steps", warmup_steps)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        a = 1 if self.last_epoch == 0 else self.last_epoch ** -0.5
        b = self.warmup_steps ** -1.5 * self.last_epoch
        return self.base_lr * self.d_model ** -0.5 * min(a, b)


class PiecewiseDecay(LRScheduler):
    """Constant rates between step boundaries: ``values[i]`` while
    ``boundaries[i-1] <= epoch < boundaries[i]`` (``values`` has one more entry)."""

    def __init__(self, boundaries: Sequence[int], values: Sequence[float],
                 last_epoch: int = -1, verbose: bool = False) -> None:
        _require(len(boundaries) > 0, "PiecewiseDecay", "boundaries must not be empty")
        _require(len(values) == len(boundaries) + 1, "PiecewiseDecay",
                 f"values needs one more entry than boundaries, got {len(values)} values "
                 f"for {len(boundaries)} boundaries")
        _require(all(a < b for a, b in zip(boundaries, boundaries[1:])), "PiecewiseDecay",
                 f"boundaries must increase, got {list(boundaries)}")
        self.boundaries = boundaries
        self.values = values
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if self.last_epoch < boundary:
                return value
        return self.values[-1]


class NaturalExpDecay(LRScheduler):
    """``lr = learning_rate * exp(-gamma * epoch)``."""

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        _require(_number("NaturalExpDecay", "gamma", gamma) > 0, "NaturalExpDecay",
                 f"gamma must be positive for the rate to decay, got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * math.exp(-1 * self.gamma * self.last_epoch)


class InverseTimeDecay(LRScheduler):
    """``lr = learning_rate / (1 + gamma * epoch)``."""

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        self.gamma = _number("InverseTimeDecay", "gamma", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr / (1 + self.gamma * self.last_epoch)


class PolynomialDecay(LRScheduler):
    """Polynomial decay from ``learning_rate`` to ``end_lr`` over ``decay_steps``::

        lr = (learning_rate - end_lr) * (1 - epoch / decay_steps) ** power + end_lr

    with ``epoch = min(epoch, decay_steps)``; with ``cycle=True`` instead
    ``decay_steps`` grows to the next multiple of itself past ``epoch``
    (``decay_steps * ceil(epoch / decay_steps)``, at least once), so the rate climbs
    back and decays again.
    """

    def __init__(self, learning_rate: float, decay_steps: int, end_lr: float = 0.0001,
                 power: float = 1.0, cycle: bool = False, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        self.decay_steps = _positive_int("PolynomialDecay", "decay_steps", decay_steps)
        self.end_lr = _number("PolynomialDecay", "end_lr", end_lr)
        _require(_number("PolynomialDecay", "power", power) > 0, "PolynomialDecay",
                 f"power must be positive for the rate to decay, got {power}")
        self.power = power
        self.cycle = cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        epoch, decay_steps = self.last_epoch, self.decay_steps
        if self.cycle:
            decay_steps *= max(math.ceil(epoch / self.decay_steps), 1)
        else:
            epoch = min(epoch, decay_steps)
        return (self.base_lr - self.end_lr) * (1 - epoch / decay_steps) ** self.power \
            + self.end_lr


class LinearWarmup(LRScheduler):
    """Linear warm-up before another schedule: for ``epoch < warmup_steps``::

        lr = start_lr + (end_lr - start_lr) * epoch / warmup_steps

    then ``learning_rate``: a constant, or a scheduler stepped to
    ``epoch - warmup_steps`` (so it starts from its own epoch 0).

    >>> s = LinearWarmup(learning_rate=0.5, warmup_steps=2, start_lr=0.0, end_lr=0.5)
    >>> rates = []
    >>> for _ in range(4):
    ...     rates.append(s())
    ...     s.step()
    >>> rates
    [0.0, 0.25, 0.5, 0.5]
    """

    def __init__(self, learning_rate: float | LRScheduler, warmup_steps: int,
                 start_lr: float, end_lr: float, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not isinstance(learning_rate, LRScheduler):
            _number("LinearWarmup", "learning_rate", learning_rate)
        self.learning_rate = learning_rate
        self.warmup_steps = _positive_int("LinearWarmup", "warmup_steps", warmup_steps)
        self.start_lr = _number("LinearWarmup", "start_lr", start_lr)
        self.end_lr = _number("LinearWarmup", "end_lr", end_lr)
        _require(end_lr > start_lr, "LinearWarmup",
                 f"end_lr ({end_lr}) must be greater than start_lr ({start_lr})")
        super().__init__(start_lr, last_epoch, verbose)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state_dict: dict[str, Any]) -> None:
        inner = isinstance(self.learning_rate, LRScheduler)
        if inner and "LinearWarmup_LR" not in state_dict:
            raise RuntimeError("LinearWarmup.set_state_dict: the state has no "
                               "'LinearWarmup_LR' (the wrapped scheduler's state)")
        own = {k: v for k, v in state_dict.items() if k != "LinearWarmup_LR"}
        super().set_state_dict(own)
        if inner:
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])

    set_dict = set_state_dict

    def get_lr(self) -> float:
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * self.last_epoch / self.warmup_steps \
                + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate


class ExponentialDecay(LRScheduler):
    """``lr = learning_rate * gamma ** epoch``, with ``0 < gamma < 1``."""

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        _require(0 < _number("ExponentialDecay", "gamma", gamma) < 1, "ExponentialDecay",
                 f"gamma must be in (0, 1) for the rate to decay, got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** self.last_epoch


class MultiStepDecay(LRScheduler):
    """``lr = learning_rate * gamma ** i`` where ``i`` is the number of
    ``milestones`` that ``epoch`` has reached."""

    def __init__(self, learning_rate: float, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        if not isinstance(milestones, (tuple, list)):
            raise TypeError(f"MultiStepDecay: milestones must be a list or tuple, got "
                            f"{type(milestones).__name__}")
        _require(all(a < b for a, b in zip(milestones, milestones[1:])), "MultiStepDecay",
                 f"milestones must increase, got {list(milestones)}")
        _require(_number("MultiStepDecay", "gamma", gamma) < 1.0, "MultiStepDecay",
                 f"gamma must be < 1.0, got {gamma}")
        self.milestones = milestones
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        reached = sum(1 for m in self.milestones if self.last_epoch >= m)
        return self.base_lr * self.gamma ** reached


class StepDecay(LRScheduler):
    """``lr = learning_rate * gamma ** (epoch // step_size)``."""

    def __init__(self, learning_rate: float, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        self.step_size = _typed_positive_int("StepDecay", "step_size", step_size)
        _require(_number("StepDecay", "gamma", gamma) < 1.0, "StepDecay",
                 f"gamma must be < 1.0, got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


def _check_lambda(owner: str, fn: Any) -> Callable[[int], float]:
    if not callable(fn):
        raise TypeError(f"{owner}: lr_lambda must be a function of the epoch, got "
                        f"{type(fn).__name__}")
    return fn


class LambdaDecay(LRScheduler):
    """``lr = learning_rate * lr_lambda(epoch)``."""

    def __init__(self, learning_rate: float, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1, verbose: bool = False) -> None:
        self.lr_lambda = _check_lambda("LambdaDecay", lr_lambda)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeDecay(LRScheduler):
    """``lr = learning_rate * lr_lambda(1) * lr_lambda(2) * ... * lr_lambda(epoch)``:
    each epoch multiplies the previous rate by ``lr_lambda(epoch)``."""

    def __init__(self, learning_rate: float, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1, verbose: bool = False) -> None:
        self.lr_lambda = _check_lambda("MultiplicativeDecay", lr_lambda)
        self._product: tuple[int, float] | None = None   # (epoch, rate) last computed
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        # A step from the epoch computed last costs one factor (Paddle multiplies all
        # of them again each time); same factors, same order, same result.
        start, lr = (0, self.base_lr)
        if self._product is not None and self._product[0] <= self.last_epoch:
            start, lr = self._product
        for epoch in range(start + 1, self.last_epoch + 1):
            lr *= self.lr_lambda(epoch)
        self._product = (self.last_epoch, lr)
        return lr


class ReduceOnPlateau(LRScheduler):
    """Multiply the rate by ``factor`` when ``metrics`` (passed to ``step``) has not
    improved for more than ``patience`` epochs, then wait ``cooldown`` epochs.

    Improvement (``mode='min'``): ``metrics < best - best * threshold`` (``'rel'``)
    or ``metrics < best - threshold`` (``'abs'``); ``mode='max'`` mirrors it. The rate
    never goes below ``min_lr``, and a cut smaller than ``epsilon`` is skipped.

    >>> s = ReduceOnPlateau(learning_rate=1.0, factor=0.5, patience=1)
    >>> for loss in [3.0, 2.0, 2.0, 2.0]:
    ...     s.step(loss)
    >>> s()
    0.5
    """

    def __init__(self, learning_rate: float, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: float = 0, epsilon: float = 1e-8,
                 verbose: bool = False) -> None:
        owner = "ReduceOnPlateau"
        mode = str(mode).lower()
        _require(mode in ("min", "max"), owner, f"mode must be 'min' or 'max', got {mode!r}")
        threshold_mode = str(threshold_mode).lower()
        _require(threshold_mode in ("rel", "abs"), owner,
                 f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        _require(_number(owner, "factor", factor) < 1.0, owner,
                 f"factor must be < 1.0 (new_lr = lr * factor), got {factor}")
        lr = _number(owner, "learning_rate", learning_rate)
        _require(lr >= 0, owner, f"learning_rate must be non-negative, got {learning_rate}")
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.min_lr, self.epsilon = cooldown, min_lr, epsilon
        self.cooldown_counter = 0
        self.best: float | None = None
        self.num_bad_epochs = 0
        # No first step: the schedule moves only when a metric comes in.
        self.base_lr = self.last_lr = lr
        self.last_epoch = 0
        self.verbose = verbose

    def state_keys(self) -> None:
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record this epoch's `metrics` (a number, or a one-element Tensor or array)
        and cut the rate if it has stopped improving."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        value = self._metric_value(metrics)
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self.best is None or self._is_better(value, self.best):
            self.best = value
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                self._report()

    @staticmethod
    def _metric_value(metrics: Any) -> float:
        if isinstance(metrics, (int, float)) and not isinstance(metrics, bool):
            return float(metrics)
        size = getattr(metrics, "size", None)
        if size is None or not callable(getattr(metrics, "__float__", None)):
            raise TypeError(f"ReduceOnPlateau.step: metrics must be a number or a "
                            f"one-element Tensor/array, got {type(metrics).__name__}")
        if size != 1:
            raise ValueError(f"ReduceOnPlateau.step: metrics must hold one value, got "
                             f"{size} (reduce it first, e.g. with .mean())")
        return float(metrics)

    def _is_better(self, current: float, best: float) -> bool:
        if self.mode == "min":
            margin = best * self.threshold if self.threshold_mode == "rel" else self.threshold
            return current < best - margin
        margin = best * self.threshold if self.threshold_mode == "rel" else self.threshold
        return current > best + margin


class CosineAnnealingDecay(LRScheduler):
    """Cosine annealing (SGDR without restarts) from ``learning_rate`` down to
    ``eta_min`` over ``T_max`` epochs, and back up over the next ``T_max``::

        lr = eta_min + (learning_rate - eta_min) * (1 + cos(pi * epoch / T_max)) / 2

    ``step()`` computes it recursively from the previous rate, as Paddle does (so a
    rate changed by hand carries on); ``step(epoch)`` uses the closed form above.
    """

    def __init__(self, learning_rate: float, T_max: int, eta_min: float = 0,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        self.T_max = _typed_positive_int("CosineAnnealingDecay", "T_max", T_max)
        self.eta_min = _number("CosineAnnealingDecay", "eta_min", eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        epoch, t_max = self.last_epoch, self.T_max
        if epoch == 0:
            return self.base_lr
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * \
                (1 - math.cos(math.pi / t_max)) / 2
        return (1 + math.cos(math.pi * epoch / t_max)) / \
            (1 + math.cos(math.pi * (epoch - 1) / t_max)) * \
            (self.last_lr - self.eta_min) + self.eta_min

    def _get_closed_form_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * \
            (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class OneCycleLR(LRScheduler):
    """The one-cycle policy (Super-Convergence): from ``max_learning_rate /
    divide_factor`` up to ``max_learning_rate`` over the first ``phase_pct`` of
    ``total_steps``, then down to ``end_learning_rate`` (with ``three_phase``: down to
    the initial rate over as many steps, then to ``end_learning_rate``). Each phase
    interpolates with a half cosine (``anneal_strategy='cos'``) or linearly. Step it
    once per batch; stepping past ``total_steps`` raises.
    """

    def __init__(self, max_learning_rate: float, total_steps: int,
                 divide_factor: float = 25.0, end_learning_rate: float = 0.0001,
                 phase_pct: float = 0.3, anneal_strategy: str = "cos",
                 three_phase: bool = False, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        owner = "OneCycleLR"
        max_lr = _number(owner, "max_learning_rate", max_learning_rate)
        _require(max_lr >= 0, owner, f"max_learning_rate must be non-negative, got {max_lr}")
        min_lr = _number(owner, "end_learning_rate", end_learning_rate)
        _require(min_lr >= 0, owner, f"end_learning_rate must be non-negative, got {min_lr}")
        self.total_steps = _typed_positive_int(owner, "total_steps", total_steps)
        if not isinstance(phase_pct, float):
            raise TypeError(f"{owner}: phase_pct must be a float, got "
                            f"{type(phase_pct).__name__}")
        _require(0 <= phase_pct <= 1, owner, f"phase_pct must be in [0, 1], got {phase_pct}")
        initial_lr = max_lr / _number(owner, "divide_factor", divide_factor)
        if three_phase:
            _require(phase_pct < 0.5, owner,
                     f"phase_pct must be < 0.5 with three_phase=True, got {phase_pct}")
            ends = [phase_pct * total_steps - 1, 2 * phase_pct * total_steps - 2,
                    total_steps - 1]
            self._lr_config = [initial_lr, max_lr, initial_lr, min_lr]
        else:
            ends = [phase_pct * total_steps - 1, total_steps - 1]
            self._lr_config = [initial_lr, max_lr, min_lr]
        self._step_config = [0, *ends]                   # each phase's first step...
        self._steps_size = [b - a for a, b in zip(self._step_config, ends)]  # ...and length
        _require(all(size > 0 for size in self._steps_size), owner,
                 f"each phase must last at least one step; phase_pct={phase_pct} of "
                 f"total_steps={total_steps} gives phases of {self._steps_size} steps")
        if anneal_strategy == "cos":
            self.anneal_func = self._cos_annealing
        elif anneal_strategy == "linear":
            self.anneal_func = self._linear_annealing
        else:
            raise ValueError(f"{owner}: anneal_strategy must be 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        super().__init__(initial_lr, last_epoch, verbose)

    @staticmethod
    def _cos_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return (end_lr - start_lr) * pct + start_lr

    def get_lr(self) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, past total_steps="
                             f"{self.total_steps}")
        last = len(self._steps_size) - 1
        for i, size in enumerate(self._steps_size):
            if step <= self._step_config[i + 1] or i == last:
                return self.anneal_func(self._lr_config[i], self._lr_config[i + 1],
                                        (step - self._step_config[i]) / size)
        raise AssertionError("unreachable: the last phase takes every later step")


class CyclicLR(LRScheduler):
    """The rate cycles between ``base_learning_rate`` and ``max_learning_rate``: up
    over ``step_size_up`` steps, down over ``step_size_down`` (default: the same).
    The amplitude is scaled per cycle (``mode='triangular'``: 1, ``'triangular2'``:
    halved each cycle) or per step (``'exp_range'``: ``exp_gamma ** step``), or by
    ``scale_fn`` evaluated on the cycle number or step (``scale_mode``).
    """

    def __init__(self, base_learning_rate: float, max_learning_rate: float,
                 step_size_up: int, step_size_down: int | None = None,
                 mode: str = "triangular", exp_gamma: float = 1.0,
                 scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", last_epoch: int = -1,
                 verbose: bool = False) -> None:
        owner = "CyclicLR"
        max_lr = _number(owner, "max_learning_rate", max_learning_rate)
        _require(max_lr >= 0, owner, f"max_learning_rate must be non-negative, got {max_lr}")
        up = _typed_positive_int(owner, "step_size_up", step_size_up)
        down = up if step_size_down is None else \
            _typed_positive_int(owner, "step_size_down", step_size_down)
        if not isinstance(exp_gamma, float):
            raise TypeError(f"{owner}: exp_gamma must be a float, got "
                            f"{type(exp_gamma).__name__}")
        if scale_fn is None and mode not in ("triangular", "triangular2", "exp_range"):
            raise ValueError(f"{owner}: mode must be 'triangular', 'triangular2' or "
                             f"'exp_range' when no scale_fn is given, got {mode!r}")
        _require(scale_mode in ("cycle", "iterations"), owner,
                 f"scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.cycle_size = float(up + down)
        self.step_up_pct = up / self.cycle_size
        self.max_lr = max_lr
        self.amplitude = max_lr - _number(owner, "base_learning_rate", base_learning_rate)
        self.mode = mode
        self.gamma = exp_gamma
        if scale_fn is not None:
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        elif mode == "triangular":
            self.scale_fn, self.scale_mode = self._triangular_scale_fn, "cycle"
        elif mode == "triangular2":
            self.scale_fn, self.scale_mode = self._triangular2_scale_fn, "cycle"
        else:
            self.scale_fn, self.scale_mode = self._exp_range_scale_fn, "iterations"
        super().__init__(base_learning_rate, last_epoch, verbose)

    def _triangular_scale_fn(self, x: float) -> float:
        return 1.0

    def _triangular2_scale_fn(self, x: float) -> float:
        return 1 / (2.0 ** (x - 1))

    def _exp_range_scale_fn(self, x: float) -> float:
        return self.gamma ** x

    def get_lr(self) -> float:
        iterations = self.last_epoch
        cycle = 1 + iterations // self.cycle_size
        pct = 1.0 + iterations / self.cycle_size - cycle
        height = pct / self.step_up_pct if pct <= self.step_up_pct else \
            (1 - pct) / (1 - self.step_up_pct)
        scale_at = cycle if self.scale_mode == "cycle" else iterations
        return self.base_lr + self.amplitude * height * self.scale_fn(scale_at)


class LinearLR(LRScheduler):
    """The rate goes linearly from ``start_factor * learning_rate`` to
    ``end_factor * learning_rate`` over ``total_steps`` steps, then stays. ``step()``
    computes it from the previous rate, as Paddle does; ``step(epoch)`` from the closed
    form (fastop adds it: Paddle's jump would apply one epoch's change only)."""

    def __init__(self, learning_rate: float, total_steps: int, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, last_epoch: int = -1, verbose: bool = False) -> None:
        owner = "LinearLR"
        _require(0 < _number(owner, "start_factor", start_factor) <= 1, owner,
                 f"start_factor must be in (0, 1], got {start_factor}")
        _require(0 <= _number(owner, "end_factor", end_factor) <= 1, owner,
                 f"end_factor must be in [0, 1], got {end_factor}")
        self.total_steps = _positive_int(owner, "total_steps", total_steps)
        self.start_factor, self.end_factor = start_factor, end_factor
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch == 0:
            return self.base_lr * self.start_factor
        if self.last_epoch > self.total_steps:
            return self.last_lr
        change = self.end_factor - self.start_factor
        return self.last_lr * (1.0 + change / (self.total_steps * self.start_factor
                                               + (self.last_epoch - 1) * change))

    def _get_closed_form_lr(self) -> float:
        # step(epoch) jumps: the recursive form above only moves one epoch at a time.
        progress = min(self.last_epoch, self.total_steps) / self.total_steps
        return self.base_lr * (self.start_factor
                               + (self.end_factor - self.start_factor) * progress)


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing with warm restarts (SGDR): within a period of ``T_i`` epochs::

        lr = eta_min + (learning_rate - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2

    where ``T_cur`` counts epochs since the last restart; the first period is ``T_0``,
    each next one ``T_mult`` times longer. ``T_cur`` and ``T_i`` are saved in the state
    too (fastop adds them, so a resumed run continues its period).
    """

    def __init__(self, learning_rate: float, T_0: int, T_mult: int = 1, eta_min: float = 0,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        self.T_0 = _positive_int("CosineAnnealingWarmRestarts", "T_0", T_0)
        self.T_mult = _positive_int("CosineAnnealingWarmRestarts", "T_mult", T_mult)
        self.T_i = T_0
        self.eta_min = _number("CosineAnnealingWarmRestarts", "eta_min", eta_min)
        self.T_cur = last_epoch
        super().__init__(learning_rate, last_epoch, verbose)

    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr", "T_cur", "T_i"]

    def get_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * \
            (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or go to `epoch` (which may be fractional: a position
        within an epoch, stepping per batch)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"CosineAnnealingWarmRestarts.step: epoch must be "
                                 f"non-negative, got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        self.last_lr = self.get_lr()
        self._report()
