"""Optimizers: SGD, Momentum, Adam, AdamW — eager ``step``/``clear_grad`` and ``minimize``.

Both modes run the same ops: the gradient clipping's (``grad_clip=``, a
``fastop.nn.ClipGradBy*``), then per parameter the registered update op
(``fastop::sgd_update`` ...) with ``out=`` the parameter and its state. Weight decay
(``weight_decay=``: a float or ``fastop.regularizer.L2Decay``/``L1Decay``; AdamW's
decoupled coefficient) is fused into the update kernel, and a clip-by-norm factor reaches
it as its ``grad_scale`` input: one pass over each parameter per step. Eager mode:
``step()`` calls the ops (Cython kernels, no graph, no allocation after the first step).
Static mode: ``minimize(loss)`` calls ``fastop.static.append_backward`` and appends them,
their outputs being the parameter and state variables, so the executor updates them in
place. State (velocity, moments, beta powers) is created per parameter on first use —
eager tensors, or persistable variables initialized by the startup program.

``parameters=`` is a list of parameters or, as in PaddlePaddle, of parameter groups
``{"params": [...], "learning_rate": scale, "weight_decay": ..., ...}``: a group's
options (also ``grad_clip`` and the optimizer's hyper-parameters: ``momentum``,
``beta1`` ...) replace the optimizer's for its parameters, and its ``learning_rate``
scales the optimizer's rate.

The learning rate is a float or a ``fastop.optimizer.lr.LRScheduler``, whose ``step()``
the training loop calls (as in PaddlePaddle). An eager ``step()`` reads ``scheduler()``
each time. A static program keeps the rate in the persistable variable
``<optimizer name>.learning_rate``; with a scheduler, ``minimize`` registers a run hook
on the program that writes ``scheduler()`` into that variable of the run's scope before
every ``Executor.run`` (PaddlePaddle's executor does the same), so a
``scheduler.step()`` between runs applies from the next run.

>>> import numpy as np, fastop
>>> layer = fastop.nn.Linear(3, 1)
>>> opt = fastop.optimizer.SGD(learning_rate=0.1, parameters=layer.parameters())
>>> loss = layer(fastop.to_tensor(np.ones((2, 3), "float32"))).mean()
>>> loss.backward(); opt.step(); opt.clear_grad()
"""
from __future__ import annotations

import math
import numbers
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Callable

import numpy as np

from fastop._core.storage import DenseTensor
from fastop._tensor import Tensor
from fastop.autograd import no_grad
from fastop.nn.clip import ClipGradBase
from fastop.nn.layer import parameter_options
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B
from fastop.regularizer import L2Decay, WeightDecayRegularizer
from fastop.static.framework import Variable
from fastop.tensor.creation import full

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "AdamW", "Adagrad", "Adamax"]

_NAME_COUNTERS: dict[str, int] = {}


def _unique_name(prefix: str) -> str:
    n = _NAME_COUNTERS.get(prefix, 0)
    _NAME_COUNTERS[prefix] = n + 1
    return f"{prefix}_{n}"


def _is_scheduler(value: Any) -> bool:
    """Whether `value` is an LRScheduler: PaddlePaddle's interface, ``scheduler()`` the
    current rate, ``step()`` advancing it (``fastop.optimizer.lr``'s schedulers and any
    object shaped like them)."""
    return callable(value) and callable(getattr(value, "step", None)) \
        and callable(getattr(value, "get_lr", None))


