"""nn.Conv2D / functional.conv2d (conv1d's machinery over two spatial dims) against a
direct numpy convolution: padding forms and modes, stride, dilation, groups, NHWC,
gradients (finite differences), static mode (also of unknown batch and size), the
Layer's parameters, errors."""
import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.autograd import gradcheck
from fastop.nn import functional as F


def numpy_conv2d(x, w, b, stride=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1),
                 groups=1, mode="constant"):
    """Direct loops: out[n, o, i, j] = sum_c,p,q xpad[n, g*Cg + c, i*sh + p*dh,
    j*sw + q*dw] w[o, c, p, q]."""
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads), mode=mode)
    n, _, height, width = xp.shape
    out_ch, cg, kh, kw = w.shape
    out_h = (height - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (width - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, out_ch, out_h, out_w))
    per_group = out_ch // groups
    for o in range(out_ch):
        g = o // per_group
        for i in range(out_h):
            for j in range(out_w):
                for c in range(cg):
                    for p in range(kh):
                        for q in range(kw):
                            out[:, o, i, j] += xp[:, g * cg + c, i * stride[0] + p * dilation[0],
                                                  j * stride[1] + q * dilation[1]] * w[o, c, p, q]
    return out if b is None else out + b[None, :, None, None]


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 7, 8))
W = RNG.standard_normal((6, 2, 3, 2))
B = RNG.standard_normal(6)


@pytest.mark.parametrize("kwargs,pads", [
    (dict(), ((0, 0), (0, 0))),
    (dict(padding=1), ((1, 1), (1, 1))),
    (dict(padding=[2, 1], stride=2), ((2, 2), (1, 1))),
    (dict(padding=[1, 0, 2, 1], stride=[1, 3]), ((1, 0), (2, 1))),     # top, bottom, left, right
    (dict(padding=[[0, 0], [0, 0], [2, 1], [0, 1]], dilation=[2, 1]), ((2, 1), (0, 1))),
    (dict(padding=1, dilation=2, stride=[2, 1]), ((1, 1), (1, 1))),
    (dict(padding="valid", stride=2), ((0, 0), (0, 0))),
    (dict(padding="SAME"), ((1, 1), (0, 1))),                  # kernel 3x2: totals 2 and 1
    (dict(padding="same", stride=[2, 3]), ((1, 1), (0, 1))),   # ceil(7/2)=4: 2; ceil(8/3)=3: 1
])
def test_conv2d_matches_numpy(kwargs, pads):
    got = F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), fastop.to_tensor(B), groups=2,
                   **kwargs).numpy()
    stride = kwargs.get("stride", 1)
    stride = stride if isinstance(stride, list) else [stride] * 2
    dilation = kwargs.get("dilation", 1)
    dilation = dilation if isinstance(dilation, list) else [dilation] * 2
    want = numpy_conv2d(X, W, B, stride, pads, dilation, 2)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_same_padding_keeps_the_size_and_ignores_dilation_as_paddle():
    out = F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding="same",
                   dilation=3)
    assert out.shape == [2, 6, 7, 8]


def test_nhwc_is_nchw_transposed_and_takes_the_nested_padding_in_its_order():
    x = fastop.to_tensor(X.transpose(0, 2, 3, 1))
    got = F.conv2d(x, fastop.to_tensor(W), fastop.to_tensor(B), groups=2, stride=2,
                   padding=[[0, 0], [1, 2], [0, 1], [0, 0]], data_format="NHWC").numpy()
    want = numpy_conv2d(X, W, B, (2, 2), ((1, 2), (0, 1)), groups=2).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_conv2d_layer_padding_modes(mode, np_mode, data_format):
    layer = nn.Conv2D(4, 6, [3, 2], padding=2, groups=2, padding_mode=mode,
                      data_format=data_format)
    layer.to(dtype="float64")
    nhwc = data_format == "NHWC"
    got = layer(fastop.to_tensor(X.transpose(0, 2, 3, 1) if nhwc else X)).numpy()
    want = numpy_conv2d(X, layer.weight.numpy(), layer.bias.numpy(), pads=((2, 2), (2, 2)),
                        groups=2, mode=np_mode)
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2) if nhwc else got, want,
                               rtol=1e-12, atol=1e-12)


