"""The plugin module named by the ``fastop`` entry point: defines the ``vision`` namespace.

Each forward op has numpy kernels and a composite gradient rule that calls a backward op
of its own (``conv2d_grad``, ``max_pool2d_grad``, ``avg_pool2d_grad``: Paddle's split),
so gradients run through the registry in eager and static mode alike. ``conv2d_grad`` and
``avg_pool2d_grad`` have gradient rules too (they are linear in the output gradient), so
convolution and average pooling can be differentiated twice.
"""
from __future__ import annotations

from typing import Any

import numpy as np

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


# -- meta functions: shapes and dtypes, checked. The registry runs them before a kernel
# (eager calls: once per input signature, memoized) and as a static graph is built; the
# kernels trust their input.

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


# -- the ops --------------------------------------------------------------------------------

def _register_conv2d(registry) -> None:
    conv2d = registry.define(
        "vision::conv2d", inputs=["x", "weight", "bias?"], outputs=["out"],
        attrs=CONV_ATTRS, meta=conv2d_meta,
        doc="2-D convolution (cross-correlation) of NCHW x with weight (C_out, C_in / groups, "
            "kh, kw), plus an optional bias (C_out,); stride, padding ('SAME', 'VALID', int, "
            "(pad_h, pad_w) or (top, bottom, left, right)), dilation as in Paddle.")
    conv2d.kernel(*FLOATS)(K.conv2d_forward)

    def conv2d_grad_meta(x, weight, dout, **attrs):
        _check_out_grad("vision::conv2d_grad", "dout", dout,
                        conv2d_meta(x, weight, None, **attrs))
        return x, weight, TensorMeta([weight.shape[0]], x.dtype)

    conv2d_grad = registry.define(
        "vision::conv2d_grad", inputs=["x", "weight", "dout"],
        outputs=["dx", "dweight", "dbias"], attrs=CONV_ATTRS, meta=conv2d_grad_meta,
        doc="Backward of vision::conv2d: the gradients of x, weight and a bias.")
    conv2d_grad.kernel(*FLOATS)(K.conv2d_backward)
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
    max_pool2d.kernel(*FLOATS)(K.max_pool2d_forward)

    def max_pool2d_grad_meta(x, mask, dout, **attrs):
        out, expected_mask = max_pool2d_meta(x, **attrs)
        _check_out_grad("vision::max_pool2d_grad", "mask", mask, expected_mask)
        _check_out_grad("vision::max_pool2d_grad", "dout", dout, out)
        return x

    max_pool2d_grad = registry.define(
        "vision::max_pool2d_grad", inputs=["x", "mask", "dout"], outputs=["dx"],
        attrs=POOL_ATTRS, meta=max_pool2d_grad_meta, differentiable=["dout"],
        doc="Backward of vision::max_pool2d: dout scattered to the positions in mask.")
    max_pool2d_grad.kernel(*FLOATS)(K.max_pool2d_backward)

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
    avg_pool2d.kernel(*FLOATS)(K.avg_pool2d_forward)

    def avg_pool2d_grad_meta(x, dout, **attrs):
        _check_out_grad("vision::avg_pool2d_grad", "dout", dout, avg_pool2d_meta(x, **attrs))
        return x

    avg_pool2d_grad = registry.define(
        "vision::avg_pool2d_grad", inputs=["x", "dout"], outputs=["dx"],
        attrs=AVG_POOL_ATTRS, meta=avg_pool2d_grad_meta, differentiable=["dout"],
        doc="Backward of vision::avg_pool2d: each window's dout / divisor spread over it.")
    avg_pool2d_grad.kernel(*FLOATS)(K.avg_pool2d_backward)

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


@fastop.hookimpl
def fastop_op_samples() -> dict[str, list[Any]]:
    """Inputs for fastop.testing.opcheck (fastop's test suite checks every op with
    them): float32 and float64, strides, paddings in each of Paddle's forms, dilation,
    groups (depthwise too), ceil mode and the average pooling's divisors. Max pooling
    gets distinct values 0.1 apart, so no maximum changes place within the finite
    differences' step. Small shapes: the double-gradient check differentiates every
    element."""
    from fastop._core.storage import from_numpy
    from fastop.ops import registry
    from fastop.testing import Sample

    rng = np.random.default_rng(0)

    def normal(*shape: int, dtype: str = "float64") -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    def distinct(*shape: int, dtype: str = "float64") -> np.ndarray:
        return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(dtype)

    def forward(name: str, inputs: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        """The forward op's outputs (run whatever the mode: no autograd)."""
        op = registry.get(name)
        outs = op.invoke([None if x is None else from_numpy(x) for x in inputs],
                         op.check_attrs(attrs))
        return [np.asarray(o) for o in outs]

    f32 = "float32"
    conv = [  # x, weight, bias, attributes
        (normal(2, 2, 4, 4), normal(3, 2, 3, 3), normal(3), dict(padding=1)),
        (normal(1, 4, 5, 4, dtype=f32), normal(4, 2, 3, 2, dtype=f32), None,
         dict(stride=2, padding=(1, 0), groups=2)),
        (normal(1, 2, 6, 5), normal(2, 2, 2, 2), normal(2),
         dict(stride=(1, 2), dilation=2, padding=[1, 2, 0, 1])),
        (normal(1, 3, 4, 5, dtype=f32), normal(3, 1, 2, 2, dtype=f32), normal(3, dtype=f32),
         dict(stride=2, padding="SAME", groups=3)),
    ]
    pools = [  # x, attributes shared by both poolings, average pooling's own
        (distinct(2, 3, 4, 4), dict(kernel_size=2), {}),
        (distinct(1, 2, 5, 7, dtype=f32), dict(kernel_size=3, stride=2, padding=1,
                                              ceil_mode=True), dict(exclusive=False)),
        (distinct(2, 2, 4, 5), dict(kernel_size=(3, 2), stride=1, padding=(1, 0)),
         dict(divisor_override=4)),
    ]
    samples: dict[str, list[Any]] = {name: [] for name in (
        "conv2d", "conv2d_grad", "max_pool2d", "max_pool2d_grad", "avg_pool2d",
        "avg_pool2d_grad")}
    for x, weight, bias, attrs in conv:
        samples["conv2d"].append(Sample(x, weight, bias, **attrs))
        (out,) = forward("vision::conv2d", [x, weight, None], attrs)
        samples["conv2d_grad"].append(
            Sample(x, weight, normal(*out.shape, dtype=x.dtype.name), **attrs))
    for x, attrs, average in pools:
        samples["max_pool2d"].append(Sample(x, **attrs))
        out, mask = forward("vision::max_pool2d", [x], attrs)
        samples["max_pool2d_grad"].append(
            Sample(x, mask, normal(*out.shape, dtype=x.dtype.name), **attrs))
        samples["avg_pool2d"].append(Sample(x, **attrs, **average))
        samples["avg_pool2d_grad"].append(
            Sample(x, normal(*out.shape, dtype=x.dtype.name), **attrs, **average))
    return {f"vision::{name}": given for name, given in samples.items()}
