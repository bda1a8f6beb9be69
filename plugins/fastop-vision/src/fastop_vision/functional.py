"""Paddle's ``paddle.nn.functional`` convolution and pooling, on the vision ops.

``data_format="NHWC"`` transposes to NCHW around the op (the kernels are NCHW).
"""
from __future__ import annotations

from typing import Any, Sequence

from fastop.ops import registry

__all__ = ["conv2d", "max_pool2d", "avg_pool2d"]

_conv2d = registry.get("vision::conv2d")
_max_pool2d = registry.get("vision::max_pool2d")
_avg_pool2d = registry.get("vision::avg_pool2d")
_transpose = registry.get("fastop::transpose")

IntOrPair = int | Sequence[int]
Padding = str | int | Sequence[int]

_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _channels_last(where: str, data_format: str) -> bool:
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"{where}: data_format must be 'NCHW' or 'NHWC', got "
                         f"{data_format!r}")
    return data_format == "NHWC"


def conv2d(x: Any, weight: Any, bias: Any = None, stride: IntOrPair = 1,
           padding: Padding = 0, dilation: IntOrPair = 1, groups: int = 1,
           data_format: str = "NCHW", name: str | None = None) -> Any:
    """2-D convolution with weight ``[C_out, C_in / groups, kh, kw]`` and an optional
    bias ``[C_out]``; padding is 'SAME', 'VALID', an int, ``[pad_h, pad_w]`` or
    ``[top, bottom, left, right]``."""
    if _channels_last("conv2d", data_format):
        out = _conv2d(_transpose(x, perm=_TO_NCHW), weight, bias, stride=stride,
                      padding=padding, dilation=dilation, groups=groups)
        return _transpose(out, perm=_TO_NHWC)
    return _conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                   groups=groups)


def max_pool2d(x: Any, kernel_size: IntOrPair, stride: IntOrPair | None = None,
               padding: Padding = 0, return_mask: bool = False, ceil_mode: bool = False,
               data_format: str = "NCHW", name: str | None = None) -> Any:
    """The maximum of each window; with ``return_mask`` also the int64 flat index of
    each maximum within its input plane (``h * W + w``)."""
    nhwc = _channels_last("max_pool2d", data_format)
    if nhwc:
        x = _transpose(x, perm=_TO_NCHW)
    out, mask = _max_pool2d(x, kernel_size=kernel_size, stride=stride, padding=padding,
                            ceil_mode=ceil_mode)
    if nhwc:
        out, mask = _transpose(out, perm=_TO_NHWC), _transpose(mask, perm=_TO_NHWC)
    return (out, mask) if return_mask else out


def avg_pool2d(x: Any, kernel_size: IntOrPair, stride: IntOrPair | None = None,
               padding: Padding = 0, ceil_mode: bool = False, exclusive: bool = True,
               divisor_override: int | None = None, data_format: str = "NCHW",
               name: str | None = None) -> Any:
    """The mean of each window; ``exclusive`` (the default) leaves padding out of the
    count, ``divisor_override`` divides every window's sum by that number instead."""
    if _channels_last("avg_pool2d", data_format):
        out = _avg_pool2d(_transpose(x, perm=_TO_NCHW), kernel_size=kernel_size,
                          stride=stride, padding=padding, ceil_mode=ceil_mode,
                          exclusive=exclusive, divisor_override=divisor_override)
        return _transpose(out, perm=_TO_NHWC)
    return _avg_pool2d(x, kernel_size=kernel_size, stride=stride, padding=padding,
                       ceil_mode=ceil_mode, exclusive=exclusive,
                       divisor_override=divisor_override)
