"""nn.Conv1D / functional.conv1d (padding, a strided slice per tap, matmul) against a
direct numpy convolution: padding forms and modes, stride, dilation, groups, NLC,
gradients, static mode (also of unknown length), errors."""
import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.autograd import gradcheck
from fastop.nn import functional as F


def numpy_conv1d(x, w, b, stride=1, pads=(0, 0), dilation=1, groups=1, mode="constant"):
    """Direct loops: out[n, o, t] = sum_c,k xpad[n, g*Cg + c, t*stride + k*dilation] w[o, c, k]."""
    xp = np.pad(x, ((0, 0), (0, 0), pads), mode=mode)
    n, _, length = xp.shape
    out_ch, cg, k = w.shape
    out_len = (length - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, out_ch, out_len))
    per_group = out_ch // groups
    for o in range(out_ch):
        g = o // per_group
        for t in range(out_len):
            for c in range(cg):
                for j in range(k):
                    out[:, o, t] += xp[:, g * cg + c, t * stride + j * dilation] * w[o, c, j]
    return out if b is None else out + b[None, :, None]


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 9))
W = RNG.standard_normal((6, 2, 3))
B = RNG.standard_normal(6)


@pytest.mark.parametrize("kwargs,pads", [
    (dict(), (0, 0)),
    (dict(padding=1), (1, 1)),
    (dict(padding=[2, 1], stride=2), (2, 1)),
    (dict(padding=[1], dilation=2), (1, 1)),
    (dict(padding="valid", stride=3), (0, 0)),
    (dict(padding="SAME"), (1, 1)),
    (dict(padding="same", stride=2), (1, 1)),   # ceil(9/2)=5 outputs: total pad 2
])
def test_conv1d_matches_numpy(kwargs, pads):
    got = F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W), fastop.to_tensor(B), groups=2,
                   **kwargs).numpy()
    want = numpy_conv1d(X, W, B, kwargs.get("stride", 1), pads, kwargs.get("dilation", 1), 2)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_same_padding_keeps_the_length_and_ignores_dilation_as_paddle():
    out = F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W[:, :, :]), groups=2,
                   padding="same", dilation=3)
    assert out.shape == [2, 6, 9]


def test_nlc_is_ncl_transposed():
    got = F.conv1d(fastop.to_tensor(X.transpose(0, 2, 1)), fastop.to_tensor(W),
                   fastop.to_tensor(B), padding=1, groups=2, data_format="NLC").numpy()
    want = numpy_conv1d(X, W, B, pads=(1, 1), groups=2).transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_conv1d_layer_padding_modes(mode, np_mode):
    layer = nn.Conv1D(4, 6, 3, padding=2, groups=2, padding_mode=mode)
    layer.to(dtype="float64")
    got = layer(fastop.to_tensor(X)).numpy()
    want = numpy_conv1d(X, layer.weight.numpy(), layer.bias.numpy(), pads=(2, 2), groups=2,
                        mode=np_mode)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_layer_parameters_and_paddle_init():
    fastop.seed(0)
    layer = nn.Conv1D(16, 32, 5, bias_attr=False)
    assert layer.weight.shape == [32, 16, 5] and layer.bias is None
    std = layer.weight.numpy().std()
    assert abs(std - (2.0 / (5 * 16)) ** 0.5) < 0.02       # Normal(0, sqrt(2 / fan_in))
    assert nn.Conv1D(4, 6, [3], groups=2).weight.shape == [6, 2, 3]


def test_gradients_flow_to_input_weight_and_bias():
    x = fastop.to_tensor(X[:1, :, :6], stop_gradient=False)
    w = fastop.to_tensor(W[:, :, :2], stop_gradient=False)
    b = fastop.to_tensor(B, stop_gradient=False)
    assert gradcheck(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, groups=2),
                     (x, w, b))