def _is_number(value: Any) -> bool:
    """Whether `value` is a real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _regularizer(owner: str, weight_decay: Any) -> WeightDecayRegularizer | None:
    """The weight decay a ``weight_decay=`` argument asks for (a float: L2)."""
    if weight_decay is None or isinstance(weight_decay, WeightDecayRegularizer):
        return weight_decay
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
        raise TypeError(f"{owner}: weight_decay must be a float (L2 coefficient), a "
                        f"fastop.regularizer.L2Decay or L1Decay, or None; got "
                        f"{type(weight_decay).__name__}")
    if not math.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"{owner}: weight_decay must be finite and non-negative, got "
                         f"{weight_decay}")
    return L2Decay(weight_decay)


class _ScheduledLearningRate:
    """A static program's run hook: before each run, writes the scheduler's current
    rate into the program's learning-rate variable of the run's scope."""

    __slots__ = ("scheduler", "name")

    def __init__(self, scheduler: Any, name: str) -> None:
        self.scheduler, self.name = scheduler, name

    def __call__(self, scope: Any) -> None:
        tensor = scope.find_var(self.name)
        if tensor is not None:              # absent until the startup program has run
            np.asarray(tensor)[0] = self.scheduler()


class Optimizer:
    """Base class: holds the parameters, the learning rate, weight decay, gradient
    clipping and the per-parameter state; subclasses define the update."""

    _update_op: str = ""                    # the update op's name in B
    _state_names: tuple[str, ...] = ()      # per-parameter state (see _state_init)
    _number_states: tuple[str, ...] = ()    # those of them that are one number (shape [1])

    def __init__(self, learning_rate: Any = 0.001, parameters: Iterable[Any] | None = None,
                 weight_decay: Any = None, grad_clip: ClipGradBase | None = None,
                 name: str | None = None) -> None:
        if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
            raise TypeError(f"{type(self).__name__}: grad_clip must be a "
                            f"fastop.nn.ClipGradByGlobalNorm, ClipGradByNorm or "
                            f"ClipGradByValue, got {type(grad_clip).__name__}")
        self._grad_clip = grad_clip
        self._lr_tensors: dict[Any, list] = {}   # (dtype, ratio) -> [rate, [1] tensor]
        # the rate (a float) or an LRScheduler
        if learning_rate is None:           # PaddlePaddle's ValueError (set_lr: TypeError)
            raise ValueError(f"{type(self).__name__}: learning_rate is not set (None); "
                             f"give a non-negative float or an LRScheduler")
        if not (_is_scheduler(learning_rate) or isinstance(learning_rate, float)):
            # PaddlePaddle's rule: a float or an LRScheduler (an int is a TypeError too;
            # set_lr takes ints)
            raise TypeError(f"{type(self).__name__}: learning_rate must be a non-negative "
                            f"float or an LRScheduler, got {type(learning_rate).__name__} "
                            f"{learning_rate!r:.40}")
        self._learning_rate: Any = learning_rate if _is_scheduler(learning_rate) else \
            self._checked_rate(learning_rate)
        self.regularization = _regularizer(type(self).__name__, weight_decay)
        # per parameter (by id), the options of its parameter group (list-of-dicts form)
        self._group_of: dict[int, dict[str, Any]] = {}
        self._param_groups: list[dict[str, Any]] = []
        if parameters is None:
            if current_mode() == "eager":
                raise AttributeError(f"{type(self).__name__}: parameters are required "
                                     f"in eager mode (e.g. parameters=model.parameters())")
            self._parameter_list = None
        elif isinstance(parameters, (list, tuple)) and parameters and \
                isinstance(parameters[0], dict):
            self._parameter_list = self._checked_groups(parameters)
        else:
            self._parameter_list = self._checked_parameters(parameters)
        self._state: dict[int, dict[str, Any]] = {}
        self._seen_grads: dict[int, int] = {}
        self._name = name or _unique_name(type(self).__name__.lower())

    def _checked_parameters(self, parameters: Any) -> list[Any]:
        """`parameters` as a list: an iterable of distinct Tensors (static Variables in
        static mode). A single Tensor, a string or a dict is refused rather than
        iterated (a Tensor's rows would train nothing)."""
        where = f"{type(self).__name__}: parameters must be a list of parameters " \
                f"(e.g. model.parameters())"
        if isinstance(parameters, (DenseTensor, Variable)):
            kind = "Tensor" if isinstance(parameters, DenseTensor) else "Variable"
            raise TypeError(f"{where}, got a single {kind}; to train one, pass "
                            f"parameters=[weight]")
        if isinstance(parameters, (np.ndarray, str, bytes, dict)) or \
                not isinstance(parameters, Iterable):
            raise TypeError(f"{where}, got {type(parameters).__name__}")
        items = list(parameters)
        if not items:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        static = current_mode() != "eager"
        seen: dict[int, int] = {}
        for i, p in enumerate(items):
            if static and not isinstance(p, Variable):
                raise TypeError(f"{where}: item {i} is {type(p).__name__}, not a static "
                                f"Variable (in static mode parameters are the program's "
                                f"Variables)")
            if not static and not isinstance(p, Tensor):
                raise TypeError(f"{where}: item {i} is {type(p).__name__}, not a Tensor")
            if id(p) in seen:
                raise TypeError(f"{where}: item {i} is item {seen[id(p)]} again (each "
                                f"parameter once)")
            seen[id(p)] = i
            self._check_updatable(p, f"item {i}")
        return items

    # options a parameter group may set besides "params" (PaddlePaddle's names)
    _group_options: tuple[str, ...] = ("learning_rate", "weight_decay", "grad_clip")

    def _checked_groups(self, groups: list | tuple) -> list[Any]:
        """PaddlePaddle's parameter groups: a list of dicts ``{"params": [...],
        "learning_rate": scale, "weight_decay": ..., ...}``, a group's options overriding
        the optimizer's for its parameters; a group's ``learning_rate`` scales the
        optimizer's rate (and its scheduler's). Returns all the parameters, in order."""
        params: list[Any] = []
        for group in groups:
            params.extend(self._new_group(group, params))
        return params

    def _new_group(self, group: Any, taken: list[Any]) -> list[Any]:
        """Check one parameter group (none of its parameters among `taken` or in an
        earlier group) and record its options; returns its parameters."""
        owner, g = type(self).__name__, len(self._param_groups)
        if not isinstance(group, dict):
            raise TypeError(f"{owner}: parameters given as parameter groups must all be "
                            f"dicts {{'params': [...], ...}}; group {g} is "
                            f"{type(group).__name__}")
        if "params" not in group:
            raise ValueError(f"{owner}: parameter group {g} has no 'params' entry "
                             f"(its keys: {sorted(group)})")
        unknown = sorted(k for k in group if k != "params" and k not in self._group_options)
        if unknown:
            raise ValueError(f"{owner}: parameter group {g} sets {unknown}, which "
                             f"{owner} does not take per group; a group may set "
                             f"{list(self._group_options)}")
        options = {key: self._checked_group_option(key, value, g)
                   for key, value in group.items() if key != "params"}
        members = group["params"]
        if isinstance(members, (DenseTensor, Variable)):   # one parameter (PaddlePaddle)
            members = [members]
        members = self._checked_parameters(members)
        taken_ids = {id(p) for p in taken}
        for p in members:
            if id(p) in self._group_of or id(p) in taken_ids:
                raise ValueError(f"{owner}: a parameter {getattr(p, 'name', '')!r} is in "
                                 f"more than one parameter group (group {g} and an "
                                 f"earlier one)")
        for p in members:
            self._group_of[id(p)] = options
        self._param_groups.append({"params": members, **options})
        return members

    def _add_param_group(self, param_group: dict) -> None:
        """Add a parameter group after construction (PaddlePaddle's
        ``Optimizer._add_param_group``, which its PyTorch migration guide uses for
        ``add_param_group``); options it leaves out are the optimizer's."""
        self._parameter_list = (self._parameter_list or []) + \
            self._new_group(param_group, self._parameter_list or [])

    def _checked_group_option(self, key: str, value: Any, group: int) -> Any:
        """A parameter group's option, checked and converted as the optimizer's own."""
        owner = f"{type(self).__name__} (parameter group {group})"
        if key == "learning_rate":
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
                    not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{owner}: learning_rate (a scale of the optimizer's "
                                 f"rate) must be a finite number >= 0, got {value!r:.40}")
            return float(value)
        if key == "weight_decay":
            return _regularizer(owner, value)
        if key == "grad_clip":
            if value is not None and not isinstance(value, ClipGradBase):
                raise TypeError(f"{owner}: grad_clip must be a "
                                f"fastop.nn.ClipGradByGlobalNorm, ClipGradByNorm or "
                                f"ClipGradByValue, got {type(value).__name__}")
            return value
        if key in ("beta1", "beta2"):
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"{owner}: {key} must be in [0, 1), got {value!r:.40}")
            return float(value)
        if key in ("epsilon", "initial_accumulator_value"):
            if not _is_number(value) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{owner}: {key} must be a finite number >= 0, got "
                                 f"{value!r:.40}")
            return float(value)
        return value

    def _option(self, param: Any, key: str, default: Any) -> Any:
        """`param`'s group's value of option `key`, else the optimizer's (`default`)."""
        group = self._group_of.get(id(param))
        return default if group is None else group.get(key, default)

    def _check_updatable(self, param: Any, which: str) -> None:
        """Refuse a parameter of a dtype fastop stores but does not compute in (float16,
        uint8): its update would fail inside an internal op, mid-step."""
        dtype = param.dtype
        if dtype.is_storage_only:
            name = getattr(param, "name", None)
            raise TypeError(
                f"{type(self).__name__}: parameter {which}{f' ({name!r})' if name else ''} "
                f"is {dtype.name}, a dtype fastop stores but does not compute in; "
                f"optimizers update float32 and float64 "
                f"parameters: keep the model in float32 (layer.to(dtype='float32')) and "
                f"cast only what must be stored small")

    # -- learning rate -------------------------------------------------------------------
    def _checked_rate(self, value: Any) -> float:
        """A learning rate given as a number: a finite float >= 0."""
        owner = type(self).__name__
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{owner}: learning_rate must be a non-negative float or an "
                            f"LRScheduler, got {type(value).__name__} {value!r:.40}")
        rate = float(value)
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"{owner}: learning_rate must be a finite number >= 0, got "
                             f"{rate}")
        return rate

    def get_lr(self) -> float:
        """The current learning rate: the float, or the scheduler's current value
        (which must be a finite number >= 0)."""
        lr = self._learning_rate
        if not _is_scheduler(lr):
            return lr
        rate = float(lr())
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"{type(self).__name__}: the learning-rate scheduler "
                             f"{type(lr).__name__} gave {rate}; a rate is a finite "
                             f"number >= 0")
        return rate

    def set_lr(self, value: float) -> None:
        """Set the learning rate of the next eager ``step()`` (and of programs built by a
        later ``minimize``; a built program reads the persistable variable
        ``<optimizer name>.learning_rate`` of its scope, which can be set there).
        Not with an LRScheduler, which sets the rate itself."""
        if _is_scheduler(self._learning_rate):
            raise RuntimeError(f"{type(self).__name__}.set_lr: the learning rate comes "
                               f"from an LRScheduler ({type(self._learning_rate).__name__})"
                               f"; step the scheduler instead")
        self._learning_rate = self._checked_rate(value)

    def _lr_ratio(self, param: Any) -> float:
        """The factor on the learning rate of `param`: its parameter group's
        ``learning_rate`` times its ParamAttr's (AdamW also multiplies in its
        lr_ratio)."""
        return self._option(param, "learning_rate", 1.0) * \
            parameter_options(param).get("learning_rate", 1.0)

    def _decay(self, param: Any) -> WeightDecayRegularizer | None:
        """The coupled weight decay of `param`: its ParamAttr's regularizer, else its
        group's or the optimizer's ``weight_decay`` (PaddlePaddle's precedence)."""
        own = parameter_options(param).get("regularizer")
        return own if own is not None else \
            self._option(param, "weight_decay", self.regularization)

    def _eager_lr(self, param: Any) -> Any:
        """The learning rate (times the parameter's ratio) as a one-element tensor of
        param's dtype — the update ops take it as an input, as PaddlePaddle's do —
        refilled when the rate has changed."""
        ratio = self._lr_ratio(param)
        rate = self.get_lr() * ratio
        entry = self._lr_tensors.get((param.dtype, ratio))
        if entry is None:
            entry = self._lr_tensors[param.dtype, ratio] = [rate, full([1], rate, param.dtype)]
        elif entry[0] != rate:
            np.asarray(entry[1])[0] = entry[0] = rate
        return entry[1]

    # -- eager -----------------------------------------------------------------------------
    def step(self) -> None:
        """Update every parameter that has a gradient (eager mode), in place."""
        if current_mode() != "eager":
            raise RuntimeError(f"{type(self).__name__}.step() runs in eager mode; in "
                               f"static mode call minimize(loss) while building the program")
        params_grads = [(p, p.grad) for p in self._parameter_list
                        if p.grad is not None and not p.stop_gradient]
        self._apply(params_grads, self._eager_lr, self._eager_state)
        self._remember_grads()

    def clear_grad(self, set_to_zero: bool = True) -> None:
        """Reset the parameters' gradients to zeros (PaddlePaddle's default) or, with
        ``set_to_zero=False``, to None (cheaper: the next backward writes them fresh)."""
        if current_mode() != "eager":
            raise RuntimeError(f"{type(self).__name__}.clear_grad() runs in eager mode")
        for param in self._parameter_list:
            param.clear_grad(set_to_zero)
        self._remember_grads()

    clear_gradients = clear_grad

    def _remember_grads(self) -> None:
        """Note how many gradients each parameter has been given, so minimize can tell
        whether a backward gave new ones since (reading ``.grad`` would make the zeros
        clear_grad leaves for later)."""
        self._seen_grads = {id(p): p._grad_version for p in self._parameter_list}

    def _eager_state(self, param: Any) -> dict[str, Any]:
        state = self._state.get(id(param))
        if state is None:
            state = self._state[id(param)] = {
                key: full(shape, value, param.dtype)
                for key, (shape, value) in self._state_init(param).items()}
        return state

    # -- both modes ------------------------------------------------------------------------
    def _apply(self, params_grads: list, lr_of: Callable[[Any], Any],
               state_of: Callable[[Any], dict]) -> None:
        """Clip the gradients, then run (eager) or append (static) each parameter's
        update op, writing the parameter and its state in place."""
        entries = []
        for clip, pairs in self._by_clip(params_grads):
            if clip is None:
                entries += [(p, g, None) for p, g in pairs]
            else:
                with no_grad():  # a gradient made with create_graph=True records nothing here
                    entries += clip._clip(pairs)
        if not self._update_op:                 # an update composed of elementwise ops
            for param, grad, scale in entries:
                with no_grad():
                    self._composed_update(param, self._decayed_grad(param, grad, scale),
                                          lr_of(param), state_of(param))
            return
        update = getattr(B, self._update_op)
        for param, grad, scale in entries:
            inputs, outputs = self._io(param, grad, lr_of(param), state_of(param))
            # grad_scale (the clip folded in) even when None (absent): a call with every
            # input stays on the eager dispatch's cached path
            update(*inputs, scale, out=outputs, **self._attrs(param))

    def _by_clip(self, params_grads: list) -> list[tuple[Any, list]]:
        """`params_grads` split by the gradient clipping that applies: the optimizer's,
        or with parameter groups each group's own (PaddlePaddle clips per group)."""
        if not self._param_groups:
            return [(self._grad_clip, params_grads)]
        parts: dict[int, tuple[Any, list]] = {}
        for p, g in params_grads:
            group = self._group_of.get(id(p))
            key = id(group)
            if key not in parts:
                parts[key] = (self._option(p, "grad_clip", self._grad_clip), [])
            parts[key][1].append((p, g))
        return list(parts.values())

    def minimize(self, loss: Any, startup_program: Any = None, parameters: Any = None,
                 no_grad_set: Any = None) -> tuple[list, list]:
        """Eager: ``loss.backward()`` then ``step()`` — unless a backward already left new
        gradients since the last step/clear_grad, which are then applied as they are
        (PaddlePaddle's dygraph ``minimize``). Static: append backward ops, then the
        clipping and update ops, to the program.
        Returns ``(ops appended after the backward, [(param, grad), ...])``."""
        if current_mode() == "eager":
            params = list(parameters) if parameters is not None else self._parameter_list
            if self._needs_backward(params):
                loss.backward()
            saved, self._parameter_list = self._parameter_list, params
            try:
                self.step()
            finally:
                self._parameter_list = saved
            return [], [(p, p.grad) for p in params if p.grad is not None]
        from fastop import static
        startup = startup_program or static.default_startup_program()
        with static.program_guard(loss.block.program, startup):
            params_grads = self.backward(loss, startup, parameters, no_grad_set)
            return self.apply_gradients(params_grads), params_grads

    def _needs_backward(self, params: list) -> bool:
        """Whether no backward has left new gradients for `params` since the last
        step/clear_grad (eager minimize then runs one)."""
        seen = self._seen_grads
        return not any(p._grad_version != seen.get(id(p)) and p.grad is not None
                       for p in params)

    def backward(self, loss: Any, startup_program: Any = None, parameters: Any = None,
                 no_grad_set: Any = None) -> list:
        """The first half of :meth:`minimize` (PaddlePaddle's name): compute gradients and
        return ``[(param, grad), ...]`` for the parameters that have one. Eager: runs
        ``loss.backward()``. Static: appends the backward ops to the loss's program."""
        params = parameters if parameters is not None else self._parameter_list
        if current_mode() == "eager":
            loss.backward()
            return [(p, p.grad) for p in params if p.grad is not None and not p.stop_gradient]
        from fastop import static
        startup = startup_program or static.default_startup_program()
        with static.program_guard(loss.block.program, startup):
            params_grads = static.append_backward(loss, parameter_list=params,
                                                  no_grad_set=no_grad_set)
        if not params_grads:
            raise ValueError(f"{type(self).__name__}.minimize: the loss "
                             f"'{loss.name}' depends on no trainable parameter")
        return params_grads

    def apply_gradients(self, params_grads: list) -> list:
        """The second half of :meth:`minimize`: clip the gradients and update each
        parameter. Eager: in place, now (returns []). Static: appends the clipping and
        update ops to the parameters' program (startup values go to the default startup
        program) and returns them."""
        params_grads = [(p, g) for p, g in params_grads if not p.stop_gradient]
        if current_mode() == "eager":
            self._apply(params_grads, self._eager_lr, self._eager_state)
            self._remember_grads()
            return []
        if not params_grads:
            return []
        from fastop import static
        program = params_grads[0][0].block.program
        with static.program_guard(program, static.default_startup_program()):
            block = program.global_block()
            first = len(block.ops)
            lr = self._static_lr(program, params_grads[0][0].dtype)
            scaled: dict[float, Any] = {1.0: lr}

            def lr_of(param: Any) -> Any:
                ratio = self._lr_ratio(param)
                if ratio not in scaled:
                    scaled[ratio] = B.multiply(lr, ratio)
                return scaled[ratio]

            self._apply(params_grads, lr_of, self._static_state)
        return block.ops[first:]

    def _static_lr(self, program: Any, dtype: Any) -> Any:
        """The program's learning-rate variable; with a scheduler, the run hook that
        keeps it current."""
        lr = self._static_variable("learning_rate", [1], dtype, self.get_lr())
        if _is_scheduler(self._learning_rate) and not any(
                isinstance(h, _ScheduledLearningRate) and h.name == lr.name
                for h in program._run_hooks):
            program._run_hooks.append(_ScheduledLearningRate(self._learning_rate, lr.name))
        return lr

    def _static_variable(self, name: str, shape: list[int], dtype: Any, value: float) -> Any:
        """A persistable variable filled with `value` by the startup program (not a
        parameter: nothing trains it)."""
        from fastop import static
        name = f"{self._name}.{name}"
        block = static.default_main_program().global_block()
        if block.has_var(name):
            return block.var(name)
        return static.create_global_var(shape, value, dtype, persistable=True, name=name)

    def _static_state(self, param: Any) -> dict[str, Any]:
        return {key: self._static_variable(f"{param.name}_{key}", shape, param.dtype, value)
                for key, (shape, value) in self._state_init(param).items()}

    def _state_init(self, param: Any) -> dict[str, tuple[list[int], float]]:
        """Each state entry's shape and initial value."""
        return {key: (list(param.shape), 0.0) for key in self._state_names}

    def _decayed_grad(self, param: Any, grad: Any, scale: Any) -> Any:
        """For a composed update: ``scale * grad`` plus the coupled weight decay
        (L2 ``coeff * param``, L1 ``coeff * sign(param)``), as the fused kernels' g."""
        g = grad if scale is None else B.multiply(grad, scale)
        decay = self._decay(param)
        if decay is None or decay.coeff == 0.0:
            return g
        term = param if decay.method == "l2_decay" else B.sign(param)
        return B.add(g, B.multiply(term, decay.coeff))

    def _composed_update(self, param: Any, g: Any, lr: Any, state: dict) -> None:
        """The update of an optimizer without a fused update op (``_update_op`` empty):
        elementwise ops writing the parameter and state with ``out=``."""
        raise NotImplementedError

    def _io(self, param: Any, grad: Any, lr: Any, state: dict) -> tuple[list, list]:
        """The update op's inputs (without grad_scale) and outputs."""
        raise NotImplementedError

    def _attrs(self, param: Any) -> dict[str, Any]:
        """The update op's attributes for `param`: the fused weight decay."""
        decay = self._decay(param)
        return {"regularization_method": decay.method if decay is not None else "",
                "regularization_coeff": decay.coeff if decay is not None else 0.0}

    # -- state dict ------------------------------------------------------------------------
    def _param_key(self, index: int, param: Any) -> str:
        return getattr(param, "name", None) or f"param_{index}"

    def state_dict(self) -> "OrderedDict[str, Any]":
        """Per-parameter state as ``{"<param name>_<state>": tensor}`` plus the learning
        rate: ``LR`` (a float) or ``LR_Scheduler`` (the scheduler's state dict)."""
        out: OrderedDict[str, Any] = OrderedDict()
        for i, param in enumerate(self._parameter_list or ()):
            for key, value in self._state.get(id(param), {}).items():
                out[f"{self._param_key(i, param)}_{key}"] = value
        if _is_scheduler(self._learning_rate):
            out["LR_Scheduler"] = self._learning_rate.state_dict()
        else:
            out["LR"] = self._learning_rate
        return out

    def set_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Restore what :meth:`state_dict` returned (tensors or arrays).

        Keys name parameters, and parameter names are unique per process (a model built
        twice has ``linear_0.w_0`` then ``linear_2.w_0``): when the keys name other
        parameters than this optimizer's but hold the state of as many parameters, of the
        same shapes, in the same order, the state is loaded by position (the order
        :meth:`state_dict` wrote it in: the optimizer's parameter order).
        With `strict` (as PyTorch's ``load_state_dict``), a key that matches no
        parameter of this optimizer, or a parameter given part of its state, is an
        error listing them; ``strict=False`` loads what matches, warns with the counts
        when that is not everything, and is an error when nothing matches. A state of
        the wrong shape is always an error naming the parameter."""
        cls = type(self).__name__
        given = {k: v for k, v in state_dict.items() if k not in ("LR", "LR_Scheduler")}
        expected = self._by_position(given) or self._by_name()
        unmatched = [k for k in given if k not in expected]
        per_param: dict[int, list[str]] = {}
        for key, (param, _) in expected.items():
            per_param.setdefault(id(param), []).append(key)
        partial = []                    # (parameter key, its first state key not given)
        for keys in per_param.values():
            lacking = [k for k in keys if k not in given]
            if lacking and len(lacking) < len(keys):
                partial.append((lacking[0][:-len(expected[lacking[0]][1]) - 1], lacking[0]))
        loaded = [k for k in given if k in expected]
        if given and not loaded:
            raise ValueError(f"{cls}.set_state_dict: none of the {len(given)} state "
                             f"entries matches a parameter of this optimizer (keys "
                             f"{list(given)[:4]}{'...' if len(given) > 4 else ''}; its "
                             f"parameters: {self._param_names()}): nothing was loaded")
        if strict and unmatched:
            raise ValueError(f"{cls}.set_state_dict: {len(unmatched)} key(s) match no "
                             f"parameter of this optimizer: {unmatched} (its parameters: "
                             f"{self._param_names()}); pass strict=False to load only "
                             f"the keys that match")
        if strict and partial:
            raise ValueError(f"{cls}.set_state_dict: parameter '{partial[0][0]}' lacks "
                             f"{partial[0][1]!r} (a parameter's state is loaded whole); "
                             f"pass strict=False to load it anyway")
        if _is_scheduler(self._learning_rate):
            if "LR_Scheduler" in state_dict:
                self._learning_rate.set_state_dict(state_dict["LR_Scheduler"])
        elif "LR" in state_dict:
            self.set_lr(float(np.asarray(state_dict["LR"])))
        for key in loaded:
            param, name = expected[key]
            self._load_state_value(self._eager_state(param), name, np.asarray(given[key]),
                                   param)
        if unmatched or partial:
            warnings.warn(f"{cls}.set_state_dict: loaded {len(loaded)} of the {len(given)} "
                          f"state entries given (strict=False): "
                          + "; ".join(filter(None, [
                              f"{len(unmatched)} matched no parameter of this optimizer "
                              f"(e.g. {unmatched[0]!r})" if unmatched else "",
                              f"{len(partial)} parameter(s) got part of their state (e.g. "
                              f"'{partial[0][0]}' lacks {partial[0][1]!r})" if partial
                              else ""])), stacklevel=2)

    def _by_name(self) -> dict[str, tuple[Any, str]]:
        """Each state key this optimizer's parameters have: (parameter, state name)."""
        return {f"{self._param_key(i, param)}_{key}": (param, key)
                for i, param in enumerate(self._parameter_list or ())
                for key in self._state_names}

    def _by_position(self, given: dict) -> dict[str, tuple[Any, str]]:
        """The keys of `given` mapped to this optimizer's parameters by position, when
        they name other parameters but hold, in order, whole states of exactly as many
        parameters of the same shapes; else {}."""
        params = list(self._parameter_list or ())
        ours = self._by_name()
        if not given or all(k in ours for k in given):
            return {}
        suffixes = sorted(self._state_names, key=len, reverse=True)
        groups: dict[str, dict[str, str]] = {}        # saved parameter key -> state -> key
        for key in given:
            state = next((s for s in suffixes if key.endswith("_" + s)), None)
            if state is None:
                return {}
            groups.setdefault(key[:-len(state) - 1], {})[state] = key
        if len(groups) != len(params) or any(set(g) != set(self._state_names)
                                             for g in groups.values()):
            return {}
        mapping = {}
        for param, states in zip(params, groups.values()):
            for state, key in states.items():
                shape = list(np.shape(np.asarray(given[key])))
                if state not in self._number_states and shape != list(param.shape):
                    return {}
                mapping[key] = (param, state)
        return mapping

    def _param_names(self) -> list[str]:
        return [self._param_key(i, p) for i, p in enumerate(self._parameter_list or ())]

    def _load_state_value(self, state: dict, key: str, value: np.ndarray, param: Any) -> None:
        if key in self._number_states:        # a number, kept as shape [1]
            if value.size != 1:
                raise ValueError(f"{type(self).__name__}.set_state_dict: state '{key}' of "
                                 f"parameter '{param.name}' is a number, got shape "
                                 f"{list(value.shape)}")
            value = np.reshape(value, [1])
        target = np.asarray(state[key])
        if value.shape != target.shape:
            index = next(i for i, p in enumerate(self._parameter_list) if p is param)
            raise ValueError(f"{type(self).__name__}.set_state_dict: state '{key}' of "
                             f"parameter '{self._param_key(index, param)}' has shape "
                             f"{list(target.shape)}, got {list(value.shape)}")
        target[...] = value

    def __repr__(self) -> str:
        lr = self._learning_rate
        return f"{type(self).__name__}(learning_rate=" \
               f"{type(lr).__name__ if _is_scheduler(lr) else lr})"


class SGD(Optimizer):
    """``param -= lr * g``, ``g`` the (clipped) gradient plus the weight decay term."""

    _update_op = "sgd_update"

    def _io(self, param, grad, lr, state):
        return [param, grad, lr], [param]


class Momentum(Optimizer):
    """Momentum SGD: ``v = momentum * v + g; param -= lr * v`` (Nesterov:
    ``param -= lr * (g + momentum * v)``), ``g`` the (clipped) gradient plus the weight
    decay term. PaddlePaddle's ``multi_precision`` (float32 master weights of
    lower-precision parameters) and ``use_multi_tensor`` (one fused update of all
    parameters, the same numbers) change nothing here: fastop's parameters are
    float32/float64 and its update kernel runs per parameter."""

    _update_op = "momentum_update"
    _state_names = ("velocity",)

    def __init__(self, learning_rate: Any = 0.001, momentum: float = 0.9,
                 parameters: Iterable[Any] | None = None, use_nesterov: bool = False,
                 weight_decay: Any = None, grad_clip: ClipGradBase | None = None,
                 multi_precision: bool = False, use_multi_tensor: bool = False,
                 name: str | None = None) -> None:
        if momentum is None:
            raise ValueError("Momentum: momentum is not set (None)")
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._momentum, self._use_nesterov = float(momentum), bool(use_nesterov)

    _group_options = Optimizer._group_options + ("momentum", "use_nesterov")

    def _checked_group_option(self, key, value, group):
        if key == "momentum":
            return float(value)
        if key == "use_nesterov":
            return bool(value)
        return super()._checked_group_option(key, value, group)

    def _io(self, param, grad, lr, state):
        velocity = state["velocity"]
        return [param, grad, velocity, lr], [param, velocity]

    def _attrs(self, param):
        return {"momentum": self._option(param, "momentum", self._momentum),
                "use_nesterov": self._option(param, "use_nesterov", self._use_nesterov),
                **super()._attrs(param)}


class Adam(Optimizer):
    """Adam with bias correction; ``weight_decay`` is added to the gradient (L2 or L1,
    as PaddlePaddle's Adam; for decoupled decay use :class:`AdamW`). Moments start at
    zero, the beta powers at beta1/beta2."""

    _update_op = "adam_update"
    _state_names = ("moment1", "moment2", "beta1_pow", "beta2_pow")
    _number_states = ("beta1_pow", "beta2_pow")

    def __init__(self, learning_rate: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters: Iterable[Any] | None = None,
                 weight_decay: Any = None, grad_clip: ClipGradBase | None = None,
                 lazy_mode: bool = False, name: str | None = None) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        owner = type(self).__name__
        for label, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{owner}: {label} must be in [0, 1), got {beta}")
        if not epsilon >= 0:
            raise ValueError(f"{owner}: epsilon must be >= 0, got {epsilon}")
        if lazy_mode:
            raise ValueError(f"{owner}: lazy_mode (sparse updates) is not supported by "
                             f"fastop")
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    _group_options = Optimizer._group_options + ("beta1", "beta2", "epsilon")

    def _betas(self, param: Any) -> dict[str, float]:
        """beta1, beta2 and epsilon of `param` (its parameter group's or the optimizer's)."""
        return {"beta1": self._option(param, "beta1", self._beta1),
                "beta2": self._option(param, "beta2", self._beta2),
                "epsilon": self._option(param, "epsilon", self._epsilon)}

    def _state_init(self, param):
        shape = list(param.shape)
        return {"moment1": (shape, 0.0), "moment2": (shape, 0.0),
                "beta1_pow": ([1], self._option(param, "beta1", self._beta1)),
                "beta2_pow": ([1], self._option(param, "beta2", self._beta2))}

    def _io(self, param, grad, lr, state):
        m1, m2, b1p, b2p = (state[key] for key in self._state_names)
        return [param, grad, lr, m1, m2, b1p, b2p], [param, m1, m2, b1p, b2p]

    def _attrs(self, param):
        return {**self._betas(param), **super()._attrs(param)}


class AdamW(Adam):
    """Adam with decoupled weight decay (PaddlePaddle's ``AdamW``, Loshchilov & Hutter):
    ``param = param * (1 - lr * weight_decay)``, then Adam's step on the (clipped)
    gradient; the decay is not added to the gradient, so the moments never see it.

    ``lr_ratio(param) -> float`` scales the learning rate per parameter (layer-wise
    rates); ``apply_decay_param_fun(name) -> bool`` picks the parameters that decay
    (e.g. not biases and norms). ``multi_precision`` keeps float32 master weights of
    lower-precision parameters in PaddlePaddle; fastop's are float32/float64, so it
    changes nothing."""

    _update_op = "adamw_update"

    def __init__(self, learning_rate: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters: Iterable[Any] | None = None,
                 weight_decay: float = 0.01,
                 lr_ratio: Callable[[Any], float] | None = None,
                 apply_decay_param_fun: Callable[[str], bool] | None = None,
                 grad_clip: ClipGradBase | None = None, lazy_mode: bool = False,
                 multi_precision: bool = False, name: str | None = None) -> None:
        if not isinstance(weight_decay, float):   # an int too, as PaddlePaddle
            raise TypeError(f"AdamW: weight_decay must be a float (the decoupled decay "
                            f"coefficient), got {type(weight_decay).__name__} "
                            f"{weight_decay!r:.40}")
        if not math.isfinite(weight_decay) or weight_decay < 0:
            raise ValueError(f"AdamW: weight_decay must be finite and non-negative, got "
                             f"{weight_decay}")
        for label, fn in (("lr_ratio", lr_ratio),
                          ("apply_decay_param_fun", apply_decay_param_fun)):
            if fn is not None and not callable(fn):
                raise TypeError(f"AdamW: {label} must be callable or None, got "
                                f"{type(fn).__name__}")
        super().__init__(learning_rate, beta1, beta2, epsilon, parameters, None, grad_clip,
                         lazy_mode, name)
        self._coeff = float(weight_decay)
        self._lr_ratio_fn, self._apply_decay_param_fun = lr_ratio, apply_decay_param_fun
        self._multi_precision = bool(multi_precision)

    def _lr_ratio(self, param):
        ratio = super()._lr_ratio(param)
        return ratio if self._lr_ratio_fn is None else ratio * float(self._lr_ratio_fn(param))

    def _attrs(self, param):
        decays = self._apply_decay_param_fun is None or \
            bool(self._apply_decay_param_fun(param.name))
        return {**self._betas(param), "coeff": self._option(param, "weight_decay", self._coeff),
                "with_decay": decays}

    def _checked_group_option(self, key, value, group):
        if key == "weight_decay":   # AdamW's: the decoupled coefficient
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value < 0:
                raise ValueError(f"AdamW (parameter group {group}): weight_decay must be "
                                 f"a finite float >= 0 (the decoupled decay coefficient), "
                                 f"got {value!r:.40}")
            return float(value)
        return super()._checked_group_option(key, value, group)


class Adagrad(Optimizer):
    """Adagrad (PaddlePaddle's): ``moment += g * g; param -= lr * g / (sqrt(moment) +
    epsilon)``, ``g`` the (clipped) gradient plus the weight decay term; the moment
    starts at ``initial_accumulator_value``. Composed of elementwise ops (no fused
    kernel), in both modes."""

    _state_names = ("moment",)

    def __init__(self, learning_rate: Any, epsilon: float = 1e-6,
                 parameters: Iterable[Any] | None = None, weight_decay: Any = None,
                 grad_clip: ClipGradBase | None = None, name: str | None = None,
                 initial_accumulator_value: float = 0.0) -> None:
        if epsilon is None:
            raise ValueError("Adagrad: epsilon is not set (None)")
        if not epsilon >= 0:
            raise ValueError(f"Adagrad: epsilon must be >= 0, got {epsilon}")
        if not (math.isfinite(initial_accumulator_value) and initial_accumulator_value >= 0):
            raise ValueError(f"Adagrad: initial_accumulator_value must be a finite number "
                             f">= 0, got {initial_accumulator_value}")
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._epsilon = float(epsilon)
        self._initial_accumulator_value = float(initial_accumulator_value)

    _group_options = Optimizer._group_options + ("epsilon", "initial_accumulator_value")

    def _state_init(self, param):
        return {"moment": (list(param.shape), self._option(
            param, "initial_accumulator_value", self._initial_accumulator_value))}

    def _composed_update(self, param, g, lr, state):
        moment = state["moment"]
        B.add(moment, B.multiply(g, g), out=moment)
        epsilon = self._option(param, "epsilon", self._epsilon)
        step = B.divide(B.multiply(g, lr), B.add(B.sqrt(moment), epsilon))
        B.subtract(param, step, out=param)


class Adamax(Optimizer):
    """Adamax (PaddlePaddle's, Kingma & Ba): ``moment = beta1 * moment + (1 - beta1) * g;
    inf_norm = max(beta2 * inf_norm + epsilon, |g|); param -= lr / (1 - beta1^t) *
    moment / inf_norm``, ``g`` the (clipped) gradient plus the weight decay term; the
    power beta1^t starts at beta1. Composed of elementwise ops (no fused kernel)."""

    _state_names = ("moment", "inf_norm", "beta1_pow")
    _number_states = ("beta1_pow",)

    def __init__(self, learning_rate: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters: Iterable[Any] | None = None,
                 weight_decay: Any = None, grad_clip: ClipGradBase | None = None,
                 name: str | None = None) -> None:
        for label, value in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
            if value is None:
                raise ValueError(f"Adamax: {label} is not set (None)")
        for label, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Adamax: {label} must be in [0, 1), got {beta}")
        if not epsilon >= 0:
            raise ValueError(f"Adamax: epsilon must be >= 0, got {epsilon}")
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    _group_options = Optimizer._group_options + ("beta1", "beta2", "epsilon")

    def _state_init(self, param):
        shape = list(param.shape)
        return {"moment": (shape, 0.0), "inf_norm": (shape, 0.0),
                "beta1_pow": ([1], self._option(param, "beta1", self._beta1))}

    def _composed_update(self, param, g, lr, state):
        moment, inf_norm, beta1_pow = state["moment"], state["inf_norm"], state["beta1_pow"]
        b1 = self._option(param, "beta1", self._beta1)
        b2 = self._option(param, "beta2", self._beta2)
        epsilon = self._option(param, "epsilon", self._epsilon)
        B.add(B.multiply(moment, b1), B.multiply(g, 1.0 - b1), out=moment)
        B.maximum(B.add(B.multiply(inf_norm, b2), epsilon), B.abs(g), out=inf_norm)
        rate = B.divide(lr, B.subtract(B.full_like(beta1_pow, 1.0), beta1_pow))
        B.subtract(param, B.multiply(B.divide(moment, inf_norm), rate), out=param)
        B.multiply(beta1_pow, b1, out=beta1_pow)
