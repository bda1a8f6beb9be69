"""numpy twins of the optimizer kernels (:mod:`fastop._core.optim`): PaddlePaddle's
update formulas, computed in float64 and returned in the parameter's dtype as new
arrays (the kernels update their outputs in place)."""
from __future__ import annotations

import numpy as np

__all__ = ["effective_grad", "sgd_update", "momentum_update", "adam_update",
           "adamw_update", "squared_l2_norm"]


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def effective_grad(param, grad, grad_scale=None, regularization_method: str = "",
                   regularization_coeff: float = 0.0) -> np.ndarray:
    """``grad_scale * grad`` plus the decay term: ``coeff * param`` (l2_decay) or
    ``coeff * sign(param)`` (l1_decay)."""
    g = _f64(grad) * (1.0 if grad_scale is None else _scalar(grad_scale))
    if regularization_method == "l2_decay":
        g = g + regularization_coeff * _f64(param)
    elif regularization_method == "l1_decay":
        g = g + regularization_coeff * np.sign(_f64(param))
    elif regularization_method:
        raise ValueError(f"unknown regularization_method {regularization_method!r}")
    return g


def sgd_update(param, grad, learning_rate, grad_scale=None, regularization_method="",
               regularization_coeff=0.0) -> tuple[np.ndarray]:
    g = effective_grad(param, grad, grad_scale, regularization_method, regularization_coeff)
    return ((_f64(param) - _scalar(learning_rate) * g).astype(param.dtype),)


def momentum_update(param, grad, velocity, learning_rate, grad_scale=None, momentum=0.9,
                    use_nesterov=False, regularization_method="", regularization_coeff=0.0
                    ) -> tuple[np.ndarray, np.ndarray]:
    g = effective_grad(param, grad, grad_scale, regularization_method, regularization_coeff)
    v = momentum * _f64(velocity) + g
    step = g + momentum * v if use_nesterov else v
    return ((_f64(param) - _scalar(learning_rate) * step).astype(param.dtype),
            v.astype(velocity.dtype))


def _adam(param, g, learning_rate, moment1, moment2, beta1_pow, beta2_pow, beta1, beta2,
          epsilon, keep):
    b1p, b2p, lr = _scalar(beta1_pow), _scalar(beta2_pow), _scalar(learning_rate)
    m = beta1 * _f64(moment1) + (1 - beta1) * g
    v = beta2 * _f64(moment2) + (1 - beta2) * g * g
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    p = keep * _f64(param) - lr_t * m / (np.sqrt(v) + epsilon * np.sqrt(1 - b2p))
    dtype = param.dtype
    return (p.astype(dtype), m.astype(dtype), v.astype(dtype),
            np.array([b1p * beta1], np.asarray(beta1_pow).dtype),
            np.array([b2p * beta2], np.asarray(beta2_pow).dtype))


def adam_update(param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow,
                grad_scale=None, beta1=0.9, beta2=0.999, epsilon=1e-8,
                regularization_method="", regularization_coeff=0.0) -> tuple:
    """(param, moment1, moment2, beta1_pow, beta2_pow) after one step; the powers are
    b^t of this step and come back multiplied by b."""
    g = effective_grad(param, grad, grad_scale, regularization_method, regularization_coeff)
    return _adam(param, g, learning_rate, moment1, moment2, beta1_pow, beta2_pow, beta1,
                 beta2, epsilon, 1.0)


def adamw_update(param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow,
                 grad_scale=None, beta1=0.9, beta2=0.999, epsilon=1e-8, coeff=0.01,
                 with_decay=True) -> tuple:
    """adam_update after the decoupled decay ``param *= 1 - lr * coeff``."""
    keep = 1 - _scalar(learning_rate) * coeff if with_decay else 1.0
    return _adam(param, effective_grad(param, grad, grad_scale), learning_rate, moment1,
                 moment2, beta1_pow, beta2_pow, beta1, beta2, epsilon, keep)


def squared_l2_norm(x) -> np.ndarray:
    return np.array([np.sum(_f64(x) ** 2)], dtype=np.asarray(x).dtype)
