"""Sliding-window geometry shared by convolution and pooling, and the two data movements
every window op is built from: gathering the windows of a padded input into columns
(im2col) and scatter-adding columns back into it (col2im).

Inputs are laid out as *planes*: a flat buffer holding ``(C, N, Hp, Wp)`` padded images,
channel-major, so a convolution's columns are ``(C * kh * kw, positions)`` and one GEMM
with the ``(C_out, C * kh * kw)`` weight gives ``(C_out, positions)``. Pooling uses one
"channel" and ``N * C`` planes, which is the NCHW input itself, without a transpose.

Two ways to enumerate the window positions:

* *strided* (any stride): positions are ``(N, H_out, W_out)``, read through a strided
  view; rows of ``W_out`` elements.
* *wide* (stride 1): every element of the padded planes is a position, so the window at
  kernel offset ``(i, j)`` is the flat buffer shifted by ``i * dh * Wp + j * dw`` — one
  contiguous run. The positions past the valid ``H_out x W_out`` corner of a plane compute
  values nobody reads (they wrap into the next row or plane), and their column gradients
  are zero because the output gradient is zero there. On the 8x8 images of the benchmark
  (64 valid positions in 100) this did the im2col copy and the col2im adds about twice
  as fast as rows of 8 elements did, despite the 1.6x larger GEMM; it is used when it
  wastes at most half of the positions.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

__all__ = ["Axis", "Geometry", "pair", "paddings", "resolve_axis", "geometry", "pad_planes",
           "inner", "window", "columns", "add_columns", "positions"]

# the wide layout is used while at least this fraction of its positions are valid
_WIDE_MIN_VALID = 0.5


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
    """Both spatial axes of a window op, the layout of its planes and derived tables."""

    h: Axis
    w: Axis
    wide: bool

    @property
    def plane(self) -> int:
        return self.h.padded * self.w.padded

    @property
    def tail(self) -> int:
        """Elements past the last plane that the wide layout's shifted windows read."""
        if not self.wide:
            return 0
        return (self.h.kernel - 1) * self.h.dilation * self.w.padded \
            + (self.w.kernel - 1) * self.w.dilation

    def count(self, n: int) -> int:
        """Positions per channel of `n` planes."""
        return n * (self.plane if self.wide else self.h.out * self.w.out)

    def offsets(self) -> list[tuple[int, int, int]]:
        """(i, j, flat offset in a padded plane) of every kernel element, row-major."""
        wp = self.w.padded
        return [(i, j, i * self.h.dilation * wp + j * self.w.dilation)
                for i in range(self.h.kernel) for j in range(self.w.kernel)]

    @cached_property
    def first_index(self) -> np.ndarray:
        """(H_out, W_out): the flat input index of each window's top-left element, in
        unpadded coordinates (negative or wrapped when the window starts in padding)."""
        table = self.h.starts()[:, None] * self.w.size + self.w.starts()[None, :]
        table.setflags(write=False)
        return table

    @cached_property
    def first_valid_index(self) -> np.ndarray:
        """(H_out, W_out): the flat input index of each window's first non-padding
        element."""
        rows = np.maximum(self.h.starts(), 0)
        cols = np.maximum(self.w.starts(), 0)
        table = rows[:, None] * self.w.size + cols[None, :]
        table.setflags(write=False)
        return table

    @cached_property
    def kernel_index(self) -> np.ndarray:
        """The flat input-index step of each kernel element from a window's top-left."""
        table = np.array([i * self.h.dilation * self.w.size + j * self.w.dilation
                          for i, j, _ in self.offsets()], dtype=np.int64)
        table.setflags(write=False)
        return table

    def window_sizes(self, exclusive: bool) -> np.ndarray:
        """(H_out, W_out) element counts of the windows: inside the input (`exclusive`),
        else inside the given padding (PyTorch's count_include_pad)."""
        return np.outer(_counts(self.h, exclusive), _counts(self.w, exclusive))


def _counts(axis: Axis, exclusive: bool) -> np.ndarray:
    start = axis.starts()
    if exclusive:
        return np.minimum(start + axis.kernel, axis.size) - np.maximum(start, 0)
    return np.minimum(start + axis.kernel, axis.size + axis.after) - start


