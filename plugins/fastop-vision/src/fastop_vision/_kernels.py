"""The numpy kernels of the vision ops (NCHW): convolution as im2col + one GEMM per group,
its backward as two GEMMs + col2im; max and average pooling over strided window views.

Kernels take numpy arrays and the op's attributes as given (an int or a pair ...);
:func:`conv_geometry` and :func:`pool_geometry` check and normalize them once per
distinct call signature (cached: every call of an op runs them in its meta function and
its kernel, twice for the backward op).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from fastop_vision import _window as win

__all__ = ["conv_geometry", "pool_geometry", "conv_planes", "conv2d_forward", "conv2d_backward",
           "max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward",
           "avg_pool2d_backward"]


def _cached(resolve: Callable[..., win.Geometry]) -> Callable[..., win.Geometry]:
    """`resolve` memoized on its arguments with lists as tuples. A call that fails (or
    whose arguments cannot be hashed) is repeated uncached, so an error shows the
    attributes as they were given."""
    memo = lru_cache(maxsize=512)(resolve)

    def geometry(*args: Any) -> win.Geometry:
        try:
            return memo(*[tuple(a) if isinstance(a, list) else a for a in args])
        except (TypeError, ValueError):
            pass
        return resolve(*args)
    geometry.__doc__ = resolve.__doc__
    return geometry


@_cached
def conv_geometry(op: str, x_hw: tuple[int, int], kernel_hw: tuple[int, int], stride: Any,
                  padding: Any, dilation: Any) -> win.Geometry:
    """Checked geometry of a convolution over inputs of spatial size `x_hw`."""
    return win.geometry(op, tuple(x_hw), tuple(kernel_hw), win.pair(op, "stride", stride, 1),
                        win.pair(op, "dilation", dilation, 1), win.paddings(op, padding))


@_cached
def pool_geometry(op: str, x_hw: tuple[int, int], kernel_size: Any, stride: Any,
                  padding: Any, ceil_mode: bool) -> win.Geometry:
    """Checked geometry of a pooling over inputs of spatial size `x_hw` (stride None:
    the kernel size, Paddle's default)."""
    kernel = win.pair(op, "kernel_size", kernel_size, 1)
    strides = kernel if stride is None else win.pair(op, "stride", stride, 1)
    return win.geometry(op, tuple(x_hw), kernel, strides, (1, 1), win.paddings(op, padding),
                        ceil_mode=ceil_mode, pooling=True)


def _grouped(matrix: np.ndarray, groups: int) -> np.ndarray:
    """(rows, cols) as (groups, rows / groups, cols) — a view."""
    return matrix.reshape(groups, matrix.shape[0] // groups, matrix.shape[1])


def conv_planes(x_shape: tuple[int, ...], g: win.Geometry) -> win.Planes:
    """A convolution's input as C channels of N images."""
    return win.Planes.choose(g, x_shape[1], x_shape[0])


def conv2d_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: Any,
                   padding: Any, dilation: Any, groups: int) -> np.ndarray:
    c_out = weight.shape[0]
    g = conv_geometry("vision::conv2d", x.shape[2:], weight.shape[2:], stride, padding,
                      dilation)
    planes = conv_planes(x.shape, g)
    cols = planes.columns(planes.pad(x))
    w2 = weight.reshape(c_out, -1)
    if groups == 1:
        y = w2 @ cols
    else:
        y = np.matmul(_grouped(w2, groups), _grouped(cols, groups)).reshape(c_out, -1)
    out = np.empty((x.shape[0], c_out, g.h.out, g.w.out), x.dtype)
    by_channel = out.transpose(1, 0, 2, 3)
    if bias is None:
        np.copyto(by_channel, planes.positions(y))
    else:
        np.add(planes.positions(y), bias.reshape(-1, 1, 1, 1), out=by_channel)
    return out


def conv2d_backward(x: np.ndarray, weight: np.ndarray, dout: np.ndarray, stride: Any,
                    padding: Any, dilation: Any, groups: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dweight, dbias) of conv2d (dbias: the gradient a bias would get)."""
    c_out = weight.shape[0]
    g = conv_geometry("vision::conv2d", x.shape[2:], weight.shape[2:], stride, padding,
                      dilation)
    planes = conv_planes(x.shape, g)
    cols = planes.columns(planes.pad(x))
    dy = np.empty((c_out, planes.positions_count), dout.dtype)   # dout by output channel
    planes.positions(dy)[...] = dout.transpose(1, 0, 2, 3)
    w2 = weight.reshape(c_out, -1)
    if groups == 1:
        dweight = dy @ cols.T
        dcols = w2.T @ dy
    else:
        dy_g = _grouped(dy, groups)
        dweight = np.matmul(dy_g, _grouped(cols, groups).transpose(0, 2, 1))
        dcols = np.matmul(_grouped(w2, groups).transpose(0, 2, 1), dy_g)
    kernel = g.h.kernel * g.w.kernel
    dbuf = planes.add_columns(dcols.reshape(x.shape[1], kernel, *planes.position_shape))
    dx = np.ascontiguousarray(planes.inner(dbuf))
    return dx, dweight.reshape(weight.shape), dy.sum(axis=1)


def _pool_planes(x_shape: tuple[int, ...], g: win.Geometry) -> win.Planes:
    """A pooling's input as one channel of N * C planes (batch-first: the input itself)."""
    return win.Planes.choose(g, 1, x_shape[0] * x_shape[1])


def _nchw(planes: win.Planes, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Per-position values of one-channel planes as a contiguous NCHW array."""
    return np.ascontiguousarray(planes.positions(values.reshape(1, -1))[0]).reshape(shape)


def max_pool2d_forward(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any,
                       ceil_mode: bool) -> tuple[np.ndarray, np.ndarray]:
    """(max of each window, flat index of the max in its input plane); NaN wins, the
    first maximum wins ties (PyTorch's and Paddle's choice)."""
    n, c, h, w = x.shape
    g = pool_geometry("vision::max_pool2d", (h, w), kernel_size, stride, padding, ceil_mode)
    planes = _pool_planes(x.shape, g)
    buf = planes.pad(x, fill=-np.inf)
    offsets = g.offsets()
    best = planes.window(buf, offsets[0]).copy()
    which = np.zeros(best.shape, np.intp)
    for k, offset in enumerate(offsets[1:], 1):
        value = planes.window(buf, offset)
        better = value > best
        better |= np.isnan(value)
        np.maximum(best, value, out=best)
        # np.where, not copyto(where=): a masked copy branches per element, 5-10x
        # slower on random data
        which = np.where(better, k, which)
    shape = (n, c, g.h.out, g.w.out)
    best = _nchw(planes, best, shape)
    mask = g.first_index + g.kernel_index[planes.positions(which.reshape(1, -1))[0]]
    if g.plane != h * w:
        # a window whose values are all -inf keeps its first element, maybe padding:
        # point at its first element inside the input instead
        empty = best.reshape(mask.shape) == -np.inf
        if empty.any():
            mask[empty] = np.broadcast_to(g.first_valid_index, mask.shape)[empty]
    return best, mask.reshape(shape)


def max_pool2d_backward(x: np.ndarray, mask: np.ndarray, dout: np.ndarray, kernel_size: Any,
                        stride: Any, padding: Any, ceil_mode: bool) -> np.ndarray:
    """dout routed to the max of each window (summed where windows overlap)."""
    n, c, h, w = x.shape
    g = pool_geometry("vision::max_pool2d", (h, w), kernel_size, stride, padding, ceil_mode)
    plane = h * w
    per_plane = g.h.out * g.w.out
    flat = (mask.reshape(n * c, per_plane)
            + np.arange(0, n * c * plane, plane)[:, None]).reshape(-1)
    if g.h.stride >= g.h.kernel and g.w.stride >= g.w.kernel:
        dx = np.zeros(n * c * plane, dout.dtype)       # disjoint windows: no index twice
        dx[flat] = dout.reshape(-1)
    else:
        dx = np.bincount(flat, dout.reshape(-1), n * c * plane).astype(dout.dtype, copy=False)
    return dx.reshape(x.shape)


def _divisor(g: win.Geometry, exclusive: bool, divisor_override: int | None,
             dtype: np.dtype) -> Any:
    """What each window's sum is divided by: the override, else the window sizes."""
    if divisor_override is not None:
        return divisor_override
    return g.window_sizes(exclusive).astype(dtype)


def avg_pool2d_forward(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any,
                       ceil_mode: bool, exclusive: bool, divisor_override: int | None
                       ) -> np.ndarray:
    n, c, h, w = x.shape
    g = pool_geometry("vision::avg_pool2d", (h, w), kernel_size, stride, padding, ceil_mode)
    planes = _pool_planes(x.shape, g)
    buf = planes.pad(x)
    offsets = g.offsets()
    total = planes.window(buf, offsets[0]).copy()
    for offset in offsets[1:]:
        total += planes.window(buf, offset)
    out = _nchw(planes, total, (n, c, g.h.out, g.w.out))
    out /= _divisor(g, exclusive, divisor_override, x.dtype)
    return out


def avg_pool2d_backward(x: np.ndarray, dout: np.ndarray, kernel_size: Any, stride: Any,
                        padding: Any, ceil_mode: bool, exclusive: bool,
                        divisor_override: int | None) -> np.ndarray:
    """Each window's dout / divisor, added to every element of the window."""
    n, c, h, w = x.shape
    g = pool_geometry("vision::avg_pool2d", (h, w), kernel_size, stride, padding, ceil_mode)
    planes = _pool_planes(x.shape, g)
    share = np.empty((1, *planes.position_shape), dout.dtype)
    np.divide(dout.reshape(1, n * c, g.h.out, g.w.out),
              _divisor(g, exclusive, divisor_override, dout.dtype),
              out=planes.positions(share.reshape(1, -1)))
    kernel = g.h.kernel * g.w.kernel
    dbuf = planes.add_columns(np.broadcast_to(share[:, None], (1, kernel, *share.shape[1:])))
    if g.plane == h * w and not planes.batch_last:
        return dbuf.reshape(x.shape)
    return np.ascontiguousarray(planes.inner(dbuf)).reshape(x.shape)
