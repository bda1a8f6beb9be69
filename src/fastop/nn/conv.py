"""1-D and 2-D convolution (PaddlePaddle's ``nn.Conv1D``/``nn.Conv2D`` and
``nn.functional.conv1d``/``conv2d``), one mechanism for any number of spatial dims,
composed of existing ops: the input padded per spatial axis (zeros: a ``concat``;
reflect/replicate/circular: one ``gather`` of the padded positions), its windows taken
as one strided ``slice`` per filter tap (each ends at a fixed distance from the input's
end, so a static Program's input may have unknown spatial sizes), then one batched
``matmul`` with the filters per group. It is differentiable and runs in eager and static
mode like the ops it is made of.

>>> import fastop
>>> conv = fastop.nn.Conv1D(2, 4, kernel_size=3, padding=1)
>>> conv(fastop.ones([8, 2, 10])).shape
[8, 4, 10]
>>> fastop.nn.Conv2D(2, 4, kernel_size=3, padding=1)(fastop.ones([8, 2, 10, 6])).shape
[8, 4, 10, 6]
"""
from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastop import initializer as _init
from fastop._tensor import to_tensor
from fastop.nn.layer import Layer
from fastop.ops.builtin._table import B

__all__ = ["conv1d", "Conv1D", "conv2d", "Conv2D"]

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
# data formats per number of spatial dims: (channel first, channel last)
DATA_FORMATS = {1: ("NCL", "NLC"), 2: ("NCHW", "NHWC")}


