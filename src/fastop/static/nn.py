"""Static layers: ``fastop.static.nn.fc``."""
from __future__ import annotations

import math
from typing import Any

from fastop._core.linalg import ACTIVATIONS
from fastop.ops import registry
from fastop.ops.builtin._table import B
from fastop.static.framework import (Variable, layer_name_guard, static_mode_guard,
                                     unique_name)
from fastop.static.parameters import create_parameter

__all__ = ["fc"]

def _param_spec(attr: Any, default_name: str) -> tuple[Any, str, bool] | None:
    """(initializer, name, trainable) from a weight_attr/bias_attr value: None (defaults),
    False (no parameter), a name, an initializer, or a ParamAttr-like object."""
    if attr is False:
        return None
    if attr is None or attr is True:
        return None, default_name, True
    if isinstance(attr, str):
        return None, attr, True
    if hasattr(attr, "initializer") or hasattr(attr, "trainable"):
        return (getattr(attr, "initializer", None), getattr(attr, "name", None) or default_name,
                getattr(attr, "trainable", True))
    if callable(attr):
        return attr, default_name, True
    raise TypeError(f"fc: expected a ParamAttr, an initializer, a name, None or False; "
                    f"got {type(attr).__name__}")


def fc(x: Variable, size: int, num_flatten_dims: int = 1, weight_attr: Any = None,
       bias_attr: Any = None, activation: str | None = None,
       name: str | None = None) -> Variable:
    """A fully connected layer: ``act(flatten(x) @ w + b)`` with the fused fc kernel.

    `x` is flattened to 2-D at `num_flatten_dims`; ``w`` (XavierUniform by default) and
    ``b`` (zeros; none with ``bias_attr=False``) are parameters initialized by the
    startup program. `activation` is None, "tanh", "relu", "sigmoid" (fused), "softmax"
    or any other ``fastop::<activation>`` op.
    """
    if not isinstance(x, Variable):
        raise TypeError(f"fc: x must be a Variable, got {type(x).__name__}")
    if not 0 < num_flatten_dims < max(x.ndim, 2):
        raise ValueError(f"fc: num_flatten_dims={num_flatten_dims} is invalid for "
                         f"'{x.name}' of shape {x.shape}")
    feature_dims = x.shape[num_flatten_dims:]
    if None in feature_dims:
        raise ValueError(f"fc: the feature dims {feature_dims} of '{x.name}' must be known")
    in_features = math.prod(feature_dims)
    prefix = name or unique_name("fc")
    w_spec = _param_spec(weight_attr, f"{prefix}.w_0")
    if w_spec is None:
        raise ValueError("fc: weight_attr=False is not allowed (the layer needs a weight)")
    b_spec = _param_spec(bias_attr, f"{prefix}.b_0")
    act = activation or ""
    lead = [-1 if d is None else d for d in x.shape[:num_flatten_dims]]
    with static_mode_guard(), layer_name_guard(prefix):
        if x.ndim != 2:
            x = B.reshape(x, shape=[-1, in_features])
        w = create_parameter([in_features, size], x.dtype, name=w_spec[1],
                             initializer=w_spec[0], trainable=w_spec[2])
        b = None if b_spec is None else create_parameter(
            [size], x.dtype, name=b_spec[1], initializer=b_spec[0], is_bias=True,
            trainable=b_spec[2])
        out = B.fc(x, w, b, activation=act if act in ACTIVATIONS else "")
        if act not in ACTIVATIONS:
            out = registry.get("fastop::" + act)(out)
        if len(lead) > 1:
            out = B.reshape(out, shape=[*lead, size])
    return out
