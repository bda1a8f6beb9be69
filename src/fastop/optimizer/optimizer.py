"""Optimizers: SGD, Momentum, Adam — eager ``step``/``clear_grad`` and ``minimize``.

Eager mode: ``step()`` updates every parameter that has a gradient in place by calling
the registered update op (``fastop::sgd_update`` ...) with ``out=`` the parameter and its
state (Cython kernels, no graph, no allocation after the first step). Static mode: ``minimize(loss)`` calls ``fastop.static.append_backward``
and appends the registered update ops (``fastop::sgd_update`` ...) whose outputs are
the parameter and state variables themselves, so the executor updates them in place.
State (velocity, moments, beta powers) is created per parameter on first use — eager
tensors, or persistable variables initialized by the startup program.

>>> import numpy as np, fastop
>>> layer = fastop.nn.Linear(3, 1)
>>> opt = fastop.optimizer.SGD(learning_rate=0.1, parameters=layer.parameters())
>>> loss = layer(fastop.to_tensor(np.ones((2, 3), "float32"))).mean()
>>> loss.backward(); opt.step(); opt.clear_grad()
"""
from __future__ import annotations

import math
import numbers
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from fastop._core.storage import DenseTensor
from fastop._tensor import Tensor
from fastop.static.framework import Variable
from fastop.ops import registry
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B

__all__ = ["Optimizer", "SGD", "Momentum", "Adam"]

_NAME_COUNTERS: dict[str, int] = {}


def _unique_name(prefix: str) -> str:
    n = _NAME_COUNTERS.get(prefix, 0)
    _NAME_COUNTERS[prefix] = n + 1
    return f"{prefix}_{n}"


