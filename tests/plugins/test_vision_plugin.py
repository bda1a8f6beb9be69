"""The fastop-vision plugin package, tested installed, through its entry point.

Every op against a naive loop implementation (forward and backward) in float32 and
float64, its gradient rule against finite differences in float64, eager against static,
and against PyTorch when it is installed. These tests fail (they do not skip) when the
package is not installed: `make test` installs it.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastop
import fastop_vision
from fastop import nn, static
from fastop._core.storage import from_numpy
from fastop.ops.checking import check_grad_rule
from fastop.plugins import loaded_plugins, op_samples
from fastop.testing import opcheck
from fastop_vision import _kernels

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-10, atol=1e-12)}
OPS = ["conv2d", "conv2d_grad", "max_pool2d", "max_pool2d_grad", "avg_pool2d",
       "avg_pool2d_grad"]


# -- naive references: one output element (and its gradient) at a time -------------------

def _pads(padding):
    if isinstance(padding, int):
        return padding, padding, padding, padding
    if len(padding) == 2:
        return padding[0], padding[0], padding[1], padding[1]
    return tuple(padding)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def ref_conv2d(x, w, b, dy=None, stride=1, padding=0, dilation=1, groups=1):
    """(out, dx, dw, db) by loops over output elements (grads None without dy)."""
    (sh, sw), (dh, dw_), (pt, pb, pl, pr) = _pair(stride), _pair(dilation), _pads(padding)
    n, c, h, w_ = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w_ + pl + pr - dw_ * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), x.dtype)
    dxp, dw, db = np.zeros_like(xp), np.zeros_like(w), np.zeros(o, x.dtype)
    per_group = o // groups
    for i in range(n):
        for k in range(o):
            cs = slice(k // per_group * cg, (k // per_group + 1) * cg)
            for r in range(oh):
                for s in range(ow):
                    rows = slice(r * sh, r * sh + dh * (kh - 1) + 1, dh)
                    cols = slice(s * sw, s * sw + dw_ * (kw - 1) + 1, dw_)
                    out[i, k, r, s] = (xp[i, cs, rows, cols] * w[k]).sum() \
                        + (0 if b is None else b[k])
                    if dy is not None:
                        g = dy[i, k, r, s]
                        dxp[i, cs, rows, cols] += g * w[k]
                        dw[k] += g * xp[i, cs, rows, cols]
                        db[k] += g
    if dy is None:
        return out, None, None, None
    return out, dxp[:, :, pt:pt + h, pl:pl + w_], dw, db


def _pool_windows(shape, kernel_size, stride, padding, ceil_mode):
    """Per output element: (r, s, row range, col range) clipped to the input, plus the
    unclipped ends within the padding (for count_include_pad); PyTorch's ceil rule."""
    (kh, kw) = _pair(kernel_size)
    (sh, sw) = _pair(stride if stride is not None else kernel_size)
    pt, pb, pl, pr = _pads(padding)
    h, w = shape[2:]

    def out_size(size, k, s, before, after):
        span = size + before + after - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + before:
            out -= 1
        return out
    oh, ow = out_size(h, kh, sh, pt, pb), out_size(w, kw, sw, pl, pr)
    for r in range(oh):
        for s in range(ow):
            r0, c0 = r * sh - pt, s * sw - pl
            full = (min(r0 + kh, h + pb) - r0) * (min(c0 + kw, w + pr) - c0)
            yield r, s, oh, ow, (max(r0, 0), min(r0 + kh, h)), (max(c0, 0), min(c0 + kw, w)), full


def ref_max_pool2d(x, dy=None, kernel_size=2, stride=None, padding=0, ceil_mode=False):
    windows = list(_pool_windows(x.shape, kernel_size, stride, padding, ceil_mode))
    oh, ow = windows[0][2:4]
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow), x.dtype)
    mask = np.zeros((n, c, oh, ow), np.int64)
    dx = np.zeros_like(x)
    for i in range(n):
        for k in range(c):
            for r, s, _, _, (r0, r1), (c0, c1), _ in windows:
                patch = x[i, k, r0:r1, c0:c1]
                a, b = np.unravel_index(np.argmax(patch), patch.shape)
                out[i, k, r, s] = patch[a, b]
                mask[i, k, r, s] = (r0 + a) * w + c0 + b
                if dy is not None:
                    dx[i, k, r0 + a, c0 + b] += dy[i, k, r, s]
    return out, mask, dx


def ref_avg_pool2d(x, dy=None, kernel_size=2, stride=None, padding=0, ceil_mode=False,
                   exclusive=True, divisor_override=None):
    windows = list(_pool_windows(x.shape, kernel_size, stride, padding, ceil_mode))
    oh, ow = windows[0][2:4]
    n, c = x.shape[:2]
    out = np.zeros((n, c, oh, ow), x.dtype)
    dx = np.zeros_like(x)
    for r, s, _, _, (r0, r1), (c0, c1), full in windows:
        divisor = divisor_override or ((r1 - r0) * (c1 - c0) if exclusive else full)
        out[:, :, r, s] = x[:, :, r0:r1, c0:c1].sum(axis=(2, 3)) / divisor
        if dy is not None:
            dx[:, :, r0:r1, c0:c1] += dy[:, :, r, s, None, None] / divisor
    return out, dx


