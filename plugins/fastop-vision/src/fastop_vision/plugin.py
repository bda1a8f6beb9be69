"""The plugin module named by the ``fastop`` entry point: defines the ``vision`` namespace.

Each forward op has numpy kernels and a composite gradient rule that calls a backward op
of its own (``conv2d_grad``, ``max_pool2d_grad``, ``avg_pool2d_grad``: Paddle's split),
so gradients run through the registry in eager and static mode alike. ``conv2d_grad`` and
``avg_pool2d_grad`` have gradient rules too (they are linear in the output gradient), so
convolution and average pooling can be differentiated twice.
"""
from __future__ import annotations

from functools import wraps
from typing import Any, Callable

import fastop
from fastop.ops import AttrSpec, TensorMeta

from fastop_vision import _kernels as K
from fastop_vision import _window as win

FLOATS = ("float32", "float64")

CONV_ATTRS = {"stride": AttrSpec("stride", object, 1),
              "padding": AttrSpec("padding", object, 0),
              "dilation": AttrSpec("dilation", object, 1),
              "groups": 1}
POOL_ATTRS = {"kernel_size": AttrSpec("kernel_size", object),
              "stride": AttrSpec("stride", object, None),
              "padding": AttrSpec("padding", object, 0),
              "ceil_mode": False}
AVG_POOL_ATTRS = {**POOL_ATTRS, "exclusive": True,
                  "divisor_override": AttrSpec("divisor_override", object, None)}


# -- meta functions: shapes and dtypes, checked (static graphs run them before any data) --

def _check_4d(op: str, name: str, meta: TensorMeta, layout: str) -> None:
    if meta.ndim != 4:
        raise ValueError(f"{op}: input '{name}' must be 4-D {layout}, got shape {meta.shape}")


def _check_dtype(op: str, name: str, meta: TensorMeta, want: Any) -> None:
    if meta.dtype != want:
        raise TypeError(f"{op}: input '{name}' has dtype {meta.dtype.name}, expected "
                        f"{want.name} (the dtype of 'x')")


def _out_hw(op: str, x: TensorMeta, kernel: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int], padding: Any, ceil_mode: bool = False,
            pooling: bool = False) -> list[int | None]:
    """Output height and width (None where the input's is unknown)."""
    pads = (padding, padding) if isinstance(padding, str) else (padding[:2], padding[2:])
    return [None if size is None else win.resolve_axis(
        op, axis, size, k, s, d, p, ceil_mode, pooling).out
        for axis, size, k, s, d, p in zip(("height", "width"), x.shape[2:], kernel, stride,
                                          dilation, pads)]


def conv2d_meta(x: TensorMeta, weight: TensorMeta, bias: TensorMeta | None, stride: Any,
                padding: Any, dilation: Any, groups: int) -> TensorMeta:
    op = "vision::conv2d"
    _check_4d(op, "x", x, "(N, C, H, W)")
    _check_4d(op, "weight", weight, "(C_out, C_in / groups, kh, kw)")
    _check_dtype(op, "weight", weight, x.dtype)
    c_out, c_group, kh, kw = weight.shape
    if None in weight.shape:
        raise ValueError(f"{op}: the shape of 'weight' must be known, got {weight.shape}")
    if groups < 1 or c_out % groups:
        raise ValueError(f"{op}: attribute 'groups' must be a positive divisor of the "
                         f"weight's {c_out} output channels, got {groups}")
    if x.shape[1] is not None and x.shape[1] != c_group * groups:
        raise ValueError(f"{op}: input 'x' has {x.shape[1]} channels, the weight of shape "
                         f"{weight.shape} with groups={groups} takes {c_group * groups}")
    if bias is not None:
        _check_dtype(op, "bias", bias, x.dtype)
        if bias.shape != [c_out]:
            raise ValueError(f"{op}: input 'bias' must have shape [{c_out}] (one per output "
                             f"channel), got {bias.shape}")
    if None in x.shape[2:]:
        hw = _out_hw(op, x, (kh, kw), win.pair(op, "stride", stride, 1),
                     win.pair(op, "dilation", dilation, 1), win.paddings(op, padding))
    else:
        g = K.conv_geometry(op, x.shape[2:], (kh, kw), stride, padding, dilation)
        hw = [g.h.out, g.w.out]
    return TensorMeta([x.shape[0], c_out, *hw], x.dtype)


