"""Paddle's ``paddle.nn.Conv2D``, ``MaxPool2D`` and ``AvgPool2D`` as fastop layers."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop import initializer as _init
from fastop.nn import Layer

from fastop_vision import functional as F
from fastop_vision._window import pair

__all__ = ["Conv2D", "MaxPool2D", "AvgPool2D"]


class Conv2D(Layer):
    """2-D convolution layer with weight ``[out_channels, in_channels / groups, kh, kw]``
    (initialized as Paddle does: Normal(0, sqrt(2 / (kh * kw * in_channels)))) and a
    zero-initialized bias ``[out_channels]`` (``bias_attr=False``: none)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: F.IntOrPair,
                 stride: F.IntOrPair = 1, padding: F.Padding = 0, dilation: F.IntOrPair = 1,
                 groups: int = 1, padding_mode: str = "zeros", weight_attr: Any = None,
                 bias_attr: Any = None, data_format: str = "NCHW") -> None:
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f"Conv2D: padding_mode {padding_mode!r} is not supported; "
                             f"fastop-vision pads with zeros only (padding_mode='zeros')")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2D: groups={groups} must divide in_channels="
                             f"{in_channels} and out_channels={out_channels}")
        F._channels_last("Conv2D", data_format)
        self._in_channels, self._out_channels = int(in_channels), int(out_channels)
        self._kernel_size = list(pair("Conv2D", "kernel_size", kernel_size, 1))
        self._stride, self._padding, self._dilation = stride, padding, dilation
        self._groups, self._data_format = int(groups), data_format
        fan_in = int(np.prod(self._kernel_size)) * self._in_channels
        self.weight = self.create_parameter(
            [self._out_channels, self._in_channels // self._groups, *self._kernel_size],
            attr=weight_attr, default_initializer=_init.Normal(0.0, (2.0 / fan_in) ** 0.5))
        self.bias = self.create_parameter([self._out_channels], attr=bias_attr, is_bias=True)

    def forward(self, x: Any) -> Any:
        return F.conv2d(x, self.weight, self.bias, stride=self._stride,
                        padding=self._padding, dilation=self._dilation, groups=self._groups,
                        data_format=self._data_format)

    def extra_repr(self) -> str:
        text = f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}"
        for name, value, default in (("stride", self._stride, 1),
                                     ("padding", self._padding, 0),
                                     ("dilation", self._dilation, 1),
                                     ("groups", self._groups, 1)):
            if value != default:
                text += f", {name}={value}"
        return text + f", data_format={self._data_format}"


class MaxPool2D(Layer):
    """Max pooling (``return_mask=True``: also the indices of the maxima)."""

    def __init__(self, kernel_size: F.IntOrPair, stride: F.IntOrPair | None = None,
                 padding: F.Padding = 0, return_mask: bool = False, ceil_mode: bool = False,
                 data_format: str = "NCHW", name: str | None = None) -> None:
        super().__init__(name_scope=name)
        F._channels_last("MaxPool2D", data_format)
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.return_mask, self.ceil_mode, self.data_format = return_mask, ceil_mode, data_format

    def forward(self, x: Any) -> Any:
        return F.max_pool2d(x, self.ksize, self.stride, self.padding, self.return_mask,
                            self.ceil_mode, self.data_format)

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AvgPool2D(Layer):
    """Average pooling (``exclusive=True``, Paddle's default: padding is not counted)."""

    def __init__(self, kernel_size: F.IntOrPair, stride: F.IntOrPair | None = None,
                 padding: F.Padding = 0, ceil_mode: bool = False, exclusive: bool = True,
                 divisor_override: int | None = None, data_format: str = "NCHW",
                 name: str | None = None) -> None:
        super().__init__(name_scope=name)
        F._channels_last("AvgPool2D", data_format)
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.exclusive = ceil_mode, exclusive
        self.divisor, self.data_format = divisor_override, data_format

    def forward(self, x: Any) -> Any:
        return F.avg_pool2d(x, self.ksize, self.stride, self.padding, self.ceil_mode,
                            self.exclusive, self.divisor, self.data_format)

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"