# -- cases -------------------------------------------------------------------------------

# (x shape, weight shape, attrs): both input layouts (batch-last: short output rows, a
# longer batch), strides, dilation, groups (and depthwise), asymmetric and string
# paddings, non-square kernels
CONV_CASES = [
    ((3, 1, 8, 8), (4, 1, 3, 3), dict(padding=1)),
    ((6, 2, 4, 4), (4, 2, 3, 3), dict(padding=1)),
    ((5, 2, 6, 5), (4, 1, 3, 2), dict(stride=2, padding=(1, 0), groups=2)),
    ((2, 4, 9, 7), (6, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
    ((2, 2, 10, 9), (3, 2, 3, 2), dict(dilation=2, padding=(1, 2))),
    ((1, 3, 6, 6), (3, 1, 5, 5), dict(groups=3)),
    ((2, 2, 7, 8), (4, 2, 2, 3), dict(stride=(2, 1), padding=[0, 1, 2, 1])),
    ((2, 3, 7, 6), (2, 3, 3, 3), dict(stride=2, padding="SAME")),
    ((2, 3, 7, 6), (2, 3, 4, 2), dict(padding="valid", dilation=(1, 2))),
    ((1, 2, 5, 5), (2, 2, 1, 1), dict()),
]
POOL_CASES = [
    ((2, 3, 8, 8), dict(kernel_size=2)),
    ((2, 2, 7, 9), dict(kernel_size=3, stride=2, padding=1)),
    ((1, 2, 6, 7), dict(kernel_size=3, stride=1, padding=1)),
    ((2, 2, 7, 9), dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), ceil_mode=True)),
    ((1, 3, 5, 5), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
    ((1, 2, 5, 6), dict(kernel_size=[2, 3], stride=1, padding=[1, 0, 0, 1])),
]
AVG_MODES = [dict(), dict(exclusive=False), dict(divisor_override=3)]


def _case_id(case):
    return "-".join(f"{k}={v}" for k, v in case[-1].items()) or "default"


def _conv_inputs(x_shape, w_shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    return x, w, b


def _run(name, inputs, attrs):
    op = fastop.ops.registry.get(f"vision::{name}")
    return [np.asarray(t) for t in op.invoke([None if a is None else from_numpy(a)
                                              for a in inputs], op.check_attrs(attrs))]


# -- installation ------------------------------------------------------------------------

def test_installed_and_discovered_through_the_entry_point():
    info = next((p for p in loaded_plugins() if p.name == "fastop-vision"), None)
    assert info is not None, "fastop-vision is not installed (make install installs it)"
    assert info.version == fastop_vision.__version__ == "0.1.0"
    assert info.module == "fastop_vision.plugin"
    assert sorted(info.ops) == sorted(f"vision::{n}" for n in OPS)
    op = fastop.ops.vision.conv2d
    assert op.plugin == "fastop-vision" and op.dtypes == ["float32", "float64"]
    assert [str(a) for a in op.inputs] == ["x", "weight", "bias?"]


def test_the_kernels_are_registered_as_they_are_and_the_registry_checks_their_input():
    """No meta re-check inside the kernels: the registry runs the meta function before
    a Python kernel (once per input signature), so bad input never reaches numpy."""
    pairs = {"conv2d": _kernels.conv2d_forward, "conv2d_grad": _kernels.conv2d_backward,
             "max_pool2d": _kernels.max_pool2d_forward,
             "max_pool2d_grad": _kernels.max_pool2d_backward,
             "avg_pool2d": _kernels.avg_pool2d_forward,
             "avg_pool2d_grad": _kernels.avg_pool2d_backward}
    for name, kernel in pairs.items():
        op = fastop.ops.registry.get(f"vision::{name}")
        assert op.kernels == {"float32": kernel, "float64": kernel}, name
    x = fastop.to_tensor(np.ones((2, 3, 5, 5), np.float32))
    w = fastop.to_tensor(np.ones((4, 2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="input 'x' has 3 channels") as caught:
        fastop.ops.vision.conv2d(x, w)
    assert "raised inside the meta function of op 'vision::conv2d'" in caught.value.__notes__


# -- samples for fastop.testing.opcheck ------------------------------------------------------

def _vision_samples(name):
    return op_samples()[f"vision::{name}"]


def test_conv_samples_cover_the_attributes():
    for name in ("conv2d", "conv2d_grad"):
        samples = _vision_samples(name)
        attrs = [s.attrs for s in samples]
        paddings = {type(a.get("padding", 0)).__name__ for a in attrs}
        assert paddings >= {"int", "tuple", "list", "str"}, name     # Paddle's forms
        assert any(a.get("stride", 1) != 1 for a in attrs), name
        assert any(a.get("dilation", 1) != 1 for a in attrs), name
        assert any(a.get("groups", 1) > 1 for a in attrs), name
        # depthwise: as many groups as input channels
        assert any(a.get("groups", 1) == s.inputs[0].shape[1] > 1
                   for s, a in zip(samples, attrs)), name
    assert any(s.inputs[2] is None for s in _vision_samples("conv2d"))   # no bias


def test_pool_samples_cover_the_attributes_and_keep_maxima_apart():
    avg = [s.attrs for s in _vision_samples("avg_pool2d")]
    assert any(a.get("ceil_mode") for a in avg) and any(a.get("padding") for a in avg)
    assert any(a.get("exclusive") is False for a in avg)
    assert any(a.get("divisor_override") for a in avg)
    for sample in _vision_samples("max_pool2d"):
        values = np.sort(sample.inputs[0].astype(np.float64).ravel())
        # a maximum changes place only if two values are within the finite differences'
        # step (1e-6) of each other
        assert np.diff(values).min() > 0.05
    for sample in _vision_samples("max_pool2d_grad"):
        x, mask, dout = sample.inputs
        out, want_mask = _run("max_pool2d", [x], sample.attrs)
        np.testing.assert_array_equal(mask, want_mask)
        assert dout.shape == out.shape and dout.dtype == x.dtype


def test_opcheck_skips_the_double_gradient_of_max_pooling_and_checks_the_rest():
    report = opcheck("vision::max_pool2d", _vision_samples("max_pool2d"))
    assert report == {"meta": "ok", "gradient": "ok", "reads": "ok",
                      "double_grad": "skipped: the gradient of input 'x' is not "
                                     "differentiable again (the rule calls "
                                     "vision::max_pool2d_grad, which has no gradient rule)",
                      "eager_static": "ok"}
    report = opcheck("vision::avg_pool2d", _vision_samples("avg_pool2d"))
    assert set(report.values()) == {"ok"}


# -- forward and backward kernels against the loops -----------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
def test_conv2d_matches_the_loops(case, dtype):
    x_shape, w_shape, attrs = case
    x, w, b = _conv_inputs(x_shape, w_shape, dtype)
    (got,) = _run("conv2d", [x, w, b], attrs)
    dy = np.random.default_rng(1).standard_normal(got.shape).astype(dtype)
    out, dx, dw, db = ref_conv2d(x.astype(float), w.astype(float), b.astype(float),
                                 dy.astype(float), **_explicit(attrs, x_shape, w_shape))
    np.testing.assert_allclose(got, out, **TOL[dtype])
    (no_bias,) = _run("conv2d", [x, w, None], attrs)
    np.testing.assert_allclose(no_bias, out - b.reshape(-1, 1, 1), **TOL[dtype])
    grads = _run("conv2d_grad", [x, w, dy], attrs)
    assert [g.dtype for g in grads] == [np.dtype(dtype)] * 3
    for g, want in zip(grads, (dx, dw, db)):
        np.testing.assert_allclose(g, want, **TOL[dtype])


def _explicit(attrs, x_shape, w_shape):
    """The loops take numeric padding: resolve 'SAME'/'VALID' as Paddle does (for SAME
    the dilation is 1)."""
    padding = attrs.get("padding", 0)
    if not isinstance(padding, str):
        return attrs
    if padding.lower() == "valid":
        return {**attrs, "padding": 0}
    pads = []
    for size, k, s in zip(x_shape[2:], w_shape[2:], _pair(attrs.get("stride", 1))):
        total = max((-(-size // s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return {**attrs, "padding": pads, "dilation": 1}


def test_both_input_layouts_are_covered():
    layouts = {_kernels.conv_planes(x, _kernels.conv_geometry(
        "t", x[2:], w[2:], a.get("stride", 1), a.get("padding", 0),
        a.get("dilation", 1))).batch_last for x, w, a in CONV_CASES}
    assert layouts == {True, False}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", POOL_CASES, ids=_case_id)
def test_max_pool2d_matches_the_loops(case, dtype):
    shape, attrs = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    out, mask = _run("max_pool2d", [x], attrs)
    assert mask.dtype == np.int64
    dy = rng.standard_normal(out.shape).astype(dtype)
    want, want_mask, want_dx = ref_max_pool2d(x, dy, **attrs)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(mask, want_mask)
    (dx,) = _run("max_pool2d_grad", [x, mask, dy], attrs)
    np.testing.assert_allclose(dx, want_dx, **TOL[dtype])


def test_max_pool2d_ties_nan_and_all_minus_inf():
    x = np.array([[[[1.0, 1.0, -np.inf, -np.inf],
                    [0.0, 1.0, -np.inf, -np.inf],
                    [np.nan, 2.0, 5.0, 5.0],
                    [3.0, np.nan, 5.0, 4.0]]]])
    out, mask = _run("max_pool2d", [x], dict(kernel_size=2))
    # first maximum on ties; NaN wins (the last NaN, as PyTorch); an all -inf window
    # points at its first element
    np.testing.assert_array_equal(out[0, 0], [[1.0, -np.inf], [np.nan, 5.0]])
    np.testing.assert_array_equal(mask[0, 0], [[0, 2], [13, 10]])
    # with padding, an all -inf window still points inside the input
    out, mask = _run("max_pool2d", [np.full((1, 1, 3, 3), -np.inf)],
                     dict(kernel_size=2, padding=1))
    assert ((mask >= 0) & (mask < 9)).all()
    np.testing.assert_array_equal(mask[0, 0], [[0, 1], [3, 4]])


@pytest.mark.parametrize("mode", AVG_MODES, ids=lambda m: _case_id((m,)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", POOL_CASES, ids=_case_id)
def test_avg_pool2d_matches_the_loops(case, dtype, mode):
    shape, attrs = case
    attrs = {**attrs, **mode}
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    (out,) = _run("avg_pool2d", [x], attrs)
    dy = rng.standard_normal(out.shape).astype(dtype)
    want, want_dx = ref_avg_pool2d(x.astype(float), dy.astype(float), **attrs)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, want, **TOL[dtype])
    (dx,) = _run("avg_pool2d_grad", [x, dy], attrs)
    assert dx.dtype == dtype
    np.testing.assert_allclose(dx, want_dx, **TOL[dtype])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), groups=st.integers(1, 2), c_per=st.integers(1, 2),
       o_per=st.integers(1, 2), size=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       padding=st.tuples(*[st.integers(0, 2)] * 4))
def test_conv2d_property_matches_the_loops(n, groups, c_per, o_per, size, kernel, stride,
                                           dilation, padding):
    extent = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if size[0] + padding[0] + padding[1] < extent[0] or \
            size[1] + padding[2] + padding[3] < extent[1]:
        return          # no window fits (refused: see the error tests)
    x, w, b = _conv_inputs((n, c_per * groups, *size), (o_per * groups, c_per, *kernel),
                           "float64", seed=n + 7 * size[0])
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    (out,) = _run("conv2d", [x, w, b], attrs)
    dy = np.cos(np.arange(out.size)).reshape(out.shape)
    want = ref_conv2d(x, w, b, dy, **attrs)
    np.testing.assert_allclose(out, want[0], **TOL["float64"])
    for got, ref in zip(_run("conv2d_grad", [x, w, dy], attrs), want[1:]):
        np.testing.assert_allclose(got, ref, **TOL["float64"])


@settings(max_examples=40, deadline=None)
@given(size=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       pad=st.tuples(st.integers(0, 1), st.integers(0, 1)), ceil_mode=st.booleans(),
       exclusive=st.booleans())
def test_pools_property_match_the_loops(size, kernel, stride, pad, ceil_mode, exclusive):
    if any(p > k // 2 for p, k in zip(pad, kernel)) or \
            any(s + 2 * p < k for s, p, k in zip(size, pad, kernel)):
        return          # refused (see the error tests)
    x = np.sin(np.arange(2 * 2 * size[0] * size[1]) * 1.7).reshape(2, 2, *size)
    attrs = dict(kernel_size=kernel, stride=stride, padding=pad, ceil_mode=ceil_mode)
    out, mask = _run("max_pool2d", [x], attrs)
    dy = np.cos(np.arange(out.size)).reshape(out.shape)
    want, want_mask, want_dx = ref_max_pool2d(x, dy, **attrs)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(_run("max_pool2d_grad", [x, mask, dy], attrs)[0], want_dx)
    attrs["exclusive"] = exclusive
    want, want_dx = ref_avg_pool2d(x, dy, **attrs)
    np.testing.assert_allclose(_run("avg_pool2d", [x], attrs)[0], want, **TOL["float64"])
    np.testing.assert_allclose(_run("avg_pool2d_grad", [x, dy], attrs)[0], want_dx,
                               **TOL["float64"])


def test_empty_batch_and_strided_inputs():
    w = fastop.to_tensor(np.ones((3, 2, 3, 3)), stop_gradient=False)
    empty = fastop.to_tensor(np.zeros((0, 2, 5, 5)), stop_gradient=False)
    calls = [lambda t: fastop_vision.conv2d(t, w, padding=1),
             lambda t: fastop_vision.max_pool2d(t, 2),
             lambda t: fastop_vision.avg_pool2d(t, 2, padding=1)]
    for call in calls:
        empty.grad = None
        call(empty).sum().backward()
        assert empty.grad.shape == [0, 2, 5, 5]
    # a transposed (non-contiguous) input gives what its contiguous copy gives
    a = np.random.default_rng(19).standard_normal((5, 6, 2, 3))
    strided = fastop.transpose(fastop.to_tensor(a), [3, 2, 0, 1])
    dense = fastop.to_tensor(np.ascontiguousarray(a.transpose(3, 2, 0, 1)))
    for call in calls:
        np.testing.assert_array_equal(call(strided).numpy(), call(dense).numpy())


# -- gradient rules against finite differences (float64) -----------------------------------

@pytest.mark.parametrize("case", CONV_CASES[:6], ids=_case_id)
def test_conv2d_gradient_rule(case):
    x_shape, w_shape, attrs = case
    check_grad_rule("vision::conv2d", list(_conv_inputs(x_shape, w_shape, "float64")), attrs)


@pytest.mark.parametrize("case", CONV_CASES[:3], ids=_case_id)
def test_conv2d_grad_gradient_rule(case):
    """conv2d_grad is differentiable again: all three inputs, and with some of its
    outputs unused (the rule gets None for those)."""
    x_shape, w_shape, attrs = case
    x, w, _ = _conv_inputs(x_shape, w_shape, "float64")
    (out,) = _run("conv2d", [x, w, None], attrs)
    dy = np.random.default_rng(4).standard_normal(out.shape)
    check_grad_rule("vision::conv2d_grad", [x, w, dy], attrs)
    rng = np.random.default_rng(5)
    # dx reads weight and dout, dweight x and dout, dbias dout only (the rule gives None
    # for the rest: no dependence)
    for keep, wrt in enumerate(([1, 2], [0, 2], [2])):
        douts = [rng.standard_normal(s) if k == keep else None
                 for k, s in enumerate((x.shape, w.shape, (w.shape[0],)))]
        check_grad_rule("vision::conv2d_grad", [x, w, dy], attrs, douts=douts, wrt=wrt)


@pytest.mark.parametrize("case", POOL_CASES, ids=_case_id)
def test_pool_gradient_rules(case):
    shape, attrs = case
    # distinct values, far apart compared to eps: the maxima do not move
    x = np.random.default_rng(6).permutation(np.prod(shape)).reshape(shape) * 0.1
    out, _ = _run("max_pool2d", [x], attrs)
    dy = np.random.default_rng(7).standard_normal(out.shape)
    check_grad_rule("vision::max_pool2d", [x], attrs, douts=[dy, None])
    for mode in AVG_MODES:
        check_grad_rule("vision::avg_pool2d", [x.copy()], {**attrs, **mode})
        check_grad_rule("vision::avg_pool2d_grad", [x.copy(), dy.copy()], {**attrs, **mode},
                        wrt=[1])


def test_eager_gradcheck_through_the_functional_forms():
    rng = np.random.default_rng(8)
    x, w, b = (rng.standard_normal(s) for s in ((2, 2, 5, 6), (3, 2, 3, 3), (3,)))

    def net(x, w, b):
        y = fastop_vision.conv2d(x, w, b, stride=2, padding=1)
        return fastop_vision.avg_pool2d(fastop_vision.max_pool2d(y, 2, 1, padding=1), 2,
                                        padding=1, exclusive=False)
    inputs = [fastop.to_tensor(a, stop_gradient=False) for a in (x, w, b)]
    assert fastop.autograd.gradcheck(net, inputs)


def test_the_mask_takes_no_gradient():
    x = fastop.to_tensor(np.random.default_rng(10).standard_normal((1, 2, 4, 4)),
                         stop_gradient=False)
    out, mask = fastop.ops.vision.max_pool2d(x, kernel_size=2)
    assert not out.stop_gradient and mask.stop_gradient and mask.dtype == fastop.int64
    assert fastop.ops.vision.max_pool2d.differentiable_inputs == ("x",)
    (out * 2.0).sum().backward()
    want = np.zeros((1, 2, 16))
    np.put_along_axis(want, mask.numpy().reshape(1, 2, 4), 2.0, axis=2)
    np.testing.assert_array_equal(x.grad.numpy(), want.reshape(1, 2, 4, 4))


# -- eager against static ---------------------------------------------------------------

def _static_run(op_name, arrays, attrs, n_diff, dout_index=0):
    """Run op on data variables in a Program and d(out[dout_index] . dout)/d(first
    n_diff inputs) with static.gradients; returns (outputs, grads, dout)."""
    op = fastop.ops.registry.get(f"vision::{op_name}")
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xs = [static.data(f"in{i}", list(a.shape), str(a.dtype))
                  for i, a in enumerate(arrays)]
            for v in xs[:n_diff]:
                v.stop_gradient = False
            outs = op(*xs, **attrs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            target = outs[dout_index]
            dout = static.data("dout", target.shape, str(arrays[0].dtype))
            grads = static.gradients([target], xs[:n_diff], target_gradients=[dout])
        rng = np.random.default_rng(11)
        dout_value = rng.standard_normal(target.shape).astype(arrays[0].dtype)
        feed = {f"in{i}": a for i, a in enumerate(arrays)}
        feed["dout"] = dout_value
        result = static.Executor().run(main, feed=feed, fetch_list=outs + grads)
    finally:
        fastop.disable_static()
    return result[:len(outs)], result[len(outs):], dout_value


def _eager_run(op_name, arrays, attrs, n_diff, dout, dout_index=0):
    op = fastop.ops.registry.get(f"vision::{op_name}")
    xs = [fastop.to_tensor(a, stop_gradient=i >= n_diff) for i, a in enumerate(arrays)]
    outs = op(*xs, **attrs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    (outs[dout_index] * fastop.to_tensor(dout)).sum().backward()
    return [o.numpy() for o in outs], [x.grad.numpy() for x in xs[:n_diff]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, arrays, attrs", [
    ("conv2d", _conv_inputs((2, 4, 7, 7), (4, 2, 3, 3), "float64"),
     dict(stride=2, padding=1, groups=2)),
    ("conv2d", _conv_inputs((2, 1, 8, 8), (3, 1, 3, 3), "float64"), dict(padding=1)),
    ("max_pool2d", [np.random.default_rng(12).standard_normal((2, 3, 7, 7))],
     dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool2d", [np.random.default_rng(13).standard_normal((2, 3, 7, 7))],
     dict(kernel_size=3, stride=2, padding=1, exclusive=False)),
], ids=["conv2d-groups", "conv2d-wide", "max_pool2d", "avg_pool2d"])
def test_static_matches_eager(name, arrays, attrs, dtype):
    arrays = [a.astype(dtype) for a in arrays]
    n_diff = len(arrays)
    outs, grads, dout = _static_run(name, arrays, attrs, n_diff)
    eager_outs, eager_grads = _eager_run(name, arrays, attrs, n_diff, dout)
    for got, want in zip(outs + grads, eager_outs + eager_grads):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **TOL[dtype])


def test_static_program_with_unknown_batch_infers_shapes():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, 3, 9, 9], "float32")
            w = static.data("w", [4, 3, 3, 3], "float32")
            y = fastop.ops.vision.conv2d(x, w, stride=2, padding="SAME")
            out, mask = fastop.ops.vision.max_pool2d(y, kernel_size=2, ceil_mode=True)
            z = fastop.ops.vision.avg_pool2d(out, kernel_size=3, padding=1, stride=1)
        assert y.shape == [None, 4, 5, 5] and out.shape == [None, 4, 3, 3]
        assert mask.dtype == fastop.int64 and z.shape == [None, 4, 3, 3]
    finally:
        fastop.disable_static()


# -- against PyTorch ----------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (comparison only)")


def _symmetric(padding):
    top, bottom, left, right = _pads(padding)
    return top == bottom and left == right


def _torch_padding(x, padding):
    """PyTorch pads symmetrically only: asymmetric paddings pad the input first."""
    import torch.nn.functional as TF
    pt, pb, pl, pr = _pads(padding)
    if _symmetric(padding):
        return x, (pt, pl)
    return TF.pad(x, (pl, pr, pt, pb)), (0, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
def test_conv2d_matches_torch(case, dtype):
    torch = _torch()
    x_shape, w_shape, attrs = case
    attrs = _explicit(attrs, x_shape, w_shape)
    arrays = _conv_inputs(x_shape, w_shape, dtype)
    dy = np.random.default_rng(14).standard_normal(
        _run("conv2d", list(arrays), attrs)[0].shape).astype(dtype)
    fx, fw, fb = (fastop.to_tensor(a, stop_gradient=False) for a in arrays)
    y = fastop_vision.conv2d(fx, fw, fb, **attrs)
    (y * fastop.to_tensor(dy)).sum().backward()
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in arrays)
    padded, pad = _torch_padding(tx, attrs.get("padding", 0))
    ty = torch.nn.functional.conv2d(padded, tw, tb, stride=attrs.get("stride", 1),
                                    padding=pad, dilation=attrs.get("dilation", 1),
                                    groups=attrs.get("groups", 1))
    (ty * torch.tensor(dy)).sum().backward()
    for got, want in ((y, ty), (fx.grad, tx.grad), (fw.grad, tw.grad), (fb.grad, tb.grad)):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", [c for c in POOL_CASES if _symmetric(c[1].get("padding", 0))],
                         ids=_case_id)
def test_pools_match_torch(case, dtype):
    """(PyTorch pools pad symmetrically only.)"""
    torch = _torch()
    TF = torch.nn.functional
    shape, attrs = case
    x = np.random.default_rng(15).standard_normal(shape).astype(dtype)
    pt, _, pl, _ = _pads(attrs.get("padding", 0))
    targs = dict(kernel_size=attrs["kernel_size"], stride=attrs.get("stride"),
                 padding=(pt, pl), ceil_mode=attrs.get("ceil_mode", False))
    fx = fastop.to_tensor(x, stop_gradient=False)
    tx = torch.tensor(x, requires_grad=True)
    out, mask = fastop_vision.max_pool2d(fx, return_mask=True, **attrs)
    tout, tmask = TF.max_pool2d(tx, return_indices=True, **targs)
    dy = np.random.default_rng(16).standard_normal(tuple(tout.shape)).astype(dtype)
    (out * fastop.to_tensor(dy)).sum().backward()
    (tout * torch.tensor(dy)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    np.testing.assert_array_equal(mask.numpy(), tmask.numpy())
    # overlapping windows add up in another order
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), **TOL[dtype])
    for exclusive in (True, False):
        fx = fastop.to_tensor(x, stop_gradient=False)
        tx = torch.tensor(x, requires_grad=True)
        out = fastop_vision.avg_pool2d(fx, exclusive=exclusive, **attrs)
        tout = TF.avg_pool2d(tx, count_include_pad=not exclusive, **targs)
        (out * fastop.to_tensor(dy)).sum().backward()
        (tout * torch.tensor(dy)).sum().backward()
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), **TOL[dtype])
        np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), **TOL[dtype])


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda x, w: fastop.ops.vision.conv2d(x, w, stride=0), ValueError,
     r"vision::conv2d: attribute 'stride' must be at least 1, got 0"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, stride=[1, 2, 3]), TypeError,
     r"vision::conv2d: attribute 'stride' expects an int or a pair of ints"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, dilation=1.5), TypeError,
     r"vision::conv2d: attribute 'dilation' expects an int or a pair"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, padding=-1), ValueError,
     r"vision::conv2d: attribute 'padding' must not be negative, got -1"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, padding="full"), ValueError,
     r"vision::conv2d: attribute 'padding' as a string must be 'SAME' or 'VALID'"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, padding=[1, 2, 3]), TypeError,
     r"vision::conv2d: attribute 'padding' expects .* got \[1, 2, 3\]"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, groups=2), ValueError,
     r"vision::conv2d: input 'x' has 2 channels, the weight of shape \[4, 2, 3, 3\] with "
     r"groups=2 takes 4"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, groups=3), ValueError,
     r"vision::conv2d: attribute 'groups' must be a positive divisor of the weight's 4"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, fastop.zeros([3])), ValueError,
     r"vision::conv2d: input 'bias' must have shape \[4\] .* got \[3\]"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w.astype("float64")), TypeError,
     r"vision::conv2d: input 'weight' has dtype float64, expected float32"),
    (lambda x, w: fastop.ops.vision.conv2d(x.reshape([2, 2, 25]), w), ValueError,
     r"vision::conv2d: input 'x' must be 4-D \(N, C, H, W\), got shape \[2, 2, 25\]"),
    (lambda x, w: fastop.ops.vision.conv2d(x, w, dilation=3), ValueError,
     r"vision::conv2d: the input's height 5 with padding 0\+0 is smaller than the "
     r"kernel's extent 7 \(kernel 3, dilation 3\)"),
    (lambda x, w: fastop.ops.vision.conv2d(x.astype("int64"), w.astype("int64")), TypeError,
     r"vision::conv2d: no kernel for dtype int64"),
    (lambda x, w: fastop.ops.vision.max_pool2d(x, kernel_size=2, padding=2), ValueError,
     r"vision::max_pool2d: padding 2 on the height axis is more than half the kernel "
     r"size 2"),
    (lambda x, w: fastop.ops.vision.max_pool2d(x), TypeError,
     r"vision::max_pool2d: missing attribute 'kernel_size'"),
    (lambda x, w: fastop.ops.vision.avg_pool2d(x, kernel_size=(2, 0)), ValueError,
     r"vision::avg_pool2d: attribute 'kernel_size' must be at least 1"),
    (lambda x, w: fastop.ops.vision.avg_pool2d(x, kernel_size=2, divisor_override=0),
     ValueError, r"vision::avg_pool2d: attribute 'divisor_override' must be None or a "
                 r"positive int, got 0"),
    (lambda x, w: fastop.ops.vision.avg_pool2d(x, kernel_size=6), ValueError,
     r"vision::avg_pool2d: the input's height 5 with padding 0\+0 is smaller than the "
     r"kernel's extent 6"),
    (lambda x, w: fastop_vision.conv2d(x, w, data_format="NHCW"), ValueError,
     r"conv2d: data_format must be 'NCHW' or 'NHWC', got 'NHCW'"),
])
def test_bad_input_names_the_op_and_argument(call, error, message):
    x = fastop.to_tensor(np.ones((2, 2, 5, 5), np.float32))
    w = fastop.to_tensor(np.ones((4, 2, 3, 3), np.float32))
    with pytest.raises(error, match=message):
        call(x, w)
    # everything stays usable
    np.testing.assert_allclose(fastop.ops.vision.conv2d(x, w).numpy(), 18.0)