def test_layer_parameters_state_dict_and_paddle_init():
    fastop.seed(0)
    layer = nn.Conv2D(16, 32, 5, bias_attr=False)
    assert layer.weight.shape == [32, 16, 5, 5] and layer.bias is None
    assert abs(layer.weight.numpy().std() - (2.0 / (25 * 16)) ** 0.5) < 0.01
    layer = nn.Conv2D(4, 6, [3, 1], groups=2)
    assert [p.shape for p in layer.parameters()] == [[6, 2, 3, 1], [6]]
    state = layer.state_dict()
    assert list(state) == ["weight", "bias"]
    assert not state["bias"].numpy().any()                       # bias starts at zeros
    other = nn.Conv2D(4, 6, [3, 1], groups=2)
    other.set_state_dict(state)
    x = fastop.to_tensor(X.astype("float32"))
    np.testing.assert_array_equal(other(x).numpy(), layer(x).numpy())


def test_gradients_match_finite_differences():
    x = fastop.to_tensor(X[:1, :, :5, :4], stop_gradient=False)
    w = fastop.to_tensor(W, stop_gradient=False)
    b = fastop.to_tensor(B, stop_gradient=False)
    assert gradcheck(lambda x, w, b: F.conv2d(x, w, b, stride=[2, 1], padding=[1, 0, 1, 1],
                                              dilation=[1, 2], groups=2), (x, w, b))


def test_layer_gradients_reach_its_parameters():
    layer = nn.Conv2D(4, 6, 3, padding=1, padding_mode="reflect", data_format="NHWC")
    layer.to(dtype="float64")
    x = fastop.to_tensor(X.transpose(0, 2, 3, 1), stop_gradient=False)
    layer(x).sum().backward()
    assert layer.weight.grad.shape == [6, 4, 3, 3]
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(6, 2 * 7 * 8.0))
    assert x.grad.shape == [2, 7, 8, 4]


@pytest.mark.parametrize("kwargs,pads", [
    (dict(padding=1, groups=2), ((1, 1), (1, 1))),
    (dict(padding=[1, 0, 2, 1], stride=2, dilation=[1, 2], groups=2), ((1, 0), (2, 1))),
    (dict(padding="same", groups=2), ((1, 1), (0, 1))),      # stride 1: any size
])
@pytest.mark.parametrize("shape", [(2, 4, 7, 8), (3, 4, 9, 5)])
def test_static_program_with_unknown_batch_and_size_matches_eager(kwargs, pads, shape):
    x = RNG.standard_normal(shape)
    eager = F.conv2d(fastop.to_tensor(x), fastop.to_tensor(W), fastop.to_tensor(B),
                     **kwargs).numpy()
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [-1, 4, -1, -1], "float64")
            wv = static.data("w", list(W.shape), "float64")
            out = F.conv2d(xv, wv, fastop.to_tensor(B), **kwargs)
        got, = static.Executor().run(main, feed={"x": x, "w": W}, fetch_list=[out])
    finally:
        fastop.disable_static()
    np.testing.assert_allclose(got, eager, rtol=1e-12, atol=1e-12)
    stride = kwargs.get("stride", 1)
    dilation = kwargs.get("dilation", 1)
    dilation = dilation if isinstance(dilation, list) else [dilation] * 2
    np.testing.assert_allclose(got, numpy_conv2d(x, W, B, (stride, stride), pads, dilation,
                                                 2), rtol=1e-12, atol=1e-12)


