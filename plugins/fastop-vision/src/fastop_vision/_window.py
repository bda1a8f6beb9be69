"""Sliding-window geometry shared by convolution and pooling, and the two data movements
every window op is built from: gathering the windows of a padded input into columns
(im2col) and scatter-adding columns back into it (col2im).

Inputs are held as :class:`Planes`: padded images, channel-major, so a convolution's
columns are ``(C * kh * kw, positions)`` and one GEMM with the ``(C_out, C * kh * kw)``
weight gives ``(C_out, positions)``. Two orders of the batch:

* batch-first ``(C, N, Hp, Wp)``: positions ``(N, H_out, W_out)``, read in rows of
  ``W_out`` elements. Pooling uses one "channel" of ``N * C`` planes: the NCHW input
  itself, when it needs no padding.
* batch-last ``(C, Hp, Wp, N)``: positions ``(H_out, W_out, N)``, read in runs of ``N``
  elements (``W_out * N`` at stride 1). For small images numpy's per-row cost dominates
  rows of 4 or 8 elements: on the digits CNN's second convolution (64 images of 8
  channels, 4x4) a forward + backward took 2.6x less time batch-last, at the price of
  transposing the input and output; on 32x32 images it took 1.5x more.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

__all__ = ["Axis", "Geometry", "Planes", "pair", "paddings", "resolve_axis", "geometry",
           "BATCH_LAST_MAX_WIDTH"]

# batch-last while output rows are shorter than this and the batch is at least as long
BATCH_LAST_MAX_WIDTH = 16


def pair(op: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least `minimum`."""
    items = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(items) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in items):
        raise TypeError(f"{op}: attribute '{name}' expects an int or a pair of ints "
                        f"(height, width), got {value!r}")
    if min(items) < minimum:
        raise ValueError(f"{op}: attribute '{name}' must be at least {minimum}, got {value!r}")
    return int(items[0]), int(items[1])


def paddings(op: str, value: Any) -> str | tuple[int, int, int, int]:
    """Paddle's padding forms: ``"same"`` / ``"valid"`` (any case), an int, a pair
    ``(pad_h, pad_w)`` or four ints ``(top, bottom, left, right)``."""
    if isinstance(value, str):
        algorithm = value.lower()
        if algorithm not in ("same", "valid"):
            raise ValueError(f"{op}: attribute 'padding' as a string must be 'SAME' or "
                             f"'VALID', got {value!r}")
        return algorithm
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) not in (1, 2, 4) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        raise TypeError(f"{op}: attribute 'padding' expects 'SAME', 'VALID', an int, a pair "
                        f"(pad_h, pad_w) or four ints (top, bottom, left, right); got "
                        f"{value!r}")
    if min(items) < 0:
        raise ValueError(f"{op}: attribute 'padding' must not be negative, got {value!r}")
    if len(items) == 1:
        items *= 4
    elif len(items) == 2:
        items = [items[0], items[0], items[1], items[1]]
    return tuple(int(v) for v in items)


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a window op: input size, kernel, stride, dilation, the padding
    before and after as given (after resolving 'same'/'valid'), the output size and the
    padded extent actually read (ceil mode may read past the given padding)."""

    size: int
    kernel: int
    stride: int
    dilation: int
    before: int
    after: int
    out: int
    padded: int

    def starts(self) -> np.ndarray:
        """Each output's first input index (negative inside the leading padding)."""
        return np.arange(self.out) * self.stride - self.before