def test_backward_ops_check_the_output_gradient():
    x = fastop.to_tensor(np.ones((1, 1, 4, 4)))
    w = fastop.to_tensor(np.ones((2, 1, 3, 3)))
    with pytest.raises(ValueError, match=r"vision::conv2d_grad: input 'dout' must have the "
                                         r"forward output's shape \[1, 2, 2, 2\]"):
        fastop.ops.vision.conv2d_grad(x, w, fastop.to_tensor(np.ones((1, 2, 3, 3))))
    with pytest.raises(ValueError, match=r"vision::max_pool2d_grad: input 'mask' must have "
                                         r"the forward output's shape \[1, 1, 2, 2\] and "
                                         r"dtype int64"):
        fastop.ops.vision.max_pool2d_grad(x, fastop.to_tensor(np.ones((1, 1, 2, 2))),
                                          fastop.to_tensor(np.ones((1, 1, 2, 2))),
                                          kernel_size=2)


# -- functional wrappers and layers -----------------------------------------------------

def test_nhwc_matches_nchw():
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 6, 7, 3))
    w = rng.standard_normal((4, 3, 3, 3))
    xt, wt = fastop.to_tensor(x), fastop.to_tensor(w)
    nchw = fastop.to_tensor(x.transpose(0, 3, 1, 2))
    to_nhwc = (0, 2, 3, 1)
    pairs = [
        (fastop_vision.conv2d(xt, wt, padding=1, data_format="NHWC"),
         fastop_vision.conv2d(nchw, wt, padding=1)),
        (fastop_vision.avg_pool2d(xt, 2, data_format="NHWC"),
         fastop_vision.avg_pool2d(nchw, 2)),
    ]
    out, mask = fastop_vision.max_pool2d(xt, 3, 2, 1, return_mask=True, data_format="NHWC")
    ref_out, ref_mask = fastop_vision.max_pool2d(nchw, 3, 2, 1, return_mask=True)
    pairs += [(out, ref_out), (mask, ref_mask)]
    for got, want in pairs:
        np.testing.assert_allclose(got.numpy(), want.numpy().transpose(to_nhwc), rtol=1e-12)