def _pool_meta(op: str, x: TensorMeta, kernel_size: Any, stride: Any, padding: Any,
               ceil_mode: bool) -> list[int | None]:
    _check_4d(op, "x", x, "(N, C, H, W)")
    if None in x.shape[2:]:
        kernel = win.pair(op, "kernel_size", kernel_size, 1)
        strides = kernel if stride is None else win.pair(op, "stride", stride, 1)
        hw = _out_hw(op, x, kernel, strides, (1, 1), win.paddings(op, padding), ceil_mode,
                     pooling=True)
    else:
        g = K.pool_geometry(op, x.shape[2:], kernel_size, stride, padding, ceil_mode)
        hw = [g.h.out, g.w.out]
    return [*x.shape[:2], *hw]


def max_pool2d_meta(x: TensorMeta, kernel_size: Any, stride: Any, padding: Any,
                    ceil_mode: bool) -> tuple[TensorMeta, TensorMeta]:
    shape = _pool_meta("vision::max_pool2d", x, kernel_size, stride, padding, ceil_mode)
    return TensorMeta(shape, x.dtype), TensorMeta(shape, "int64")


def avg_pool2d_meta(x: TensorMeta, kernel_size: Any, stride: Any, padding: Any,
                    ceil_mode: bool, exclusive: bool, divisor_override: Any) -> TensorMeta:
    op = "vision::avg_pool2d"
    if divisor_override is not None and (
            not isinstance(divisor_override, int) or isinstance(divisor_override, bool)
            or divisor_override < 1):
        raise ValueError(f"{op}: attribute 'divisor_override' must be None or a positive "
                         f"int, got {divisor_override!r}")
    return TensorMeta(_pool_meta(op, x, kernel_size, stride, padding, ceil_mode), x.dtype)


def _check_out_grad(op: str, name: str, given: TensorMeta, expected: TensorMeta) -> None:
    """A backward op's output gradient must have its forward output's shape and dtype."""
    fits = given.ndim == expected.ndim and all(
        a is None or b is None or a == b for a, b in zip(given.shape, expected.shape))
    if not fits or given.dtype != expected.dtype:
        raise ValueError(f"{op}: input '{name}' must have the forward output's shape "
                         f"{expected.shape} and dtype {expected.dtype.name}, got "
                         f"{given.shape} {given.dtype.name}")