def resolve_axis(op: str, axis: str, size: int, kernel: int, stride: int, dilation: int,
                 padding: str | tuple[int, int], ceil_mode: bool = False,
                 max_padding: bool = False) -> Axis:
    """The geometry of one axis; raises naming `op` when no window fits.

    'same' follows Paddle: output ``ceil(size / stride)``, the padding split with the
    odd element after, and the dilation taken as 1. Ceil mode follows PyTorch: the last
    window must start inside the input or the leading padding. `max_padding` (pooling)
    refuses padding over half the kernel, where a window could hold only padding.
    """
    if padding == "same":
        dilation = 1
        out = -(-size // stride)
        total = max((out - 1) * stride + kernel - size, 0)
        before, after = total // 2, total - total // 2
    elif padding == "valid":
        before = after = 0
    else:
        before, after = padding
    if max_padding and max(before, after) > kernel // 2:
        raise ValueError(f"{op}: padding {max(before, after)} on the {axis} axis is more than "
                         f"half the kernel size {kernel}: a window would hold only padding")
    extent = dilation * (kernel - 1) + 1
    span = size + before + after - extent
    if span < 0:
        raise ValueError(f"{op}: the input's {axis} {size} with padding {before}+{after} is "
                         f"smaller than the kernel's extent {extent} (kernel {kernel}, "
                         f"dilation {dilation})")
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + before:
        out -= 1
    padded = max(size + before + after, (out - 1) * stride + extent)
    return Axis(size, kernel, stride, dilation, before, after, out, padded)


@dataclass(frozen=True)
class Geometry:
    """Both spatial axes of a window op and tables derived from them."""

    h: Axis
    w: Axis

    @property
    def plane(self) -> int:
        return self.h.padded * self.w.padded

    def offsets(self) -> list[tuple[int, int]]:
        """(row, column) offset in a padded plane of every kernel element, row-major."""
        return [(i * self.h.dilation, j * self.w.dilation)
                for i in range(self.h.kernel) for j in range(self.w.kernel)]

    @cached_property
    def first_index(self) -> np.ndarray:
        """(H_out, W_out): the flat input index of each window's top-left element, in
        unpadded coordinates (negative or wrapped when the window starts in padding)."""
        return _read_only(self.h.starts()[:, None] * self.w.size + self.w.starts()[None, :])

    @cached_property
    def first_valid_index(self) -> np.ndarray:
        """(H_out, W_out): the flat input index of each window's first non-padding
        element."""
        rows = np.maximum(self.h.starts(), 0)
        cols = np.maximum(self.w.starts(), 0)
        return _read_only(rows[:, None] * self.w.size + cols[None, :])

    @cached_property
    def kernel_index(self) -> np.ndarray:
        """The flat input-index step of each kernel element from a window's top-left."""
        return _read_only(np.array([i * self.w.size + j for i, j in self.offsets()],
                                   dtype=np.int64))

    @cached_property
    def _sizes_inside(self) -> np.ndarray:
        return _read_only(np.outer(_counts(self.h, True), _counts(self.w, True)))

    @cached_property
    def _sizes_with_padding(self) -> np.ndarray:
        return _read_only(np.outer(_counts(self.h, False), _counts(self.w, False)))

    def window_sizes(self, exclusive: bool) -> np.ndarray:
        """(H_out, W_out) element counts of the windows: inside the input (`exclusive`),
        else inside the given padding (PyTorch's count_include_pad)."""
        return self._sizes_inside if exclusive else self._sizes_with_padding


def _read_only(table: np.ndarray) -> np.ndarray:
    """A cached table, protected from callers writing into it."""
    table.setflags(write=False)
    return table


def _counts(axis: Axis, exclusive: bool) -> np.ndarray:
    start = axis.starts()
    if exclusive:
        return np.minimum(start + axis.kernel, axis.size) - np.maximum(start, 0)
    return np.minimum(start + axis.kernel, axis.size + axis.after) - start


def geometry(op: str, size: tuple[int, int], kernel: tuple[int, int],
             stride: tuple[int, int], dilation: tuple[int, int],
             padding: str | tuple[int, int, int, int], ceil_mode: bool = False,
             pooling: bool = False) -> Geometry:
    """The geometry of a window op over inputs of spatial `size`."""
    pads_h = padding if isinstance(padding, str) else padding[:2]
    pads_w = padding if isinstance(padding, str) else padding[2:]
    return Geometry(resolve_axis(op, "height", size[0], kernel[0], stride[0], dilation[0],
                                 pads_h, ceil_mode, pooling),
                    resolve_axis(op, "width", size[1], kernel[1], stride[1], dilation[1],
                                 pads_w, ceil_mode, pooling))


class Planes:
    """`c` channels of `n` padded images of geometry `g`, batch-first or batch-last: the
    buffer's shape and the views that read windows out of it."""

    def __init__(self, g: Geometry, c: int, n: int, batch_last: bool) -> None:
        self.g, self.c, self.n, self.batch_last = g, c, n, batch_last
        hp, wp, ho, wo = g.h.padded, g.w.padded, g.h.out, g.w.out
        if batch_last:
            self.shape = (c, hp, wp, n)
            self.position_shape = (ho, wo, n)
            row, col, image = wp * n, n, 1
        else:
            self.shape = (c, n, hp, wp)
            self.position_shape = (n, ho, wo)
            row, col, image = wp, 1, hp * wp
        self.channel_stride = n * hp * wp
        self.row_stride, self.col_stride = row, col
        self.position_strides = (row * g.h.stride, col * g.w.stride, image) if batch_last \
            else (image, row * g.h.stride, col * g.w.stride)
        self.positions_count = n * ho * wo

    @classmethod
    def choose(cls, g: Geometry, c: int, n: int) -> "Planes":
        """Batch-last for output rows shorter than BATCH_LAST_MAX_WIDTH and a batch at
        least as long, batch-first otherwise."""
        return cls(g, c, n, g.w.out < BATCH_LAST_MAX_WIDTH and n >= g.w.out)

    def _nchw(self, buf: np.ndarray) -> np.ndarray:
        """The buffer's (C, ...) 4-D view in NCHW axis order."""
        view = buf.reshape(self.shape)
        return view.transpose(3, 0, 1, 2) if self.batch_last else view.transpose(1, 0, 2, 3)

    def inner(self, buf: np.ndarray) -> np.ndarray:
        """(N, C, H, W): the unpadded part of a buffer (a view)."""
        h, w = self.g.h, self.g.w
        return self._nchw(buf)[:, :, h.before:h.before + h.size, w.before:w.before + w.size]

    def pad(self, x: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """The buffer holding NCHW `x` (N, C, H, W; for one channel of N * C planes, any
        shape with that many elements), padded with `fill`. Batch-first without padding,
        a contiguous input is used as it is."""
        if not self.batch_last and self.g.plane == self.g.h.size * self.g.w.size \
                and x.flags.c_contiguous and (self.c == 1 or self.n == 1):
            return x.reshape(-1)
        buf = np.zeros(self.shape, x.dtype) if fill == 0 else np.full(self.shape, fill, x.dtype)
        self.inner(buf)[...] = x.reshape(self.n, self.c, self.g.h.size, self.g.w.size)
        return buf.reshape(-1)

    def window(self, buf: np.ndarray, offset: tuple[int, int]) -> np.ndarray:
        """The elements that the kernel element at (row, column) `offset` meets, at every
        position: a (C, *position_shape) view of the buffer."""
        start = offset[0] * self.row_stride + offset[1] * self.col_stride
        return _view(buf, (self.c, *self.position_shape), start,
                     (self.channel_stride, *self.position_strides))

    def columns(self, buf: np.ndarray) -> np.ndarray:
        """im2col: (C * kh * kw, positions), one strided copy of the buffer."""
        g = self.g
        shape = (self.c, g.h.kernel, g.w.kernel, *self.position_shape)
        strides = (self.channel_stride, g.h.dilation * self.row_stride,
                   g.w.dilation * self.col_stride, *self.position_strides)
        view = _view(buf, shape, 0, strides)
        return view.reshape(self.c * g.h.kernel * g.w.kernel, self.positions_count)

    def add_columns(self, cols: np.ndarray) -> np.ndarray:
        """col2im: a zeroed buffer with every column scatter-added to where it was
        gathered from, one strided add per kernel element (kh * kw adds, each over all
        channels and positions). `cols` is (C, kh * kw, *position_shape)."""
        buf = np.zeros(int(np.prod(self.shape)), cols.dtype)
        for k, offset in enumerate(self.g.offsets()):
            target = self.window(buf, offset)
            np.add(target, cols[:, k], out=target)
        return buf

    def positions(self, values: np.ndarray) -> np.ndarray:
        """(rows, N, H_out, W_out): a view of (rows, positions) values."""
        view = values.reshape(values.shape[0], *self.position_shape)
        return view.transpose(0, 3, 1, 2) if self.batch_last else view


def _view(buf: np.ndarray, shape: tuple[int, ...], start: int,
          strides: tuple[int, ...]) -> np.ndarray:
    """A strided view of the flat `buf` (start and strides in elements); an empty batch
    or channel count gives an empty array (numpy refuses offsets into empty buffers)."""
    if 0 in shape:
        return np.zeros(shape, buf.dtype)
    item = buf.itemsize
    return np.ndarray(shape, buf.dtype, buf, start * item, tuple(s * item for s in strides))