def test_conv2d_layer_is_paddles():
    fastop.seed(0)
    conv = fastop_vision.Conv2D(4, 8, 3, padding=1, groups=2)
    assert conv.weight.shape == [8, 2, 3, 3] and conv.bias.shape == [8]
    assert [p.name for p in conv.parameters()] == [conv.weight.name, conv.bias.name]
    np.testing.assert_array_equal(conv.bias.numpy(), 0.0)
    # Paddle's default: Normal(0, sqrt(2 / (kh * kw * in_channels)))
    big = fastop_vision.Conv2D(16, 64, 5)
    assert abs(big.weight.numpy().std() - (2.0 / (25 * 16)) ** 0.5) < 0.005
    x = fastop.to_tensor(np.random.default_rng(18).standard_normal((2, 4, 6, 6))
                         .astype("float32"))
    want = fastop_vision.conv2d(x, conv.weight, conv.bias, padding=1, groups=2)
    np.testing.assert_array_equal(conv(x).numpy(), want.numpy())
    assert fastop_vision.Conv2D(3, 6, (3, 2), bias_attr=False).bias is None
    assert repr(conv).startswith("Conv2D(4, 8, kernel_size=[3, 3], padding=1, groups=2")
    with pytest.raises(ValueError, match="Conv2D: padding_mode 'reflect' is not supported"):
        fastop_vision.Conv2D(3, 6, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="Conv2D: groups=2 must divide in_channels=3"):
        fastop_vision.Conv2D(3, 6, 3, groups=2)