@lru_cache(maxsize=256)
def geometry(op: str, size: tuple[int, int], kernel: tuple[int, int],
             stride: tuple[int, int], dilation: tuple[int, int],
             padding: str | tuple[int, int, int, int], ceil_mode: bool = False,
             pooling: bool = False, allow_wide: bool = False) -> Geometry:
    """The (cached) geometry of a window op over inputs of spatial `size`."""
    pads_h = padding if isinstance(padding, str) else padding[:2]
    pads_w = padding if isinstance(padding, str) else padding[2:]
    h = resolve_axis(op, "height", size[0], kernel[0], stride[0], dilation[0], pads_h,
                     ceil_mode, pooling)
    w = resolve_axis(op, "width", size[1], kernel[1], stride[1], dilation[1], pads_w,
                     ceil_mode, pooling)
    wide = allow_wide and h.stride == w.stride == 1 \
        and h.out * w.out >= _WIDE_MIN_VALID * h.padded * w.padded
    return Geometry(h, w, wide)


def pad_planes(planes: np.ndarray, g: Geometry, fill: float = 0.0) -> np.ndarray:
    """The flat padded-planes buffer of `planes` (C, N, H, W) (plus the wide tail).
    Without padding or tail, a contiguous input is used as it is."""
    c, n = planes.shape[:2]
    if g.plane == g.h.size * g.w.size and not g.tail and planes.flags.c_contiguous:
        return planes.reshape(-1)
    buf = np.zeros(c * n * g.plane + g.tail, planes.dtype) if fill == 0 else \
        np.full(c * n * g.plane + g.tail, fill, planes.dtype)
    inner(buf, g, c, n)[...] = planes
    return buf


def inner(buf: np.ndarray, g: Geometry, c: int, n: int) -> np.ndarray:
    """(C, N, H, W): the unpadded part of a padded-planes buffer (a view)."""
    h, w = g.h, g.w
    return buf[:c * n * g.plane].reshape(c, n, h.padded, w.padded)[
        :, :, h.before:h.before + h.size, w.before:w.before + w.size]


def window(buf: np.ndarray, g: Geometry, c: int, n: int, offset: int) -> np.ndarray:
    """The input elements that kernel element at flat `offset` meets, for every position:
    a (C, positions...) view of the padded-planes buffer."""
    item = buf.itemsize
    if g.wide:
        shape, strides = (c, n * g.plane), (n * g.plane * item, item)
    else:
        wp = g.w.padded
        shape = (c, n, g.h.out, g.w.out)
        strides = (n * g.plane * item, g.plane * item, g.h.stride * wp * item,
                   g.w.stride * item)
    return np.ndarray(shape, buf.dtype, buf, offset * item, strides)


def columns(buf: np.ndarray, g: Geometry, c: int, n: int) -> np.ndarray:
    """im2col: (C * kh * kw, positions), one strided copy of the padded planes."""
    item = buf.itemsize
    wp = g.w.padded
    kernel_shape = (c, g.h.kernel, g.w.kernel)
    kernel_strides = (n * g.plane * item, g.h.dilation * wp * item, g.w.dilation * item)
    if g.wide:
        shape, strides = kernel_shape + (n * g.plane,), kernel_strides + (item,)
    else:
        shape = kernel_shape + (n, g.h.out, g.w.out)
        strides = kernel_strides + (g.plane * item, g.h.stride * wp * item, g.w.stride * item)
    view = np.ndarray(shape, buf.dtype, buf, 0, strides)
    return view.reshape(c * g.h.kernel * g.w.kernel, g.count(n))


def add_columns(cols: np.ndarray, g: Geometry, c: int, n: int) -> np.ndarray:
    """col2im: a zeroed padded-planes buffer with every column scatter-added to where
    it was gathered from, one strided add per kernel element (kh * kw adds, each over
    all channels and positions). `cols` is (C, kh * kw, positions...) or broadcasts to it."""
    buf = np.zeros(c * n * g.plane + g.tail, cols.dtype)
    for k, (_, _, offset) in enumerate(g.offsets()):
        target = window(buf, g, c, n, offset)
        np.add(target, cols[:, k].reshape(target.shape), out=target)
    return buf


def positions(values: np.ndarray, g: Geometry, n: int) -> np.ndarray:
    """(rows, N, H_out, W_out): the valid positions of (rows, positions) values."""
    rows = values.shape[0]
    if g.wide:
        return values.reshape(rows, n, g.h.padded, g.w.padded)[:, :, :g.h.out, :g.w.out]
    return values.reshape(rows, n, g.h.out, g.w.out)
