"""The fastop-vision plugin's ops, forward + backward, through fastop's eager autograd.

* ``conv2d`` on the digits CNN's first layer (64 images, 1 -> 8 channels, 8x8, 3x3,
  padding 1): ``y = conv(x, w, b); y.sum().backward()``, against PyTorch's conv2d and
  against plain numpy doing the same math with no framework (im2col with
  ``sliding_window_view`` and one matmul forward; two matmuls and a col2im over the
  kernel offsets backward), written here independently of the plugin.
* the same call against the plugin's own numpy kernels called directly (forward kernel,
  then backward kernel with a ones gradient): the ratio is the framework's per-op cost.
* ``max_pool2d`` and ``avg_pool2d`` 2x2 on the CNN's first pooling (64x8x8x8), against
  PyTorch and against the plugin's kernels called directly.

All run in float32; the plugin must be installed (``make install``).
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import fastop
from fastop_vision import _kernels

CONV = dict(n=64, c_in=1, c_out=8, size=8, kernel=3, padding=1)


def numpy_conv2d_fwd_bwd(x, w, b):
    """Plain numpy conv2d (stride 1, square padding) forward and backward of
    ``sum(conv(x, w) + b)``: returns (y, dx, dw, db)."""
    n, c, h, wd = x.shape
    o, _, k, _ = w.shape
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    windows = sliding_window_view(xp, (k, k), axis=(2, 3))       # n c h w i j
    cols = windows.transpose(1, 4, 5, 0, 2, 3).reshape(c * k * k, n * h * wd)
    w2 = w.reshape(o, -1)
    y = (w2 @ cols).reshape(o, n, h, wd).transpose(1, 0, 2, 3) + b.reshape(-1, 1, 1)
    dy = np.ones_like(y).transpose(1, 0, 2, 3).reshape(o, -1)
    dw = (dy @ cols.T).reshape(w.shape)
    db = dy.sum(axis=1)
    dcols = (w2.T @ dy).reshape(c, k, k, n, h, wd)
    dxp = np.zeros_like(xp)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + h, j:j + wd] += dcols[:, i, j].transpose(1, 0, 2, 3)
    return y, dxp[:, :, p:p + h, p:p + wd], dw, db


def _conv_case(suite):
    rng = np.random.default_rng(0)
    n, c, o, size, k, p = (CONV[key] for key in ("n", "c_in", "c_out", "size", "kernel",
                                                  "padding"))
    x = rng.standard_normal((n, c, size, size)).astype("float32")
    w = (rng.standard_normal((o, c, k, k)) * 0.3).astype("float32")
    b = np.zeros(o, "float32")
    fx, fw, fb = (fastop.to_tensor(a, stop_gradient=False) for a in (x, w, b))
    conv = fastop.ops.vision.conv2d

    def fastop_step():
        y = conv(fx, fw, fb, stride=1, padding=p)
        y.sum().backward()
        fx.grad = fw.grad = fb.grad = None

    def kernels_step():
        y = _kernels.conv2d_forward(x, w, b, 1, p, 1, 1)
        y.sum()
        _kernels.conv2d_backward(x, w, np.ones_like(y), 1, p, 1, 1)

    torch_step = None
    if suite.torch:
        torch = suite.torch
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))

        def torch_step():
            y = torch.nn.functional.conv2d(tx, tw, tb, stride=1, padding=p)
            y.sum().backward()
            tx.grad = tw.grad = tb.grad = None

    name = f"conv2d fwd+bwd f32 ({n},{c},{size},{size}) {o}x{k}x{k} pad {p}"
    flops = 3 * 2 * n * o * c * k * k * size * size      # forward, dx, dw GEMMs
    suite.add("vision", name, fastop=fastop_step, numpy=lambda: numpy_conv2d_fwd_bwd(x, w, b),
              torch=torch_step,
              target="≥ 1.0× torch (1 thread), ≥ 0.9× numpy")
    suite.add("vision", name + " vs its kernels", fastop=fastop_step, numpy=kernels_step, target="≥ 0.9× numpy (the framework's cost)")


def _pool_cases(suite):
    x = np.random.default_rng(1).standard_normal((64, 8, 8, 8)).astype("float32")
    fx = fastop.to_tensor(x, stop_gradient=False)
    torch = suite.torch
    tx = torch.tensor(x, requires_grad=True) if torch else None
    max_pool2d, avg_pool2d = fastop.ops.vision.max_pool2d, fastop.ops.vision.avg_pool2d
    avg_attrs = (2, None, 0, False, True, None)   # kernel, stride, padding, ceil, exclusive, div

    def max_kernels():
        out, mask = _kernels.max_pool2d_forward(x, 2, None, 0, False)
        out.sum()
        _kernels.max_pool2d_backward(x, mask, np.ones_like(out), 2, None, 0, False)

    def avg_kernels():
        out = _kernels.avg_pool2d_forward(x, *avg_attrs)
        out.sum()
        _kernels.avg_pool2d_backward(x, np.ones_like(out), *avg_attrs)

    cases = {"max_pool2d": (lambda t: max_pool2d(t, kernel_size=2)[0], max_kernels),
             "avg_pool2d": (lambda t: avg_pool2d(t, kernel_size=2), avg_kernels)}
    for name, (op, kernels) in cases.items():
        def fastop_step(op=op):
            op(fx).sum().backward()
            fx.grad = None

        def torch_step(fn=getattr(torch.nn.functional, name) if torch else None):
            fn(tx, 2).sum().backward()
            tx.grad = None
        suite.add("vision", f"{name} 2x2 fwd+bwd f32 (64,8,8,8)", fastop=fastop_step,
                  numpy=kernels, torch=torch_step if torch else None,
                  target="≥ 1.0× torch (1 thread); numpy = its kernels")


def register(suite):
    _conv_case(suite)
    _pool_cases(suite)