def test_pool_layers():
    x = fastop.to_tensor(np.arange(32.0).reshape(1, 2, 4, 4))
    out, mask = fastop_vision.MaxPool2D(2, return_mask=True)(x)
    np.testing.assert_array_equal(out.numpy()[0, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(mask.numpy()[0, 1], [[5, 7], [13, 15]])
    avg = fastop_vision.AvgPool2D(3, stride=1, padding=1)(x)
    np.testing.assert_allclose(avg.numpy()[0, 0, 0, 0], (0 + 1 + 4 + 5) / 4)  # exclusive
    avg = fastop_vision.AvgPool2D(3, stride=1, padding=1, exclusive=False)(x)
    np.testing.assert_allclose(avg.numpy()[0, 0, 0, 0], (0 + 1 + 4 + 5) / 9)


# -- a small CNN on scikit-learn's digits: eager and static ---------------------------------

class DigitsCNN(nn.Layer):
    """conv 1->8 3x3 pad 1, relu, max_pool 2, conv 8->16, relu, max_pool 2, Linear to 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = fastop_vision.Conv2D(1, 8, 3, padding=1)
        self.conv2 = fastop_vision.Conv2D(8, 16, 3, padding=1)
        self.pool = fastop_vision.MaxPool2D(2)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        x = self.pool(nn.functional.relu(self.conv1(x)))
        x = self.pool(nn.functional.relu(self.conv2(x)))
        return self.fc(fastop.reshape(x, [-1, 16 * 2 * 2]))


def _digits(batches, batch_size=64):
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.images / 16.0).astype("float32").reshape(-1, 1, 8, 8)
    y = data.target.astype("int64")
    return [(x[i * batch_size:(i + 1) * batch_size], y[i * batch_size:(i + 1) * batch_size])
            for i in range(batches)]


def test_cnn_trains_on_digits_in_eager_and_static_mode_alike():
    batches = _digits(6)
    epochs = 4
    fastop.seed(0)
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup), static.scope_guard(scope):
            x = static.data("x", [None, 1, 8, 8], "float32")
            label = static.data("label", [None], "int64")
            static_model = DigitsCNN()
            loss = nn.CrossEntropyLoss()(static_model(x), label)
            fastop.optimizer.Adam(learning_rate=0.01).minimize(loss)
        exe = static.Executor()
        exe.run(startup, scope=scope)
        initial = [np.array(scope[p.name]) for p in static_model.parameters()]
        static_losses = [float(exe.run(main, feed={"x": bx, "label": by}, fetch_list=[loss],
                                       scope=scope)[0])
                         for _ in range(epochs) for bx, by in batches]
    finally:
        fastop.disable_static()

    model = DigitsCNN()
    for p, value in zip(model.parameters(), initial):
        p.set_value(value)
    opt = fastop.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    criterion = nn.CrossEntropyLoss()
    eager_losses = []
    for _ in range(epochs):
        for bx, by in batches:
            step_loss = criterion(model(fastop.to_tensor(bx)), fastop.to_tensor(by))
            step_loss.backward()
            opt.step()
            opt.clear_grad()
            eager_losses.append(float(step_loss))
    np.testing.assert_allclose(static_losses, eager_losses, rtol=2e-3)
    first, last = np.mean(eager_losses[:len(batches)]), np.mean(eager_losses[-len(batches):])
    assert last < 0.6 * first, (first, last)
