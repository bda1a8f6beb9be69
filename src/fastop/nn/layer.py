"""``fastop.nn.Layer``: the base class of layers, usable in eager and static mode.

A layer holds parameters, buffers and sublayers as attributes (``self.fc =
Linear(...)``, ``self.w = self.create_parameter(...)``) and computes through registered
ops in :meth:`forward`, so the same layer computes on Tensors in eager mode and
appends operators to the current Program in static mode. In eager mode a parameter
is a Tensor with ``stop_gradient=False``; in static mode it is the persistable
Variable made by ``fastop.static.create_parameter`` (initialized by the startup
program).

>>> import fastop
>>> from fastop import nn
>>> class MLP(nn.Layer):
...     def __init__(self):
...         super().__init__()
...         self.fc1 = nn.Linear(4, 8)
...         self.fc2 = nn.Linear(8, 2)
...     def forward(self, x):
...         return self.fc2(fastop.tanh(self.fc1(x)))
>>> [name for name, _ in MLP().named_parameters()]
['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
"""
from __future__ import annotations

import math
import re
import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fastop import initializer as _init
from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, to_tensor
from fastop.ops._dispatch import current_mode
from fastop.regularizer import WeightDecayRegularizer
from fastop.static.framework import Variable

__all__ = ["Layer", "ParamAttr", "is_parameter", "create_parameter"]

# Parameters are recognized by identity: id -> object, dropped when the object dies.
_PARAMETERS: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_NAME_COUNTERS: dict[str, int] = {}
# ParamAttr's learning_rate / regularizer per parameter: id -> (weak ref, options)
_PARAM_OPTIONS: dict[int, tuple[Any, dict[str, Any]]] = {}


def _unique_name(prefix: str) -> str:
    n = _NAME_COUNTERS.get(prefix, 0)
    _NAME_COUNTERS[prefix] = n + 1
    return f"{prefix}_{n}"


def is_parameter(value: Any) -> bool:
    """Whether `value` was made by :func:`create_parameter` (or registered as one), or
    is a static-mode parameter Variable."""
    return (value is not None and _PARAMETERS.get(id(value)) is value
            or getattr(value, "is_parameter", False) is True)