class Optimizer:
    """Base class: holds the parameters, the learning rate, weight decay and the
    per-parameter state; subclasses define the update."""

    _update_op: str = ""
    _state_names: tuple[str, ...] = ()      # per-parameter state tensors (start at 0)

    def __init__(self, learning_rate: Any = 0.001, parameters: Iterable[Any] | None = None,
                 weight_decay: float | None = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        if grad_clip is not None:
            raise ValueError(f"{type(self).__name__}: grad_clip is not supported by fastop")
        self._lr = self._checked_lr(learning_rate)
        if weight_decay is None:
            weight_decay = 0.0
        if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
            raise TypeError(f"{type(self).__name__}: weight_decay must be a float (L2 "
                            f"coefficient) or None, got {type(weight_decay).__name__}")
        self._weight_decay = float(weight_decay)
        if parameters is None:
            if current_mode() == "eager":
                raise ValueError(f"{type(self).__name__}: parameters are required in "
                                 f"eager mode (e.g. parameters=model.parameters())")
            self._parameter_list = None
        else:
            self._parameter_list = self._checked_parameters(parameters)
        self._state: dict[int, dict[str, Any]] = {}
        self._lr_tensors: dict[Any, Any] = {}    # dtype -> the learning rate as a [1] tensor
        self._seen_grads: dict[int, Any] = {}
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
        return items

    # -- learning rate -------------------------------------------------------------------
    def _checked_lr(self, value: Any) -> Any:
        """A learning rate: a finite number >= 0 (as a float), or an LRScheduler — an
        object with ``step()`` and ``get_lr()`` that is called for the current rate
        (PaddlePaddle's ``fastop.optimizer.lr`` interface)."""
        if callable(value) and callable(getattr(value, "step", None)) \
                and callable(getattr(value, "get_lr", None)):
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a number or an "
                            f"LRScheduler, got {type(value).__name__}")
        return self._finite_rate(value, "learning_rate must be a finite number >= 0")

    def _finite_rate(self, value: Any, what: str) -> float:
        rate = float(value)
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"{type(self).__name__}: {what}, got {rate}")
        return rate

    @property
    def _learning_rate(self) -> float:
        """The rate of the next update: the number given, or the scheduler's current."""
        if isinstance(self._lr, float):
            return self._lr
        rate = float(self._lr())
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"{type(self).__name__}: the learning-rate scheduler "
                             f"{type(self._lr).__name__} gave {rate}; a rate is a finite "
                             f"number >= 0")
        return rate

    def get_lr(self) -> float:
        return self._learning_rate

    def set_lr(self, value: float) -> None:
        """Set the learning rate of the next eager ``step()`` (and of programs built by a
        later ``minimize``; a built program reads the persistable variable
        ``<optimizer name>.learning_rate`` of its scope, which can be set there). Not
        with an LRScheduler: its rate changes through the scheduler."""
        if not isinstance(self._lr, float):
            raise RuntimeError(f"{type(self).__name__}.set_lr: the learning rate comes from "
                               f"{type(self._lr).__name__} (an LRScheduler); change it "
                               f"through the scheduler")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a number, got "
                            f"{type(value).__name__}")
        self._lr = self._finite_rate(value, "learning_rate must be a finite number >= 0")

    # -- eager -----------------------------------------------------------------------------
    def step(self) -> None:
        """Update every parameter that has a gradient (eager mode), in place."""
        if current_mode() != "eager":
            raise RuntimeError(f"{type(self).__name__}.step() runs in eager mode; in "
                               f"static mode call minimize(loss) while building the program")
        rate = self._learning_rate
        for param in self._parameter_list:
            grad = param.grad
            if grad is None or param.stop_gradient:
                continue
            self._eager_update(param, grad, self._lr_tensor(param.dtype, rate),
                               self._eager_state(param))
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
        """Note the gradient objects now held, so minimize can tell whether a backward
        produced new ones since."""
        self._seen_grads = {id(p): p.grad for p in self._parameter_list}

    def _eager_state(self, param: Any) -> dict[str, Any]:
        state = self._state.get(id(param))
        if state is None:
            state = self._new_state(param)
            self._state[id(param)] = state
        return state

    def _new_state(self, param: Any) -> dict[str, Any]:
        from fastop import zeros
        return {name: zeros(param.shape, param.dtype) for name in self._state_names}

    def _lr_tensor(self, dtype: Any, rate: float) -> Any:
        """The learning rate as a one-element tensor of `dtype` (the update ops take it
        as an input, as PaddlePaddle's do); made again only when the rate changed."""
        cached = self._lr_tensors.get(dtype)
        if cached is None or cached[0] != rate:
            from fastop import full
            cached = self._lr_tensors[dtype] = (rate, full([1], rate, dtype))
        return cached[1]

    def _eager_update(self, param: DenseTensor, grad: DenseTensor, lr: DenseTensor,
                      state: dict) -> None:
        """Run the update op in place: its inputs and outputs are _static_io's, with
        eager tensors."""
        inputs, outputs = self._static_io(param, grad.contiguous(), lr,
                                          [state[n] for n in self._state_names])
        getattr(B, self._update_op.split("::")[1])(*inputs, out=outputs, **self._attrs())

    # -- both modes ------------------------------------------------------------------------
    def minimize(self, loss: Any, startup_program: Any = None, parameters: Any = None,
                 no_grad_set: Any = None) -> tuple[list, list]:
        """Eager: ``loss.backward()`` then ``step()`` — unless a backward already left new
        gradients since the last step/clear_grad, which are then applied as they are
        (PaddlePaddle's dygraph ``minimize``). Static: append backward ops and this
        optimizer's update ops to the program (:meth:`backward`, then
        :meth:`apply_gradients`). Returns ``(update_ops, [(param, grad), ...])``."""
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
        return not any(p.grad is not None and p.grad is not seen.get(id(p)) for p in params)

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
        """The second half of :meth:`minimize`: update each parameter with its gradient.
        Eager: in place, now (returns []). Static: appends the update ops to the
        parameters' program (startup values go to the default startup program) and
        returns them."""
        if current_mode() == "eager":
            rate = self._learning_rate
            for param, grad in params_grads:
                if not param.stop_gradient:
                    self._eager_update(param, grad, self._lr_tensor(param.dtype, rate),
                                       self._eager_state(param))
            self._remember_grads()
            return []
        if not params_grads:
            return []
        from fastop import static
        with static.program_guard(params_grads[0][0].block.program,
                                  static.default_startup_program()):
            lr = self._static_variable("learning_rate", [1], params_grads[0][0].dtype,
                                       self._learning_rate)
            return [self._append_update(param, grad, lr) for param, grad in params_grads]

    def _static_variable(self, name: str, shape: list[int], dtype: Any, value: float) -> Any:
        """A persistable variable filled with `value` by the startup program (not a
        parameter: nothing trains it)."""
        from fastop import static
        name = f"{self._name}.{name}"
        block = static.default_main_program().global_block()
        if block.has_var(name):
            return block.var(name)
        return static.create_global_var(shape, value, dtype, persistable=True, name=name)

    def _append_update(self, param: Any, grad: Any, lr: Any) -> Any:
        """Append this optimizer's update op, writing param and state in place."""
        state = [self._static_variable(f"{param.name}_{n}", list(param.shape), param.dtype, 0.0)
                 for n in self._state_names]
        inputs, outputs = self._static_io(param, grad, lr, state)
        registry.get(self._update_op)(*inputs, out=outputs, **self._attrs())
        return param.block.ops[-1]

    def _static_io(self, param: Any, grad: Any, lr: Any, state: list) -> tuple[list, list]:
        raise NotImplementedError

    def _attrs(self) -> dict[str, Any]:
        return {"weight_decay": self._weight_decay}

    # -- state dict ------------------------------------------------------------------------
    def _param_key(self, index: int, param: Any) -> str:
        return getattr(param, "name", None) or f"param_{index}"

    def state_dict(self) -> "OrderedDict[str, Any]":
        """Per-parameter state as ``{"<param name>_<state>": tensor}`` plus ``LR`` (and
        ``LR_Scheduler``, the scheduler's state dict, with an LRScheduler)."""
        out: OrderedDict[str, Any] = OrderedDict()
        for i, param in enumerate(self._parameter_list or ()):
            for key, value in self._state.get(id(param), {}).items():
                out[f"{self._param_key(i, param)}_{key}"] = value
        out["LR"] = self._learning_rate
        if not isinstance(self._lr, float) and callable(getattr(self._lr, "state_dict", None)):
            out["LR_Scheduler"] = self._lr.state_dict()
        return out

    def set_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Restore what :meth:`state_dict` returned (tensors or arrays).

        With `strict` (as PyTorch's ``load_state_dict``), a key that matches no
        parameter of this optimizer, or a parameter given part of its state, is an
        error listing them; ``strict=False`` loads what matches and ignores the rest.
        A state of the wrong shape is always an error naming the parameter."""
        cls = type(self).__name__
        expected: dict[str, tuple[Any, str]] = {}
        for i, param in enumerate(self._parameter_list or ()):
            prefix = self._param_key(i, param) + "_"
            for key in self._all_state_keys():
                expected[prefix + key] = (param, key)
        given = {k: v for k, v in state_dict.items() if k not in ("LR", "LR_Scheduler")}
        if strict:
            unmatched = [k for k in given if k not in expected]
            if unmatched:
                raise ValueError(f"{cls}.set_state_dict: {len(unmatched)} key(s) match no "
                                 f"parameter of this optimizer: {unmatched} (its parameters: "
                                 f"{self._param_names()}); pass strict=False to load only "
                                 f"the keys that match")
            for i, param in enumerate(self._parameter_list or ()):
                keys = [self._param_key(i, param) + "_" + k for k in self._all_state_keys()]
                lacking = [k for k in keys if k not in given]
                if lacking and len(lacking) < len(keys):
                    raise ValueError(f"{cls}.set_state_dict: parameter "
                                     f"'{self._param_key(i, param)}' lacks {lacking[0]!r} "
                                     f"(a parameter's state is loaded whole); pass "
                                     f"strict=False to load it anyway")
        if "LR_Scheduler" in state_dict and not isinstance(self._lr, float) \
                and callable(getattr(self._lr, "set_state_dict", None)):
            self._lr.set_state_dict(state_dict["LR_Scheduler"])
        elif "LR" in state_dict and isinstance(self._lr, float):
            self.set_lr(float(np.asarray(state_dict["LR"])))
        for key, value in given.items():
            if key in expected:
                param, name = expected[key]
                self._load_state_value(self._eager_state(param), name, np.asarray(value),
                                       param)

    def _param_names(self) -> list[str]:
        return [self._param_key(i, p) for i, p in enumerate(self._parameter_list or ())]

    def _all_state_keys(self) -> tuple[str, ...]:
        return self._state_names

    def _load_state_value(self, state: dict, key: str, value: np.ndarray, param: Any) -> None:
        target = np.asarray(state[key])
        if value.shape != target.shape:
            index = next(i for i, p in enumerate(self._parameter_list) if p is param)
            raise ValueError(f"{type(self).__name__}.set_state_dict: state '{key}' of "
                             f"parameter '{self._param_key(index, param)}' has shape "
                             f"{list(target.shape)}, got {list(value.shape)}")
        target[...] = value

    def __repr__(self) -> str:
        lr = self._lr if isinstance(self._lr, float) else type(self._lr).__name__
        return f"{type(self).__name__}(learning_rate={lr})"


class SGD(Optimizer):
    """``param -= lr * (grad + weight_decay * param)``."""

    _update_op = "fastop::sgd_update"

    def _static_io(self, param, grad, lr, state):
        return [param, grad, lr], [param]


class Momentum(Optimizer):
    """Momentum SGD: ``v = momentum * v + g; param -= lr * v`` (Nesterov:
    ``param -= lr * (g + momentum * v)``), ``g = grad + weight_decay * param``."""

    _update_op = "fastop::momentum_update"
    _state_names = ("velocity",)

    def __init__(self, learning_rate: float = 0.001, momentum: float = 0.9,
                 parameters: Iterable[Any] | None = None, use_nesterov: bool = False,
                 weight_decay: float | None = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._momentum, self._use_nesterov = float(momentum), bool(use_nesterov)

    def _static_io(self, param, grad, lr, state):
        (velocity,) = state
        return [param, grad, velocity, lr], [param, velocity]

    def _attrs(self):
        return {"momentum": self._momentum, "use_nesterov": self._use_nesterov,
                "weight_decay": self._weight_decay}


class Adam(Optimizer):
    """Adam with bias correction; ``weight_decay`` is L2 added to the gradient (as
    PaddlePaddle's Adam). Moments start at zero, the beta powers at beta1/beta2."""

    _update_op = "fastop::adam_update"
    _state_names = ("moment1", "moment2")

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameters: Iterable[Any] | None = None,
                 weight_decay: float | None = None, grad_clip: Any = None,
                 lazy_mode: bool = False, name: str | None = None) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        for label, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Adam: {label} must be in [0, 1), got {beta}")
        if lazy_mode:
            raise ValueError("Adam: lazy_mode (sparse updates) is not supported by fastop")
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    def _new_state(self, param):
        from fastop import full
        state = super()._new_state(param)
        state["beta1_pow"] = full([1], self._beta1, param.dtype)
        state["beta2_pow"] = full([1], self._beta2, param.dtype)
        return state

    def _eager_update(self, param, grad, lr, state):
        inputs = [param, grad.contiguous(), lr, state["moment1"],
                  state["moment2"], state["beta1_pow"], state["beta2_pow"]]
        B.adam_update(*inputs, out=[param, *inputs[3:]], **self._attrs())

    def _static_io(self, param, grad, lr, state):
        m1, m2 = state
        b1p = self._static_variable(f"{param.name}_beta1_pow", [1], param.dtype, self._beta1)
        b2p = self._static_variable(f"{param.name}_beta2_pow", [1], param.dtype, self._beta2)
        return [param, grad, lr, m1, m2, b1p, b2p], [param, m1, m2, b1p, b2p]

    def _attrs(self):
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                "weight_decay": self._weight_decay}

    def _all_state_keys(self):
        return (*self._state_names, "beta1_pow", "beta2_pow")

    def _load_state_value(self, state, key, value, param):
        if key in ("beta1_pow", "beta2_pow"):
            if value.size != 1:
                raise ValueError(f"Adam.set_state_dict: state '{key}' of parameter "
                                 f"'{param.name}' is a number, got shape {list(value.shape)}")
            value = np.reshape(value, [1])
        super()._load_state_value(state, key, value, param)