def test_static_layer_with_unknown_batch_matches_eager():
    fastop.seed(1)
    layer = nn.Conv2D(4, 6, 3, stride=2, padding="same", data_format="NHWC")
    x = X.transpose(0, 2, 3, 1).astype("float32")
    eager = layer(fastop.to_tensor(x)).numpy()
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [None, 7, 8, 4], "float32")
            y = F.conv2d(xv, fastop.to_tensor(layer.weight.numpy()),
                         fastop.to_tensor(layer.bias.numpy()), stride=2, padding="same",
                         data_format="NHWC")
        got = static.Executor().run(main, feed={"x": x}, fetch_list=[y])[0]
    finally:
        fastop.disable_static()
    assert got.shape == (2, 4, 4, 6)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W)),
     r"conv2d: x has 4 channels and weight \[6, 2, 3, 2\] with groups=1"),
    (lambda: F.conv2d(fastop.to_tensor(X[0]), fastop.to_tensor(W), groups=2),
     r"conv2d: x must be 4-D .* got x \[4, 7, 8\]"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W[0]), groups=2),
     r"conv2d: x must be 4-D .* weight \[2, 3, 2\]"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding="full"),
     r"padding must be an int, a list of 2 or 4 ints, 'same' or 'valid'; got 'full'"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding=[1, 2, 3]),
     r"padding must be a non-negative int, a list of 2 or 4 of them"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding=[1, -1]),
     r"padding must be a non-negative int"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2,
                      padding=[[0, 0], [1, 0], [1, 1], [1, 1]]),
     r"nested padding form needs 4 pairs with the batch and channel pairs \[0, 0\]"),
    (lambda: F.conv2d(fastop.to_tensor(X[:, :, :2]), fastop.to_tensor(W), groups=2),
     r"input length 2 .* shorter than the dilated kernel \(3\)"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, stride=[1, 0]),
     r"stride must be a positive int \(or a list of 2\)"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, dilation=[1, 1, 1]),
     r"dilation must be a positive int \(or a list of 2\)"),
    (lambda: F.conv2d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, data_format="NCL"),
     r"conv2d: data_format must be 'NCHW' or 'NHWC', got 'NCL'"),
    (lambda: nn.Conv2D(3, 4, 3, groups=2), r"Conv2D: in_channels \(3\) and out_channels"),
    (lambda: nn.Conv2D(4, 4, [3, 3, 3]), r"Conv2D: kernel_size must be a positive int"),
    (lambda: nn.Conv2D(4, 4, 3, padding_mode="mirror"), r"Conv2D: padding_mode must be one"),
    (lambda: nn.Conv2D(4, 4, 3, data_format="NCL"), r"Conv2D: data_format must be 'NCHW'"),
    (lambda: nn.Conv2D(4, 6, 3)(fastop.to_tensor(X[0].astype("float32"))),
     r"Conv2D: x must be 4-D"),
])
def test_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("padding", ["valid", "same", [1, 2], [1, 1, 2, 2]])
def test_conv2d_layer_non_zeros_padding_mode_takes_an_int_padding_only(padding):
    # PaddlePaddle's rule (its _ConvNd): a TypeError for any other padding form
    with pytest.raises(TypeError, match="Conv2D: with padding_mode 'circular' the padding"):
        nn.Conv2D(4, 4, 3, padding=padding, padding_mode="circular")
    nn.Conv2D(4, 4, 3, padding=padding)                       # fine with zeros


def test_conv2d_static_unknown_size_needs_it_for_same_with_stride():
    fastop.enable_static()
    try:
        with static.program_guard(static.Program(), static.Program()):
            xv = static.data("x", [-1, 4, 7, -1], "float64")
            with pytest.raises(ValueError, match="padding='same' with stride 2 depends on "
                                                 "the input length"):
                F.conv2d(xv, fastop.to_tensor(W), groups=2, padding="same", stride=2)
    finally:
        fastop.disable_static()
