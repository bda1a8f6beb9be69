"""Gradient utilities of PaddlePaddle's ``paddle.nn.utils``: clip the ``.grad`` of
parameters in place after ``backward()`` and before the optimizer's step (eager mode),
for code that clips by hand instead of giving the optimizer a ``grad_clip``.

>>> import fastop
>>> w = fastop.to_tensor([3.0, 4.0], stop_gradient=False)
>>> (w * w).sum().backward()                     # grad [6, 8], norm 10
>>> float(fastop.nn.utils.clip_grad_norm_(w, max_norm=5.0))
10.0
>>> [round(v, 4) for v in w.grad.numpy().tolist()]
[3.0, 4.0]
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from fastop._tensor import Tensor, to_tensor
from fastop.autograd import no_grad
from fastop.ops._dispatch import current_mode
from fastop.tensor.math import clip, multiply

__all__ = ["clip_grad_norm_", "clip_grad_value_"]

NORM_TYPES = (float("inf"), 0, 1, 2)


def _parameter_list(who: str, parameters: Any) -> list[Tensor]:
    """`parameters` as a list (one Tensor or an iterable of them), in eager mode."""
    if current_mode() != "eager":
        raise RuntimeError(f"{who}: this API can only run in dynamic (eager) mode")
    if isinstance(parameters, Tensor):
        return [parameters]
    if not isinstance(parameters, Iterable):
        raise TypeError(f"{who}: parameters must be a Tensor or an iterable of Tensors, "
                        f"got {type(parameters).__name__}")
    return list(parameters)


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of `parameters` in place so that their total `norm_type`-norm
    (of all gradients as one vector; inf, 0, 1 or 2) is at most `max_norm`: each is
    multiplied by ``min(1, max_norm / (total + 1e-6))``. Returns the total norm before
    clipping (0-D, the gradients' dtype; 0.0 when no parameter has a gradient).
    `error_if_nonfinite`: a NaN or infinite total is a RuntimeError instead."""
    who = "clip_grad_norm_"
    params = _parameter_list(who, parameters)
    if norm_type not in NORM_TYPES:
        raise ValueError(f"{who}: norm_type only supports {list(NORM_TYPES)}, got "
                         f"{norm_type!r}")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return to_tensor(0.0)
    max_norm, norm_type = float(max_norm), float(norm_type)
    flat = [np.abs(g.numpy().astype("float64").reshape(-1)) for g in grads]
    if norm_type == math.inf:
        total = max(float(a.max()) if a.size else 0.0 for a in flat)
    elif norm_type == 0:
        total = float(sum(np.count_nonzero(a) for a in flat))
    else:
        total = float(sum(np.sum(a ** norm_type) for a in flat)) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"{who}: the total norm of order {norm_type} of the gradients "
                           f"is non-finite ({total}), so it cannot be clipped; give "
                           f"error_if_nonfinite=False to scale by it anyway")
    coef = min(max_norm / (total + 1e-6), 1.0)
    with no_grad():
        for p in params:
            if p.grad is not None:
                p.grad = multiply(p.grad, to_tensor(coef, dtype=p.grad.dtype))
    return to_tensor(total, dtype=grads[0].dtype)


def clip_grad_value_(parameters: Any, clip_value: float) -> None:
    """Clamp each gradient of `parameters` in place to ``[-clip_value, clip_value]``
    (`clip_value` >= 0: a negative one is PaddlePaddle's ValueError)."""
    who = "clip_grad_value_"
    params = _parameter_list(who, parameters)
    bound = float(clip_value)
    if not bound >= 0:
        raise ValueError(f"{who}: clip_value must be >= 0 (the range is [-clip_value, "
                         f"clip_value]), got {clip_value!r}")
    with no_grad():
        for p in params:
            if p.grad is not None:
                p.grad = clip(p.grad, -bound, bound)