def _is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_ints(who: str, label: str, value: Any, ndim: int) -> tuple[int, ...]:
    """An int argument per spatial dim, given as an int or a list of `ndim` ints
    (PaddlePaddle takes both)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * ndim
    if len(values) != ndim or any(not _is_int(v) or v < 1 for v in values):
        raise ValueError(f"{who}: {label} must be a positive int (or a list of {ndim}), "
                         f"got {value!r}")
    return tuple(int(v) for v in values)


def _same_paddings(who: str, lengths: Sequence[int | None], sizes: Sequence[int],
                   strides: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) per spatial dim for padding="same": ceil(length / stride) outputs
    with dilation 1 (as PaddlePaddle); a dim of unknown length needs stride 1."""
    pads = []
    for length, size, stride in zip(lengths, sizes, strides):
        if length is None and stride != 1:
            raise ValueError(f"{who}: padding='same' with stride {stride} depends on "
                             f"the input length, which is unknown here (a static "
                             f"input of length -1); give the length or pad by number")
        total = size - 1 if length is None else \
            max((-(-length // stride) - 1) * stride + size - length, 0)
        pads.append((total // 2, total - total // 2))
    return pads


def _paddings(who: str, padding: Any, lengths: Sequence[int | None], sizes: Sequence[int],
              strides: Sequence[int], dilations: tuple[int, ...],
              channel_last: bool) -> tuple[list[tuple[int, int]], tuple[int, ...]]:
    """((before, after) per spatial dim, dilations) for `padding`: an int, a list of one
    int per dim, a list of (before, after) for each dim in turn ([left, right] in 1-D,
    [top, bottom, left, right] in 2-D), the nested form of one pair per input dim (the
    batch and channel pairs 0), "same" or "valid" (PaddlePaddle's forms; "same" pads for
    ceil(length / stride) outputs and, as PaddlePaddle, uses dilation 1). A length is
    None when unknown (static mode)."""
    ndim = len(sizes)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return [(0, 0)] * ndim, dilations
        if mode == "same":
            return _same_paddings(who, lengths, sizes, strides), (1,) * ndim
        raise ValueError(f"{who}: padding must be an int, a list of {ndim} or {2 * ndim} "
                         f"ints, 'same' or 'valid'; got {padding!r}")
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding] * ndim
    if pads and all(isinstance(p, (list, tuple)) for p in pads):
        spatial = pads[1:-1] if channel_last else pads[2:]
        batch_channel = [pads[0], pads[-1]] if channel_last else pads[:2]
        if len(pads) != ndim + 2 or any(len(p) != 2 for p in pads) or \
                any(list(p) != [0, 0] for p in batch_channel):
            raise ValueError(f"{who}: the nested padding form needs {ndim + 2} pairs with "
                             f"the batch and channel pairs [0, 0]; got {padding!r}")
        pads = [p for pair in spatial for p in pair]
    if len(pads) == ndim:
        pads = [p for p in pads for _ in range(2)]
    if len(pads) != 2 * ndim or any(not _is_int(p) or p < 0 for p in pads):
        raise ValueError(f"{who}: padding must be a non-negative int, a list of {ndim} or "
                         f"{2 * ndim} of them, 'same' or 'valid'; got {padding!r}")
    return [(int(pads[2 * d]), int(pads[2 * d + 1])) for d in range(ndim)], dilations


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


def _padded(x: Any, axis: int, left: int, right: int, padding_mode: str,
            length: int | None) -> Any:
    """`x` padded on `axis`: zeros (a concat; the length may be unknown) or one gather of
    the padded positions for the other modes (length known)."""
    if not (left or right):
        return x
    if padding_mode != "zeros":
        return B.gather(x, to_tensor(_padded_positions(length, left, right, padding_mode)),
                        axis=axis)
    zero = B.full_like(B.slice(x, axes=[axis], starts=[0], ends=[1]), 0.0)   # size 1
    return B.concat([zero] * left + [x] + [zero] * right, axis=axis)


def conv_nd(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
            groups: Any, data_format: str, padding_mode: str, who: str, ndim: int) -> Any:
    """Convolution (cross-correlation) over the last `ndim` dims of x ``[N, C, *spatial]``
    (or ``[N, *spatial, C]``) with weight ``[out_channels, C / groups, *kernel]``, its
    `padding_mode` "zeros", "reflect", "replicate" or "circular"."""
    first, last = DATA_FORMATS[ndim]
    if data_format not in (first, last):
        raise ValueError(f"{who}: data_format must be {first!r} or {last!r}, got "
                         f"{data_format!r}")
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"{who}: padding_mode must be one of {list(PADDING_MODES)}, got "
                         f"{padding_mode!r}")
    if len(x.shape) != ndim + 2 or len(weight.shape) != ndim + 2:
        raise ValueError(f"{who}: x must be {ndim + 2}-D ([N, C, *spatial] or [N, "
                         f"*spatial, C]) and weight {ndim + 2}-D ([out_channels, "
                         f"in_channels / groups, *kernel_size]); got x {list(x.shape)}, "
                         f"weight {list(weight.shape)}")
    channel_last = data_format == last
    axes = list(range(2, ndim + 2))                     # the spatial axes, channel first
    if channel_last:
        x = B.transpose(x, perm=[0, ndim + 1] + list(range(1, ndim + 1)))
    channels = x.shape[1]
    lengths = [None if n is None or n < 0 else n for n in x.shape[2:]]
    out_channels, group_channels, *sizes = weight.shape
    groups = _positive_ints(who, "groups", groups, 1)[0]
    strides = _positive_ints(who, "stride", stride, ndim)
    dilations = _positive_ints(who, "dilation", dilation, ndim)
    if channels is None or channels < 0:
        raise ValueError(f"{who}: the channel dim of x must be known, got {list(x.shape)}")
    if channels != group_channels * groups or out_channels % groups:
        raise ValueError(f"{who}: x has {channels} channels and weight "
                         f"{list(weight.shape)} with groups={groups}: expected "
                         f"in_channels = weight.shape[1] * groups and out_channels "
                         f"divisible by groups")
    pads, dilations = _paddings(who, padding, lengths, sizes, strides, dilations,
                                channel_last)
    spans = [d * (k - 1) + 1 for d, k in zip(dilations, sizes)]   # dilated kernel extents
    for length, (left, right), span in zip(lengths, pads, spans):
        if length is not None and length + left + right < span:
            raise ValueError(f"{who}: the input length {length} (padded {left}+{right}) "
                             f"is shorter than the dilated kernel ({span})")
        if padding_mode != "zeros":
            if length is None:
                raise ValueError(f"{who}: padding_mode {padding_mode!r} needs the input "
                                 f"length (unknown here: a static input of length -1)")
            if left >= length or right >= length:
                raise ValueError(f"{who}: padding_mode {padding_mode!r} needs padding < "
                                 f"the input length {length}, got {left}, {right}")
    for axis, length, (left, right) in zip(axes, lengths, pads):
        x = _padded(x, axis, left, right, padding_mode, length)
    # tap k reads padded positions k*dilation + t*stride, t < out_length, on each axis: a
    # strided slice ending (span - 1 - k*dilation) before the end
    end = np.iinfo(np.int64).max
    taps = [B.unsqueeze(B.slice(x, axes=axes, starts=[k * d for k, d in zip(tap, dilations)],
                                ends=[k * d - s + 1 or end
                                      for k, d, s in zip(tap, dilations, spans)],
                                strides=list(strides)), axis=[ndim + 2])
            for tap in itertools.product(*(range(k) for k in sizes))]
    windows = B.concat(taps, axis=ndim + 2) if len(taps) > 1 else taps[0]
    # [N, C, *out, taps] -> [N, *out, groups, C / groups * taps] -> [N, groups, *out, ...]
    kernel = group_channels * len(taps)
    windows = B.transpose(windows, perm=[0] + axes + [1, ndim + 2])
    windows = B.reshape(windows, shape=[0] * (ndim + 1) + [groups, kernel])
    windows = B.transpose(windows, perm=[0, ndim + 1] + list(range(1, ndim + 1)) +
                          [ndim + 2])
    filters = B.transpose(B.reshape(weight, shape=[groups, out_channels // groups, kernel]),
                          perm=[0, 2, 1])
    filters = B.reshape(filters, shape=[groups] + [1] * (ndim - 1) +
                        [kernel, out_channels // groups])
    out = B.matmul(windows, filters)                 # [N, groups, *out, O / groups]
    out = B.transpose(out, perm=[0] + axes + [1, ndim + 2])
    out = B.reshape(out, shape=[0] * (ndim + 1) + [out_channels])     # [N, *out, O]
    if bias is not None:
        out = B.add(out, bias)
    if channel_last:
        return out
    return B.transpose(out, perm=[0, ndim + 1] + list(range(1, ndim + 1)))


def conv1d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCL",
           name: str | None = None) -> Any:
    """1-D convolution (cross-correlation, as PaddlePaddle's): x ``[N, C, L]`` (or
    ``[N, L, C]`` with ``data_format="NLC"``), weight ``[out_channels, C / groups,
    kernel_size]``, optional bias ``[out_channels]``; `padding` an int, ``[left,
    right]``, ``"same"`` or ``"valid"``."""
    return conv_nd(x, weight, bias, stride, padding, dilation, groups, data_format,
                   "zeros", "conv1d", 1)


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, data_format: str = "NCHW",
           name: str | None = None) -> Any:
    """2-D convolution (cross-correlation, as PaddlePaddle's): x ``[N, C, H, W]`` (or
    ``[N, H, W, C]`` with ``data_format="NHWC"``), weight ``[out_channels, C / groups,
    kH, kW]``, optional bias ``[out_channels]``; `stride`/`dilation` an int or a pair;
    `padding` an int, ``[pad_h, pad_w]``, ``[top, bottom, left, right]``, the nested
    per-dim form, ``"same"`` or ``"valid"``."""
    return conv_nd(x, weight, bias, stride, padding, dilation, groups, data_format,
                   "zeros", "conv2d", 2)


class _ConvNd(Layer):
    """PaddlePaddle's convolution layers: weight ``[out_channels, in_channels / groups,
    *kernel_size]`` drawn from Normal(0, sqrt(2 / (prod(kernel_size) * in_channels)))
    (as PaddlePaddle), bias zeros (``bias_attr=False``: none); `padding_mode` "zeros",
    "reflect", "replicate" or "circular" (the last three with an int padding)."""

    def __init__(self, ndim: int, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any, padding: Any, dilation: Any, groups: int, padding_mode: str,
                 weight_attr: Any, bias_attr: Any, data_format: str) -> None:
        super().__init__()
        who = f"Conv{ndim}D"
        self._ndim, self._who = ndim, who
        self._in_channels = _positive_ints(who, "in_channels", in_channels, 1)[0]
        self._out_channels = _positive_ints(who, "out_channels", out_channels, 1)[0]
        self._kernel_size = _positive_ints(who, "kernel_size", kernel_size, ndim)
        self._groups = _positive_ints(who, "groups", groups, 1)[0]
        if self._in_channels % self._groups or self._out_channels % self._groups:
            raise ValueError(f"{who}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"{who}: padding_mode must be one of {list(PADDING_MODES)}, "
                             f"got {padding_mode!r}")
        if padding_mode != "zeros" and not _is_int(padding):
            raise TypeError(f"{who}: with padding_mode {padding_mode!r} the padding must be "
                            f"an int (PaddlePaddle's rule), got {padding!r}")
        if data_format not in DATA_FORMATS[ndim]:
            first, last = DATA_FORMATS[ndim]
            raise ValueError(f"{who}: data_format must be {first!r} or {last!r}, got "
                             f"{data_format!r}")
        self._stride, self._padding, self._dilation = stride, padding, dilation
        self._padding_mode, self._data_format = padding_mode, data_format
        std = (2.0 / (int(np.prod(self._kernel_size)) * self._in_channels)) ** 0.5
        self.weight = self.create_parameter(
            [self._out_channels, self._in_channels // self._groups, *self._kernel_size],
            attr=weight_attr, default_initializer=_init.Normal(0.0, std))
        self.bias = self.create_parameter([self._out_channels], attr=bias_attr,
                                          is_bias=True)

    def forward(self, x: Any) -> Any:
        return conv_nd(x, self.weight, self.bias, self._stride, self._padding,
                       self._dilation, self._groups, self._data_format, self._padding_mode,
                       self._who, self._ndim)

    def extra_repr(self) -> str:
        return (f"{self._in_channels}, {self._out_channels}, "
                f"kernel_size={list(self._kernel_size)}, stride={self._stride}, "
                f"padding={self._padding!r}, data_format={self._data_format}")


class Conv1D(_ConvNd):
    """PaddlePaddle's ``nn.Conv1D``: weight ``[out_channels, in_channels / groups,
    kernel_size]`` drawn from Normal(0, sqrt(2 / (kernel_size * in_channels))) (as
    PaddlePaddle), bias zeros (``bias_attr=False``: none); `padding_mode` "zeros",
    "reflect", "replicate" or "circular"."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 padding_mode: str = "zeros", weight_attr: Any = None, bias_attr: Any = None,
                 data_format: str = "NCL") -> None:
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, padding_mode, weight_attr, bias_attr, data_format)


class Conv2D(_ConvNd):
    """PaddlePaddle's ``nn.Conv2D``: weight ``[out_channels, in_channels / groups, kH,
    kW]`` drawn from Normal(0, sqrt(2 / (kH * kW * in_channels))) (as PaddlePaddle), bias
    zeros (``bias_attr=False``: none); `padding_mode` "zeros", "reflect", "replicate" or
    "circular"; `data_format` "NCHW" or "NHWC"."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any,
                 stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 padding_mode: str = "zeros", weight_attr: Any = None, bias_attr: Any = None,
                 data_format: str = "NCHW") -> None:
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, padding_mode, weight_attr, bias_attr, data_format)
