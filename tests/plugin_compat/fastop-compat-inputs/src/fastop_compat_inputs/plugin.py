"""compat_inputs: optional (``"b?"``) and variadic (``"xs*"``) inputs, each with a
backward kernel and with a composite gradient, written from docs/plugins.md ("``?``
optional (the kernel gets None), ``*`` variadic (a list)") and ``Registry.define``'s
docstring ("None where there is none ..., and a list for a variadic input").

- ``affine_k`` / ``affine_c``: ``y = x * w + b`` with an optional ``b``; a backward
  kernel / a composite rule returning None for ``b`` when it is absent.
- ``weighted_sum_k``: ``y = w * sum(xs)``; a backward kernel returning a list of
  gradients for ``xs`` and one for ``w``.
- ``prod_c``: ``y = prod(xs)``, the variadic input alone; a composite rule returning
  the list of gradients.
"""
import numpy as np

import fastop

__version__ = "0.1.0"


@fastop.hookimpl
def fastop_register_ops(registry):
    multiply = fastop.ops.get("fastop::multiply")

    # -- optional input, backward kernel ---------------------------------------------------
    affine_k = registry.define(
        "compat_inputs::affine_k", inputs=["x", "w", "b?"], outputs=["y"],
        meta=lambda x, w, b: x, doc="y = x * w + b (b optional)")

    @affine_k.kernel("float32", "float64")
    def affine_k_forward(x, w, b):
        y = x * w
        return (y if b is None else y + b).astype(x.dtype)

    @affine_k.grad_kernel(needs=["x", "w", "b", "dy"])
    def affine_k_backward(x, w, b, dy):
        return dy * w, dy * x, None if b is None else dy

    # -- optional input, composite gradient ------------------------------------------------
    affine_c = registry.define(
        "compat_inputs::affine_c", inputs=["x", "w", "b?"], outputs=["y"],
        meta=lambda x, w, b: x, doc="y = x * w + b (b optional)")

    @affine_c.kernel("float32", "float64")
    def affine_c_forward(x, w, b):
        y = x * w
        return (y if b is None else y + b).astype(x.dtype)

    @affine_c.grad(needs=["x", "w", "b"])
    def affine_c_grad(x, w, b, dy):
        return multiply(dy, w), multiply(dy, x), None if b is None else dy

    # -- variadic input, backward kernel ---------------------------------------------------
    weighted_sum_k = registry.define(
        "compat_inputs::weighted_sum_k", inputs=["xs*", "w"], outputs=["y"],
        meta=lambda xs, w: w, doc="y = w * sum(xs)")

    @weighted_sum_k.kernel("float32", "float64")
    def weighted_sum_k_forward(xs, w):
        return (w * sum(xs)).astype(w.dtype)

    @weighted_sum_k.grad_kernel(needs=["xs", "w", "dy"])
    def weighted_sum_k_backward(xs, w, dy):
        return [dy * w for _ in xs], dy * sum(xs)

    # -- variadic input alone, composite gradient ------------------------------------------
    prod_c = registry.define(
        "compat_inputs::prod_c", inputs=["xs*"], outputs=["y"],
        meta=lambda xs: xs[0], doc="y = xs[0] * xs[1] * ...")

    @prod_c.kernel("float32", "float64")
    def prod_c_forward(xs):
        y = xs[0].copy()
        for x in xs[1:]:
            y = y * x
        return y

    @prod_c.grad(needs=["xs"])
    def prod_c_grad(xs, dy):
        grads = []
        for i in range(len(xs)):
            g = dy
            for j, x in enumerate(xs):
                if j != i:
                    g = multiply(g, x)
            grads.append(g)
        return grads


@fastop.hookimpl
def fastop_op_samples():
    rng = np.random.default_rng(2)

    def normal(*shape, dtype="float64"):
        return rng.standard_normal(shape).astype(dtype)

    return {
        "compat_inputs::affine_k": [[normal(3, 4), normal(3, 4), normal(3, 4)],
                                    [normal(3, 4), normal(3, 4), None],
                                    [normal(5, dtype="float32"), normal(5, dtype="float32"),
                                     normal(5, dtype="float32")]],
        "compat_inputs::affine_c": [[normal(3, 4), normal(3, 4), normal(3, 4)],
                                    [normal(3, 4), normal(3, 4), None],
                                    [normal(5, dtype="float32"), normal(5, dtype="float32"),
                                     None]],
        "compat_inputs::weighted_sum_k": [[[normal(3, 4), normal(3, 4), normal(3, 4)],
                                           normal(3, 4)],
                                          [[normal(5, dtype="float32")],
                                           normal(5, dtype="float32")]],
        "compat_inputs::prod_c": [[[normal(3, 4), normal(3, 4), normal(3, 4)]],
                                  [[normal(5, dtype="float32"),
                                    normal(5, dtype="float32")]]],
    }