class ParamAttr:
    """How to create a parameter (PaddlePaddle's ``ParamAttr``): its name, initializer,
    `learning_rate` (a factor on the optimizer's rate for this parameter), `regularizer`
    (its weight decay, used instead of the optimizer's ``weight_decay``) and whether it
    is trained."""

    def __init__(self, name: str | None = None, initializer: _init.Initializer | None = None,
                 learning_rate: float = 1.0, regularizer: Any = None,
                 trainable: bool = True) -> None:
        if initializer is not None and not isinstance(initializer, _init.Initializer):
            raise TypeError(f"ParamAttr: initializer must be a fastop initializer, got "
                            f"{type(initializer).__name__}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) \
                or not (math.isfinite(learning_rate) and learning_rate >= 0):
            raise ValueError(f"ParamAttr: learning_rate (a factor on the optimizer's rate) "
                             f"must be a finite number >= 0, got {learning_rate!r:.40}")
        if regularizer is not None and not isinstance(regularizer, WeightDecayRegularizer):
            raise TypeError(f"ParamAttr: regularizer must be a fastop.regularizer.L2Decay "
                            f"or L1Decay, got {type(regularizer).__name__}")
        self.name, self.initializer, self.trainable = name, initializer, bool(trainable)
        self.learning_rate, self.regularizer = float(learning_rate), regularizer

    @staticmethod
    def resolve(attr: Any) -> "ParamAttr | None":
        """None → defaults; False → no parameter; an Initializer or a name → that."""
        if attr is False:
            return None
        if attr is None or attr is True:
            return ParamAttr()
        if isinstance(attr, ParamAttr):
            return attr
        if isinstance(attr, _init.Initializer):
            return ParamAttr(initializer=attr)
        if isinstance(attr, str):
            return ParamAttr(name=attr)
        raise TypeError(f"expected a ParamAttr, an initializer, a name, None or False; "
                        f"got {type(attr).__name__}")

    def __repr__(self) -> str:
        return (f"ParamAttr(name={self.name!r}, initializer={self.initializer!r}, "
                f"learning_rate={self.learning_rate}, regularizer={self.regularizer!r}, "
                f"trainable={self.trainable})")


def create_parameter(shape: Sequence[int], dtype: Any = "float32", name: str | None = None,
                     initializer: _init.Initializer | None = None,
                     trainable: bool = True) -> Any:
    """A new parameter in the current mode, initialized by `initializer` (default
    XavierUniform): an eager Tensor (``stop_gradient = not trainable``), or in static
    mode a persistable Variable whose init runs in the startup program."""
    shape = [int(d) for d in shape]
    initializer = initializer if initializer is not None else _init.XavierUniform()
    dtype = as_dtype(dtype)
    if current_mode() == "eager":
        param = to_tensor(initializer(shape, dtype), stop_gradient=not trainable)
        param.name = name
    else:
        from fastop import static
        param = static.create_parameter(shape, dtype, name=name, initializer=initializer,
                                        trainable=trainable)
    _PARAMETERS[id(param)] = param
    return param


def set_parameter_options(param: Any, learning_rate: float = 1.0,
                          regularizer: Any = None) -> None:
    """Record `param`'s ParamAttr options for the optimizers (kept while it lives)."""
    if learning_rate == 1.0 and regularizer is None:
        _PARAM_OPTIONS.pop(id(param), None)
        return
    _PARAM_OPTIONS[id(param)] = (weakref.ref(param),
                                 {"learning_rate": learning_rate, "regularizer": regularizer})
    weakref.finalize(param, _PARAM_OPTIONS.pop, id(param), None)


def parameter_options(param: Any) -> dict[str, Any]:
    """`param`'s ParamAttr options (``learning_rate``, ``regularizer``), {} if none."""
    entry = _PARAM_OPTIONS.get(id(param))
    return entry[1] if entry is not None and entry[0]() is param else {}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


class Layer:
    """Base class of layers: override :meth:`forward`; call the layer to run it."""

    training: bool

    def __init__(self, name_scope: str | None = None, dtype: Any = "float32") -> None:
        set_ = object.__setattr__
        set_(self, "_parameters", OrderedDict())
        set_(self, "_sub_layers", OrderedDict())
        set_(self, "_buffers", OrderedDict())
        set_(self, "_non_persistable", set())
        set_(self, "_param_counts", {"w": 0, "b": 0})
        set_(self, "_full_name", _unique_name(name_scope or _snake(type(self).__name__)))
        set_(self, "_dtype", as_dtype(dtype))
        set_(self, "training", True)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.forward(*inputs, **kwargs)

    # -- naming --------------------------------------------------------------------
    def full_name(self) -> str:
        """This layer's unique name (``linear_0``); parameter names derive from it."""
        return self._full_name

    # -- parameters, buffers, sublayers ----------------------------------------------
    def create_parameter(self, shape: Sequence[int], attr: Any = None, dtype: Any = None,
                         is_bias: bool = False,
                         default_initializer: _init.Initializer | None = None) -> Any:
        """A parameter for this layer (assign it to an attribute to register it).

        ``attr`` is a :class:`ParamAttr`, an initializer, a name, None (defaults) or
        False (no parameter: returns None). The initializer is ``attr``'s, else
        `default_initializer`, else Constant(0) for a bias and XavierUniform otherwise.
        """
        attr = ParamAttr.resolve(attr)
        if attr is None:
            return None
        init = attr.initializer or default_initializer or (
            _init.Constant(0.0) if is_bias else _init.XavierUniform())
        kind = "b" if is_bias else "w"
        name = attr.name or f"{self._full_name}.{kind}_{self._param_counts[kind]}"
        self._param_counts[kind] += 1
        param = create_parameter(shape, dtype or self._dtype, name=name,
                                 initializer=init, trainable=attr.trainable)
        set_parameter_options(param, attr.learning_rate, attr.regularizer)
        return param

    def add_parameter(self, name: str, parameter: Any) -> Any:
        """Register `parameter` (a parameter or Tensor, or None) under `name`."""
        self._check_name(name, self._parameters, "parameter")
        if parameter is not None and not isinstance(parameter, (Tensor, Variable)):
            raise TypeError(f"{type(self).__name__}.add_parameter: the parameter to add "
                            f"must be a parameter (Tensor), got {type(parameter).__name__}")
        if parameter is not None and not is_parameter(parameter):
            _PARAMETERS[id(parameter)] = parameter
        self._parameters[name] = parameter
        object.__setattr__(self, name, parameter)
        return parameter

    def add_sublayer(self, name: str, sublayer: "Layer") -> "Layer":
        if not isinstance(sublayer, Layer):
            raise TypeError(f"add_sublayer: '{name}' must be a Layer, got "
                            f"{type(sublayer).__name__}")
        self._check_name(name, self._sub_layers, "sublayer")
        self._sub_layers[name] = sublayer
        object.__setattr__(self, name, sublayer)
        return sublayer

    def register_buffer(self, name: str, tensor: Any, persistable: bool = True) -> None:
        """Register a non-trained tensor (saved in state_dict when persistable)."""
        self._check_name(name, self._buffers, "buffer")
        if tensor is not None and (not isinstance(tensor, (Tensor, Variable))
                                   or is_parameter(tensor)):
            raise TypeError(f"{type(self).__name__}.register_buffer: the registered buffer "
                            f"should be a Paddle.Tensor (not a parameter), got "
                            f"{type(tensor).__name__}")
        self._buffers[name] = tensor
        if persistable:
            self._non_persistable.discard(name)
        else:
            self._non_persistable.add(name)
        object.__setattr__(self, name, tensor)

    def _check_name(self, name: str, own: dict, kind: str = "sublayer") -> None:
        """PaddlePaddle's checks of a member's name (its error types and wording): a
        string (TypeError), without '.', not empty, and for a parameter or buffer not
        another attribute already (KeyError)."""
        who = type(self).__name__
        if not isinstance(name, str):
            raise TypeError(f"{who}: the name of {kind} should be a string, but received "
                            f"{type(name).__name__}")
        if "." in name:
            raise KeyError(f"{who}: the name of {kind} can not contain '.' (got {name!r}): "
                           f"self.{name} could not reach it")
        if not name:
            raise KeyError(f"{who}: the name of {kind} can not be empty")
        if kind != "sublayer" and name in self.__dict__ and not any(
                name in registry for registry in (self._parameters, self._sub_layers,
                                                  self._buffers)):
            raise KeyError(f"{who}: attribute '{name}' already exists (not a parameter, "
                           f"buffer or sublayer)")
        for registry in (self._parameters, self._sub_layers, self._buffers):
            if registry is not own:
                registry.pop(name, None)

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if params is None:
            if isinstance(value, Layer) or is_parameter(value):
                raise RuntimeError(f"{type(self).__name__}: call super().__init__() "
                                   f"before assigning parameters or sublayers")
            object.__setattr__(self, name, value)
            return
        if is_parameter(value):
            self.add_parameter(name, value)
        elif isinstance(value, Layer):
            self.add_sublayer(name, value)
        elif name in params:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign a "
                                f"{type(value).__name__} to parameter '{name}' (expected "
                                f"a parameter or None)")
            params[name] = None
            object.__setattr__(self, name, None)
        elif name in self._sub_layers:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign a "
                                f"{type(value).__name__} to sublayer '{name}' (expected "
                                f"a Layer or None)")
            self._sub_layers[name] = None
            object.__setattr__(self, name, None)
        elif isinstance(value, Tensor):
            # PaddlePaddle's rule: a Tensor attribute is a buffer, non-persistable (out
            # of state_dict) unless register_buffer made it persistable before
            if name not in self._buffers:
                self._check_name(name, self._buffers, "buffer")
                self._non_persistable.add(name)
            self._buffers[name] = value
            object.__setattr__(self, name, value)
        elif name in self._buffers:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: assignment to buffer '{name}' "
                                f"should be a Tensor or None, got {type(value).__name__}")
            self._buffers[name] = None
            object.__setattr__(self, name, None)
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._sub_layers, self._buffers):
            registry.pop(name, None)
        object.__delattr__(self, name)

    # -- iteration ---------------------------------------------------------------------
    def named_sublayers(self, prefix: str = "", include_self: bool = False,
                        layers_set: set | None = None) -> Iterator[tuple[str, "Layer"]]:
        """(dotted name, layer) for every sublayer, depth first, each layer once."""
        seen = set() if layers_set is None else layers_set
        if include_self and id(self) not in seen:
            seen.add(id(self))
            yield prefix, self
        for key, layer in self._sub_layers.items():
            if layer is None or id(layer) in seen:
                continue
            name = f"{prefix}.{key}" if prefix else key
            seen.add(id(layer))
            yield name, layer
            yield from layer.named_sublayers(name, False, seen)

    def sublayers(self, include_self: bool = False) -> list["Layer"]:
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_children(self) -> Iterator[tuple[str, "Layer"]]:
        seen: set[int] = set()
        for name, layer in self._sub_layers.items():
            if layer is not None and id(layer) not in seen:
                seen.add(id(layer))
                yield name, layer

    def children(self) -> Iterator["Layer"]:
        return (layer for _, layer in self.named_children())

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True
                         ) -> Iterator[tuple[str, Any]]:
        """(dotted name, parameter) pairs, each parameter once (own ones first)."""
        seen: set[int] = set()
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers \
            else iter([(prefix, self)])
        for layer_prefix, layer in layers:
            for key, param in layer._parameters.items():
                if param is None or id(param) in seen:
                    continue
                seen.add(id(param))
                yield (f"{layer_prefix}.{key}" if layer_prefix else key), param

    def parameters(self, include_sublayers: bool = True) -> list[Any]:
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def clear_gradients(self, set_to_zero: bool = True) -> None:
        """Reset the gradients of this layer's trained parameters (sublayers' too): to
        zeros (PaddlePaddle's default) or, with ``set_to_zero=False``, to None. Eager
        mode (static parameters hold no gradients)."""
        if current_mode() != "eager":
            raise RuntimeError(f"{type(self).__name__}.clear_gradients() runs in eager "
                               f"mode")
        for param in self.parameters():
            if not param.stop_gradient:
                param.clear_grad(set_to_zero)

    def named_buffers(self, prefix: str = "", include_sublayers: bool = True
                      ) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers \
            else iter([(prefix, self)])
        for layer_prefix, layer in layers:
            for key, buf in layer._buffers.items():
                if buf is None or id(buf) in seen:
                    continue
                seen.add(id(buf))
                yield (f"{layer_prefix}.{key}" if layer_prefix else key), buf

    def buffers(self, include_sublayers: bool = True) -> list[Any]:
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    def apply(self, fn: Callable[["Layer"], Any]) -> "Layer":
        """Call `fn` on every sublayer (children first), then on this layer."""
        for layer in self.children():
            layer.apply(fn)
        fn(self)
        return self

    # -- modes ---------------------------------------------------------------------------
    def train(self) -> "Layer":
        """Training mode for this layer and its sublayers."""
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", True)
        return self

    def eval(self) -> "Layer":
        """Evaluation mode for this layer and its sublayers."""
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", False)
        return self

    # -- state ----------------------------------------------------------------------------
    def state_dict(self, destination: dict | None = None, include_sublayers: bool = True,
                   structured_name_prefix: str = "") -> "OrderedDict[str, Any]":
        """Parameters and persistable buffers by dotted name (the objects themselves)."""
        out = OrderedDict() if destination is None else destination
        for key, param in self._parameters.items():
            if param is not None:
                out[structured_name_prefix + key] = param
        for key, buf in self._buffers.items():
            if buf is not None and key not in self._non_persistable:
                out[structured_name_prefix + key] = buf
        if include_sublayers:
            for key, layer in self._sub_layers.items():
                if layer is not None:
                    layer.state_dict(out, True, f"{structured_name_prefix}{key}.")
        return out

    def set_state_dict(self, state_dict: dict, use_structured_name: bool = True
                       ) -> tuple[list[str], list[str]]:
        """Copy values (tensors or arrays) into this layer's parameters and buffers.

        Keys are dotted names (or parameter names with ``use_structured_name=False``).
        Values are cast to each target's dtype; a shape mismatch raises. Returns
        ``(missing_keys, unexpected_keys)``.
        """
        if current_mode() != "eager":
            raise RuntimeError("set_state_dict works in eager mode; in static mode the "
                               "values live in the executor's scope")
        own = self.state_dict()
        if not use_structured_name:
            own = OrderedDict((getattr(t, "name", None) or key, t) for key, t in own.items())
        targets = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = np.asarray(state_dict[key])
            if list(value.shape) != list(target.shape):
                raise ValueError(f"set_state_dict: '{key}' has shape {list(target.shape)} "
                                 f"in {type(self).__name__}, the state dict gives "
                                 f"{list(value.shape)}")
            targets.append((target, value.astype(target.dtype.numpy_dtype, copy=False)))
        for target, value in targets:  # all checked before anything is written
            target.set_value(value)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        return missing, unexpected

    load_dict = set_state_dict
    set_dict = set_state_dict

    def to(self, device: Any = None, dtype: Any = None, blocking: Any = None) -> "Layer":
        """Cast floating parameters and buffers to `dtype` (eager mode; CPU only).

        The cast ones are new tensors: create optimizers after calling this.
        """
        if device is not None and str(device).lower() not in ("cpu", "place(cpu)"):
            raise ValueError(f"Layer.to: fastop runs on the CPU only, got device {device!r}")
        if dtype is None:
            return self
        if current_mode() != "eager":
            raise RuntimeError("Layer.to(dtype=...) works in eager mode")
        dtype = as_dtype(dtype)
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "_dtype", dtype)
            for key, param in list(layer._parameters.items()):
                if param is not None and param.dtype.is_floating and param.dtype != dtype:
                    new = to_tensor(np.asarray(param).astype(dtype.numpy_dtype),
                                    stop_gradient=param.stop_gradient)
                    new.name = param.name
                    layer.add_parameter(key, new)
            for key, buf in list(layer._buffers.items()):
                if buf is not None and buf.dtype.is_floating and buf.dtype != dtype:
                    layer.register_buffer(key, to_tensor(np.asarray(buf).astype(
                        dtype.numpy_dtype)), key not in layer._non_persistable)
        return self

    # -- printing ------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(layer).replace("\n", "\n  ")
                 for name, layer in self._sub_layers.items() if layer is not None]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
