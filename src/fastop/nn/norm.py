"""Normalization layers: ``LayerNorm`` and ``BatchNorm1D`` (PaddlePaddle's names,
signatures, defaults and state-dict keys).

>>> import fastop
>>> from fastop import nn
>>> bn = nn.BatchNorm1D(3)
>>> sorted(bn.state_dict())
['_mean', '_variance', 'bias', 'weight']
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from fastop import initializer as _init
from fastop.nn import functional as F
from fastop.nn.layer import Layer
from fastop.ops._dispatch import current_mode
from fastop.tensor.creation import full

__all__ = ["LayerNorm", "BatchNorm1D"]


class LayerNorm(Layer):
    """Normalize over the last dims (`normalized_shape`), then scale and shift:
    ``(x - mean) / sqrt(var + epsilon) * weight + bias``.

    ``weight`` (ones) and ``bias`` (zeros) have ``prod(normalized_shape)`` elements,
    as in PaddlePaddle; ``weight_attr=False`` / ``bias_attr=False`` leave them out.
    """

    def __init__(self, normalized_shape: int | Sequence[int], epsilon: float = 1e-05,
                 weight_attr: Any = None, bias_attr: Any = None,
                 name: str | None = None) -> None:
        super().__init__(name_scope=name)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = [normalized_shape]
        self._normalized_shape = [int(d) for d in normalized_shape]
        if not self._normalized_shape or any(d <= 0 for d in self._normalized_shape):
            raise ValueError(f"LayerNorm: normalized_shape must be positive dims, got "
                             f"{list(normalized_shape)}")
        self._epsilon = float(epsilon)
        size = [math.prod(self._normalized_shape)]
        self.weight = self.create_parameter(size, attr=weight_attr,
                                            default_initializer=_init.Constant(1.0))
        self.bias = self.create_parameter(size, attr=bias_attr, is_bias=True)

    def forward(self, x: Any) -> Any:
        return F.layer_norm(x, self._normalized_shape, self.weight, self.bias,
                            self._epsilon)

    def extra_repr(self) -> str:
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"


def _running_stat(layer: Layer, suffix: str, value: float, size: int) -> Any:
    """A running statistic of `size` values filled with `value`: an eager tensor, or in
    static mode a persistable variable initialized by the startup program."""
    if current_mode() == "static":
        from fastop import static
        return static.create_global_var([size], value, layer._dtype, persistable=True,
                                        name=f"{layer.full_name()}.{suffix}")
    return full([size], value, layer._dtype)


class BatchNorm1D(Layer):
    """Batch normalization of 2-D ``[N, C]`` or 3-D ``[N, C, L]`` (``"NCL"``) /
    ``[N, L, C]`` (``"NLC"``) inputs.

    Training normalizes with the batch's statistics and updates the running ones as
    ``running = running * momentum + batch * (1 - momentum)`` (PaddlePaddle's momentum
    convention, biased batch variance); evaluation (``eval()``, or
    ``use_global_stats=True``) normalizes with the running statistics. The running mean
    and variance are buffers, saved in ``state_dict`` as ``_mean`` and ``_variance``.
    ``weight_attr=False`` / ``bias_attr=False`` keep the scale at 1 / shift at 0,
    untrained.
    """

    def __init__(self, num_features: int, momentum: float = 0.9, epsilon: float = 1e-05,
                 weight_attr: Any = None, bias_attr: Any = None, data_format: str = "NCL",
                 use_global_stats: bool | None = None, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        if data_format not in ("NC", "NCL", "NLC"):
            raise ValueError(f"BatchNorm1D: data_format must be 'NC', 'NCL' or 'NLC', got "
                             f"{data_format!r}")
        self._num_features = int(num_features)
        self._momentum, self._epsilon = float(momentum), float(epsilon)
        self._data_format, self._use_global_stats = data_format, use_global_stats
        size = [self._num_features]
        # weight_attr/bias_attr False: a fixed scale of 1 / shift of 0 (Paddle's way)
        self.weight = self.create_parameter(
            size, attr=None if weight_attr is False else weight_attr,
            default_initializer=_init.Constant(1.0))
        self.bias = self.create_parameter(
            size, attr=None if bias_attr is False else bias_attr, is_bias=True)
        for param, attr in ((self.weight, weight_attr), (self.bias, bias_attr)):
            if attr is False:
                param.stop_gradient = True
        self.register_buffer("_mean", _running_stat(self, "_mean", 0.0, self._num_features))
        self.register_buffer("_variance", _running_stat(self, "_variance", 1.0,
                                                        self._num_features))

    def forward(self, x: Any) -> Any:
        if len(x.shape) not in (2, 3):
            raise ValueError(f"BatchNorm1D: expected a 2-D or 3-D input, got shape "
                             f"{list(x.shape)}")
        data_format = "NLC" if self._data_format == "NLC" and len(x.shape) == 3 else "NCL"
        if self.training and not self._use_global_stats:
            channel = len(x.shape) - 1 if data_format == "NLC" else 1
            F.check_batch_statistics(f"BatchNorm1D {self.full_name()!r}", x,
                                     [d for d in range(len(x.shape)) if d != channel])
        return F.batch_norm(x, self._mean, self._variance, self.weight, self.bias,
                            training=self.training, momentum=self._momentum,
                            epsilon=self._epsilon, data_format=data_format,
                            use_global_stats=self._use_global_stats)

    def extra_repr(self) -> str:
        return (f"num_features={self._num_features}, momentum={self._momentum}, "
                f"epsilon={self._epsilon}")
