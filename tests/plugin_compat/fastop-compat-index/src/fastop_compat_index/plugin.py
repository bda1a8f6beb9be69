"""compat_index: ops with integer and bool outputs, written from docs/plugins.md
("An output whose dtype is not floating (an index, a mask) takes no gradient") and
``Registry.define``'s docstring.

- ``topk``: values (float) and indices (int64) of the k largest along the last axis, a
  required int attribute, ``@op.meta``, and a backward kernel taking the indices and the
  values' gradient (``needs=["x", "indices", "dvalues"]``).
- ``argmax_value``: the largest value and its index along the last axis, ``meta=``, a
  backward kernel that needs the forward value but not the index.
- ``relu_mask``: a bool mask output and a composite gradient that needs it.
"""
import numpy as np

import fastop

__version__ = "0.1.0"


@fastop.hookimpl
def fastop_register_ops(registry):
    TensorMeta = fastop.ops.TensorMeta
    where = fastop.ops.get("fastop::where")
    multiply = fastop.ops.get("fastop::multiply")

    # -- top-k: float values, int64 indices ------------------------------------------------
    topk = registry.define(
        "compat_index::topk", inputs=["x"], outputs=["values", "indices"],
        attrs={"k": int}, doc="the k largest values along the last axis, and their indices")

    @topk.meta
    def topk_meta(x, k):
        shape = list(x.shape[:-1]) + [k]
        return [TensorMeta(shape, x.dtype), TensorMeta(shape, "int64")]

    @topk.kernel("float32", "float64")
    def topk_forward(x, k):
        indices = np.argsort(-x, axis=-1, kind="stable")[..., :k].astype(np.int64)
        return np.take_along_axis(x, indices, axis=-1), indices

    @topk.grad_kernel(needs=["x", "indices", "dvalues"])
    def topk_backward(x, indices, dvalues, k):
        dx = np.zeros_like(x)
        np.put_along_axis(dx, indices, dvalues.astype(x.dtype), axis=-1)
        return dx

    # -- argmax with its value -----------------------------------------------------------
    argmax_value = registry.define(
        "compat_index::argmax_value", inputs=["x"], outputs=["value", "index"],
        meta=lambda x: [TensorMeta(x.shape[:-1], x.dtype),
                        TensorMeta(x.shape[:-1], "int64")],
        doc="the largest value along the last axis, and its index")

    @argmax_value.kernel("float32", "float64")
    def argmax_value_forward(x):
        index = np.argmax(x, axis=-1).astype(np.int64)
        return np.take_along_axis(x, index[..., None], axis=-1)[..., 0], index

    @argmax_value.grad_kernel(needs=["x", "value", "dvalue"])
    def argmax_value_backward(x, value, dvalue):
        return ((x == value[..., None]) * dvalue[..., None]).astype(x.dtype)

    # -- a bool output, composite gradient ------------------------------------------------
    relu_mask = registry.define(
        "compat_index::relu_mask", inputs=["x"], outputs=["y", "mask"],
        meta=lambda x: [x, TensorMeta(x.shape, "bool")],
        doc="y = relu(x); mask = x > 0")

    @relu_mask.kernel("float32", "float64")
    def relu_mask_forward(x):
        mask = x > 0
        return np.where(mask, x, 0).astype(x.dtype), mask

    @relu_mask.grad(needs=["mask"])
    def relu_mask_grad(mask, dy, dmask):        # dmask: the bool output takes none
        return where(mask, dy, multiply(dy, 0.0))


@fastop.hookimpl
def fastop_op_samples():
    from fastop.testing import Sample
    rng = np.random.default_rng(1)

    def away(*shape):
        """Values with |v| in [0.5, 1.5]: away from the kink of relu at 0."""
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)

    def distinct(*shape):
        """Values at least 0.7 / size apart: no ties, even after a finite-difference step."""
        n = int(np.prod(shape))
        return (rng.permutation(n).reshape(shape) + 0.3 * rng.random(shape)) / n

    return {
        "compat_index::topk": [Sample(distinct(3, 5), k=2),
                               Sample(distinct(6).astype("float32"), k=3),
                               Sample(distinct(2, 4), k=1)],
        "compat_index::argmax_value": [[distinct(3, 5)], [distinct(6).astype("float32")]],
        "compat_index::relu_mask": [[away(3, 4)], [away(5).astype("float32")]],
    }