_CHECKED_SIGNATURES = 1024   # remembered per op; more distinct calls start over


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _checked(meta: Callable[..., Any], kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` behind `meta`'s checks, run once per distinct input shapes, dtypes and
    attributes: eager mode calls a Python kernel first and the meta function only to
    check its results, so without this bad input would fail inside numpy."""
    passed: set[tuple] = set()

    @wraps(kernel)
    def run(*arrays: Any, **attrs: Any) -> Any:
        signature = (tuple(None if a is None else (a.shape, a.dtype) for a in arrays),
                     tuple((k, _hashable(v)) for k, v in attrs.items()))
        if signature not in passed:
            meta(*[None if a is None else TensorMeta(a.shape, a.dtype.name) for a in arrays],
                 **attrs)
            if len(passed) >= _CHECKED_SIGNATURES:
                passed.clear()
            passed.add(signature)
        return kernel(*arrays, **attrs)
    return run


def _numpy_kernels(op, kernel: Callable[..., Any]) -> None:
    """Register `kernel` as the op's float32 and float64 kernel, behind its meta checks."""
    op.kernel(*FLOATS)(_checked(op.meta_fn, kernel))


# -- the ops --------------------------------------------------------------------------------

def _register_conv2d(registry) -> None:
    conv2d = registry.define(
        "vision::conv2d", inputs=["x", "weight", "bias?"], outputs=["out"],
        attrs=CONV_ATTRS, meta=conv2d_meta,
        doc="2-D convolution (cross-correlation) of NCHW x with weight (C_out, C_in / groups, "
            "kh, kw), plus an optional bias (C_out,); stride, padding ('SAME', 'VALID', int, "
            "(pad_h, pad_w) or (top, bottom, left, right)), dilation as in Paddle.")
    _numpy_kernels(conv2d, K.conv2d_forward)

    def conv2d_grad_meta(x, weight, dout, **attrs):
        _check_out_grad("vision::conv2d_grad", "dout", dout,
                        conv2d_meta(x, weight, None, **attrs))
        return x, weight, TensorMeta([weight.shape[0]], x.dtype)

    conv2d_grad = registry.define(
        "vision::conv2d_grad", inputs=["x", "weight", "dout"],
        outputs=["dx", "dweight", "dbias"], attrs=CONV_ATTRS, meta=conv2d_grad_meta,
        doc="Backward of vision::conv2d: the gradients of x, weight and a bias.")
    _numpy_kernels(conv2d_grad, K.conv2d_backward)
    add = registry.get("fastop::add")
    full_like = registry.get("fastop::full_like")

    @conv2d.grad(needs=("x", "weight", "bias"), reads={"x": ("weight",), "weight": ("x",)})
    def conv2d_grad_rule(x, weight, bias, dout, **attrs):
        dx, dweight, dbias = conv2d_grad(x, weight, dout, **attrs)
        return dx, dweight, None if bias is None else dbias

    # conv2d_grad is bilinear: dx in (weight, dout), dweight in (x, dout), dbias in dout.
    # Each term's adjoint is a convolution or one of conv2d_grad's own outputs.
    @conv2d_grad.grad(needs=("x", "weight", "dout"), materialize_grads=False,
                      reads={"x": ("dout",), "weight": ("dout",), "dout": ("x", "weight")})
    def conv2d_grad_grad_rule(x, weight, dout, g_dx, g_dweight, g_dbias, **attrs):
        gx = gw = gdout = None
        if g_dx is not None:
            gw = conv2d_grad(g_dx, weight, dout, **attrs)[1]
            gdout = conv2d(g_dx, weight, None, **attrs)
        if g_dweight is not None or g_dbias is not None:
            if g_dweight is None:
                g_dweight = full_like(weight, fill_value=0.0)
            else:
                gx = conv2d_grad(x, g_dweight, dout, **attrs)[0]
            term = conv2d(x, g_dweight, g_dbias, **attrs)
            gdout = term if gdout is None else add(gdout, term)
        return gx, gw, gdout


def _register_pools(registry) -> None:
    max_pool2d = registry.define(
        "vision::max_pool2d", inputs=["x"], outputs=["out", "mask"], attrs=POOL_ATTRS,
        meta=max_pool2d_meta,
        doc="Max pooling of NCHW x; 'mask' is the int64 flat index of each maximum in its "
            "input plane (Paddle's return_mask), which takes no gradient. stride defaults "
            "to kernel_size; padding counts as -inf; ceil_mode as in PyTorch.")
    _numpy_kernels(max_pool2d, K.max_pool2d_forward)

    def max_pool2d_grad_meta(x, mask, dout, **attrs):
        out, expected_mask = max_pool2d_meta(x, **attrs)
        _check_out_grad("vision::max_pool2d_grad", "mask", mask, expected_mask)
        _check_out_grad("vision::max_pool2d_grad", "dout", dout, out)
        return x

    max_pool2d_grad = registry.define(
        "vision::max_pool2d_grad", inputs=["x", "mask", "dout"], outputs=["dx"],
        attrs=POOL_ATTRS, meta=max_pool2d_grad_meta, differentiable=["dout"],
        doc="Backward of vision::max_pool2d: dout scattered to the positions in mask.")
    _numpy_kernels(max_pool2d_grad, K.max_pool2d_backward)

    # materialize_grads=False: 'mask' is int64, so it never gets a gradient (autograd
    # tracks float outputs only) and the rule must not be handed zeros for it.
    @max_pool2d.grad(needs=("x", "mask"), materialize_grads=False, reads={"x": ("mask",)})
    def max_pool2d_grad_rule(x, mask, dout, dmask, **attrs):
        return (None if dout is None else max_pool2d_grad(x, mask, dout, **attrs),)

    avg_pool2d = registry.define(
        "vision::avg_pool2d", inputs=["x"], outputs=["out"], attrs=AVG_POOL_ATTRS,
        meta=avg_pool2d_meta,
        doc="Average pooling of NCHW x: exclusive=True (Paddle's default) divides by the "
            "window's elements inside the input, False by the window size within the "
            "padding; divisor_override replaces both. stride defaults to kernel_size.")
    _numpy_kernels(avg_pool2d, K.avg_pool2d_forward)

    def avg_pool2d_grad_meta(x, dout, **attrs):
        _check_out_grad("vision::avg_pool2d_grad", "dout", dout, avg_pool2d_meta(x, **attrs))
        return x

    avg_pool2d_grad = registry.define(
        "vision::avg_pool2d_grad", inputs=["x", "dout"], outputs=["dx"],
        attrs=AVG_POOL_ATTRS, meta=avg_pool2d_grad_meta, differentiable=["dout"],
        doc="Backward of vision::avg_pool2d: each window's dout / divisor spread over it.")
    _numpy_kernels(avg_pool2d_grad, K.avg_pool2d_backward)

    @avg_pool2d.grad(needs=("x",), reads={})
    def avg_pool2d_grad_rule(x, dout, **attrs):
        return (avg_pool2d_grad(x, dout, **attrs),)

    # avg_pool2d_grad is linear in dout, and its adjoint is avg_pool2d itself
    @avg_pool2d_grad.grad(reads={})
    def avg_pool2d_grad_grad_rule(g_dx, **attrs):
        return None, avg_pool2d(g_dx, **attrs)


@fastop.hookimpl
def fastop_register_ops(registry) -> None:
    _register_conv2d(registry)
    _register_pools(registry)