def test_static_mode_matches_eager():
    fastop.seed(1)
    layer = nn.Conv1D(4, 6, 3, padding=1, groups=2)
    x = X.astype("float32")
    eager = layer(fastop.to_tensor(x)).numpy()
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [None, 4, 9], "float32")
            y = F.conv1d(xv, fastop.to_tensor(layer.weight.numpy()),
                         fastop.to_tensor(layer.bias.numpy()), padding=1, groups=2)
        got = static.Executor().run(main, feed={"x": x}, fetch_list=[y])[0]
    finally:
        fastop.disable_static()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W)),
     r"x has 4 channels and weight \[6, 2, 3\] with groups=1"),
    (lambda: F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding="full"),
     r"padding must be an int, a list of 1 or 2 ints, 'same' or 'valid'; got 'full'"),
    (lambda: F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, padding=-1),
     r"padding must be a non-negative int"),
    (lambda: F.conv1d(fastop.to_tensor(X[:, :, :2]), fastop.to_tensor(W), groups=2),
     r"input length 2 .* shorter than the dilated kernel \(3\)"),
    (lambda: F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2, stride=0),
     r"stride must be a positive int"),
    (lambda: F.conv1d(fastop.to_tensor(X), fastop.to_tensor(W), groups=2,
                      data_format="NHWC"), r"data_format must be 'NCL' or 'NLC'"),
    (lambda: nn.Conv1D(3, 4, 3, groups=2), r"Conv1D: in_channels \(3\) and out_channels"),
    (lambda: nn.Conv1D(4, 4, 3, padding_mode="mirror"), r"padding_mode must be one of"),
])
def test_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("padding", ["valid", "same", [1, 2], [1]])
def test_conv1d_layer_non_zeros_padding_mode_takes_an_int_padding_only(padding):
    # PaddlePaddle's rule (its _ConvNd): a TypeError for any other padding form
    with pytest.raises(TypeError, match="with padding_mode 'reflect' the padding must be an"):
        nn.Conv1D(4, 4, 3, padding=padding, padding_mode="reflect")
    nn.Conv1D(4, 4, 3, padding=padding)                       # fine with zeros


@pytest.mark.parametrize("kwargs,pads", [
    (dict(padding=[2, 1], stride=2, dilation=2), (2, 1)),
    (dict(padding="same"), (1, 1)),                 # stride 1: size - 1 split, any length
    (dict(padding="valid", stride=3), (0, 0)),
    (dict(padding=1, data_format="NLC"), (1, 1)),
])
@pytest.mark.parametrize("length", [9, 14])
def test_conv1d_static_input_of_unknown_length(kwargs, pads, length):
    """A static input of length -1 (PaddlePaddle's tests feed [-1, C, -1]): one Program
    serves every length."""
    nlc = kwargs.get("data_format") == "NLC"
    x = RNG.standard_normal((2, 4, length))
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [-1, -1, 4] if nlc else [-1, 4, -1], "float64")
            wv = static.data("w", list(W.shape), "float64")
            out = F.conv1d(xv, wv, groups=2, **kwargs)
        got, = static.Executor().run(main, feed={"x": x.transpose(0, 2, 1) if nlc else x,
                                                 "w": W}, fetch_list=[out])
    finally:
        fastop.disable_static()
    want = numpy_conv1d(x, W, None, kwargs.get("stride", 1), pads,
                        kwargs.get("dilation", 1), groups=2)
    np.testing.assert_allclose(got.transpose(0, 2, 1) if nlc else got, want, rtol=1e-12)


def test_conv1d_static_unknown_length_needs_it_for_same_with_stride():
    fastop.enable_static()
    try:
        with static.program_guard(static.Program(), static.Program()):
            xv = static.data("x", [-1, 4, -1], "float64")
            with pytest.raises(ValueError, match="padding='same' with stride 2 depends on "
                                                 "the input length"):
                F.conv1d(xv, fastop.to_tensor(W), groups=2, padding="same", stride=2)
    finally:
        fastop.disable_static()
