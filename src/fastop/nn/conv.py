"""1-D convolution (PaddlePaddle's ``nn.Conv1D`` and ``nn.functional.conv1d``), composed
of existing ops: the input padded (zeros: a ``concat``; reflect/replicate/circular: one
``gather`` of the padded positions), its windows taken as one strided ``slice`` per
filter tap (each ends at a fixed distance from the input's end, so a static Program's
input may have an unknown length), then one batched ``matmul`` with the filters per
group. It is differentiable and runs in eager and static mode like the ops it is made of.

>>> import fastop
>>> conv = fastop.nn.Conv1D(2, 4, kernel_size=3, padding=1)
>>> conv(fastop.ones([8, 2, 10])).shape
[8, 4, 10]
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastop import initializer as _init
from fastop._tensor import to_tensor
from fastop.nn.layer import Layer
from fastop.ops.builtin._table import B

__all__ = ["conv1d", "Conv1D"]

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _positive_int(who: str, label: str, value: Any) -> int:
    """An int argument given as an int or a one-element list (PaddlePaddle takes both)."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{who}: {label} must be a positive int (or a list of one), got "
                         f"{value!r}")
    return int(value)


def _paddings(who: str, padding: Any, length: int | None, size: int, stride: int,
              dilation: int) -> tuple[int, int, int]:
    """(left, right, dilation) for `padding`: an int, [pad], [left, right], "same" or
    "valid" (PaddlePaddle's forms; "same" pads for ceil(length / stride) outputs and,
    as PaddlePaddle, uses dilation 1). `length` is None when unknown (static mode)."""
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return 0, 0, dilation
        if mode == "same":
            if length is None and stride != 1:
                raise ValueError(f"{who}: padding='same' with stride {stride} depends on "
                                 f"the input length, which is unknown here (a static "
                                 f"input of length -1); give the length or pad by number")
            total = size - 1 if length is None else \
                max((-(-length // stride) - 1) * stride + size - length, 0)
            return total // 2, total - total // 2, 1
        raise ValueError(f"{who}: padding must be an int, a list of 1 or 2 ints, 'same' or "
                         f"'valid'; got {padding!r}")
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    if len(pads) == 1:
        pads = pads * 2
    if len(pads) != 2 or any(isinstance(p, bool) or not isinstance(p, numbers.Integral)
                             or p < 0 for p in pads):
        raise ValueError(f"{who}: padding must be a non-negative int, a list of 1 or 2 of "
                         f"them, 'same' or 'valid'; got {padding!r}")
    return int(pads[0]), int(pads[1]), dilation


def _padded_positions(length: int, left: int, right: int, padding_mode: str) -> np.ndarray:
    """The input position each position of the padded input reads ([left + length +
    right], int64) for the "reflect" (edge not repeated), "replicate" and "circular"
    padding modes."""
    pos = np.arange(-left, length + right)
    if padding_mode == "replicate":
        pos = np.clip(pos, 0, length - 1)
    elif padding_mode == "circular":
        pos = np.mod(pos, length)
    else:                                   # reflect
        period = 2 * (length - 1) if length > 1 else 1
        pos = np.mod(pos, period)
        pos = np.where(pos >= length, period - pos, pos)
    return pos.astype("int64")


def _padded(x: Any, left: int, right: int, padding_mode: str, length: int | None) -> Any:
    """`x` ([N, C, L]) padded on its last axis: zeros (a concat; L may be unknown) or
    one gather of the padded positions for the other modes (L known)."""
    if not (left or right):
        return x
    if padding_mode != "zeros":
        return B.gather(x, to_tensor(_padded_positions(length, left, right, padding_mode)),
                        axis=2)
    zero = B.full_like(B.slice(x, axes=[2], starts=[0], ends=[1]), 0.0)   # [N, C, 1]
    return B.concat([zero] * left + [x] + [zero] * right, axis=2)


def conv1d_padded(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                  dilation: Any = 1, groups: int = 1, data_format: str = "NCL",
                  padding_mode: str = "zeros", who: str = "conv1d") -> Any:
    """:func:`conv1d` with Conv1D's `padding_mode` ("zeros", "reflect", "replicate",
    "circular")."""
    if data_format not in ("NCL", "NLC"):
        raise ValueError(f"{who}: data_format must be 'NCL' or 'NLC', got {data_format!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"{who}: padding_mode must be one of {list(PADDING_MODES)}, got "
                         f"{padding_mode!r}")
    if len(x.shape) != 3 or len(weight.shape) != 3:
        raise ValueError(f"{who}: x must be 3-D ([N, C, L] or [N, L, C]) and weight 3-D "
                         f"([out_channels, in_channels / groups, kernel_size]); got x "
                         f"{list(x.shape)}, weight {list(weight.shape)}")
    if data_format == "NLC":
        x = B.transpose(x, perm=[0, 2, 1])
    channels, length = x.shape[1], x.shape[2]
    length = None if length is None or length < 0 else length
    out_channels, group_channels, size = weight.shape
    groups = _positive_int(who, "groups", groups)
    stride = _positive_int(who, "stride", stride)
    dilation = _positive_int(who, "dilation", dilation)
    if channels is None or channels < 0:
        raise ValueError(f"{who}: the channel dim of x must be known, got {list(x.shape)}")
    if channels != group_channels * groups or out_channels % groups:
        raise ValueError(f"{who}: x has {channels} channels and weight "
                         f"{list(weight.shape)} with groups={groups}: expected "
                         f"in_channels = weight.shape[1] * groups and out_channels "
                         f"divisible by groups")
    left, right, dilation = _paddings(who, padding, length, size, stride, dilation)
    span = dilation * (size - 1) + 1                    # the dilated kernel's extent
    if length is not None and length + left + right < span:
        raise ValueError(f"{who}: the input length {length} (padded {left}+{right}) is "
                         f"shorter than the dilated kernel ({span})")
    if padding_mode != "zeros":
        if length is None:
            raise ValueError(f"{who}: padding_mode {padding_mode!r} needs the input length "
                             f"(unknown here: a static input of length -1)")
        if left >= length or right >= length:
            raise ValueError(f"{who}: padding_mode {padding_mode!r} needs padding < the "
                             f"input length {length}, got {left}, {right}")
    x = _padded(x, left, right, padding_mode, length)
    # tap k reads padded positions k*dilation + t*stride, t < out_length: a strided slice
    # ending (span - 1 - k*dilation) before the end
    taps = [B.unsqueeze(B.slice(x, axes=[2], starts=[k * dilation],
                                ends=[k * dilation - span + 1 or np.iinfo(np.int64).max],
                                strides=[stride]), axis=[3]) for k in range(size)]
    windows = B.concat(taps, axis=3) if size > 1 else taps[0]     # [N, C, out, size]
    # [N, groups, C / groups, out, size] -> [N, groups, out, C / groups * size]
    windows = B.reshape(windows, shape=[0, groups, group_channels, -1, size])
    windows = B.reshape(B.transpose(windows, perm=[0, 1, 3, 2, 4]),
                        shape=[0, groups, -1, group_channels * size])
    filters = B.transpose(B.reshape(weight, shape=[groups, out_channels // groups,
                                                   group_channels * size]), perm=[0, 2, 1])
    out = B.matmul(windows, filters)                           # [N, groups, out, O / groups]
    out = B.reshape(B.transpose(out, perm=[0, 1, 3, 2]), shape=[0, out_channels, -1])
    if bias is not None:
        out = B.add(out, B.reshape(bias, shape=[1, out_channels, 1]))
    return B.transpose(out, perm=[0, 2, 1]) if data_format == "NLC" else out


def conv1d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCL",
           name: str | None = None) -> Any:
    """1-D convolution (cross-correlation, as PaddlePaddle's): x ``[N, C, L]`` (or
    ``[N, L, C]`` with ``data_format="NLC"``), weight ``[out_channels, C / groups,
    kernel_size]``, optional bias ``[out_channels]``; `padding` an int, ``[left,
    right]``, ``"same"`` or ``"valid"``."""
    return conv1d_padded(x, weight, bias, stride, padding, dilation, groups, data_format)


class Conv1D(Layer):
    """PaddlePaddle's ``nn.Conv1D``: weight ``[out_channels, in_channels / groups,
    kernel_size]`` drawn from Normal(0, sqrt(2 / (kernel_size * in_channels))) (as
    PaddlePaddle), bias zeros (``bias_attr=False``: none); `padding_mode` "zeros",
    "reflect", "replicate" or "circular"."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 padding_mode: str = "zeros", weight_attr: Any = None, bias_attr: Any = None,
                 data_format: str = "NCL") -> None:
        super().__init__()
        who = "Conv1D"
        self._in_channels = _positive_int(who, "in_channels", in_channels)
        self._out_channels = _positive_int(who, "out_channels", out_channels)
        self._kernel_size = _positive_int(who, "kernel_size", kernel_size)
        self._groups = _positive_int(who, "groups", groups)
        if self._in_channels % self._groups or self._out_channels % self._groups:
            raise ValueError(f"{who}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"{who}: padding_mode must be one of {list(PADDING_MODES)}, "
                             f"got {padding_mode!r}")
        if padding_mode != "zeros" and (isinstance(padding, bool) or
                                        not isinstance(padding, numbers.Integral)):
            raise TypeError(f"{who}: with padding_mode {padding_mode!r} the padding must be "
                            f"an int (PaddlePaddle's rule), got {padding!r}")
        if data_format not in ("NCL", "NLC"):
            raise ValueError(f"{who}: data_format must be 'NCL' or 'NLC', got "
                             f"{data_format!r}")
        self._stride, self._padding, self._dilation = stride, padding, dilation
        self._padding_mode, self._data_format = padding_mode, data_format
        std = (2.0 / (self._kernel_size * self._in_channels)) ** 0.5
        self.weight = self.create_parameter(
            [self._out_channels, self._in_channels // self._groups, self._kernel_size],
            attr=weight_attr, default_initializer=_init.Normal(0.0, std))
        self.bias = self.create_parameter([self._out_channels], attr=bias_attr,
                                          is_bias=True)

    def forward(self, x: Any) -> Any:
        return conv1d_padded(x, self.weight, self.bias, self._stride, self._padding,
                             self._dilation, self._groups, self._data_format,
                             self._padding_mode, who="Conv1D")

    def extra_repr(self) -> str:
        return (f"{self._in_channels}, {self._out_channels}, "
                f"kernel_size=[{self._kernel_size}], stride={self._stride}, "
                f"padding={self._padding!r}, data_format={self._data_format}")
