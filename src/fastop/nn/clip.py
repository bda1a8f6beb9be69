"""Gradient clipping (PaddlePaddle's ``paddle.nn.ClipGradBy*``), given to an optimizer
as ``grad_clip=``:

* ``ClipGradByGlobalNorm(clip_norm)``: every gradient times
  ``clip_norm / max(global_norm, clip_norm)``, ``global_norm`` the L2 norm of all the
  gradients together;
* ``ClipGradByNorm(clip_norm)``: each gradient times ``clip_norm / max(norm, clip_norm)``
  with its own norm;
* ``ClipGradByValue(max, min=None)``: each element clipped to ``[min, max]`` (``min``
  defaults to ``-max``).

A parameter with ``need_clip = False`` (a static parameter variable can carry it) is
left out: its gradient is neither clipped nor counted in the global norm.

Clipping by norm runs one ``squared_l2_norm`` reduction per gradient and a few
one-element ops for the factor; the optimizers then pass the factor to their update
kernel as ``grad_scale``, which multiplies the gradient inside the update, so the
clipped gradients are never written out. Called directly (``clip(params_grads)``) a
clip returns ``[(param, clipped_grad), ...]`` as PaddlePaddle's does. Both work in eager
and static mode (the ops are appended to the program there).
"""
from __future__ import annotations

import math
from functools import reduce
from typing import Any, Sequence

from fastop._core.storage import float64
from fastop.ops.builtin._table import B

__all__ = ["ClipGradBase", "ClipGradByValue", "ClipGradByNorm", "ClipGradByGlobalNorm"]

ParamsGrads = Sequence[tuple[Any, Any]]


def _needs_clip(param: Any) -> bool:
    return getattr(param, "need_clip", True) is not False


def _positive(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a finite positive float, got {value!r}")
    return float(value)


def _norm_scale(squared_norm: Any, clip_norm: float) -> Any:
    """``clip_norm / max(sqrt(squared_norm), clip_norm)`` as a one-element tensor (1
    when the norm is within the bound)."""
    return B.divide(clip_norm, B.maximum(B.sqrt(squared_norm), clip_norm))


class ClipGradBase:
    """Base class of gradient clipping. A subclass defines :meth:`_clip`, which the
    optimizers call: ``[(param, grad, grad_scale or None), ...]`` with the gradients it
    rewrote (by value) and the factors the update applies (by norm)."""

    def _clip(self, params_grads: ParamsGrads) -> list[tuple[Any, Any, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must define _clip")

    def __call__(self, params_grads: ParamsGrads) -> list[tuple[Any, Any]]:
        """The clipped ``[(param, grad), ...]`` (pairs without a gradient dropped)."""
        out = []
        for param, grad, scale in self._clip(params_grads):
            if scale is not None:
                if scale.dtype != grad.dtype:
                    scale = B.cast(scale, dtype=grad.dtype)
                grad = B.multiply(grad, scale)
            out.append((param, grad))
        return out

    def __repr__(self) -> str:
        return str(self)


class ClipGradByValue(ClipGradBase):
    """Clip every gradient element to ``[min, max]``; ``min`` defaults to ``-max`` (then
    ``max`` must be positive)."""

    def __init__(self, max: float, min: float | None = None) -> None:
        owner = "ClipGradByValue"
        for name, value in (("max", max), ("min", min)):
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                raise TypeError(f"{owner}: {name} must be a float, got "
                                f"{type(value).__name__} {value!r}")
        if min is None:
            if not max > 0:
                raise ValueError(f"{owner}: max must be positive when min is not given "
                                 f"(min defaults to -max), got max={max}")
            min = -max
        if not min <= max:
            raise ValueError(f"{owner}: min ({min}) must not exceed max ({max})")
        self.max, self.min = float(max), float(min)

    def _clip(self, params_grads):
        return [(p, B.clip(g, min=self.min, max=self.max) if _needs_clip(p) else g, None)
                for p, g in params_grads if g is not None]

    def __str__(self) -> str:
        return f"Clip Gradient By Value, min = {self.min:f}, max={self.max:f}"


class ClipGradByNorm(ClipGradBase):
    """Scale each gradient whose L2 norm exceeds ``clip_norm`` down to that norm."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = _positive("ClipGradByNorm", "clip_norm", clip_norm)

    def _clip(self, params_grads):
        return [(p, g, _norm_scale(B.squared_l2_norm(g), self.clip_norm)
                 if _needs_clip(p) else None)
                for p, g in params_grads if g is not None]

    def __str__(self) -> str:
        return f"Gradient Clip By Norm, clip_norm={self.clip_norm:f}"


class ClipGradByGlobalNorm(ClipGradBase):
    """Scale all gradients by ``clip_norm / max(global_norm, clip_norm)``, the global
    norm taken over every clipped gradient (summed in float64 when any is float64).

    ``group_name`` is PaddlePaddle's (clips of one group share a norm in its
    distributed training). ``auto_skip_clip=True`` skips the multiply when the norm is
    within the bound; the factor is then exactly 1, so the results are the same."""

    def __init__(self, clip_norm: float, group_name: str = "default_group",
                 auto_skip_clip: bool = False) -> None:
        self.clip_norm = _positive("ClipGradByGlobalNorm", "clip_norm", clip_norm)
        if not isinstance(auto_skip_clip, bool):
            raise TypeError(f"ClipGradByGlobalNorm: auto_skip_clip must be a bool, got "
                            f"{auto_skip_clip!r}")
        self.group_name, self.auto_skip_clip = group_name, auto_skip_clip

    def _clip(self, params_grads):
        pairs = [(p, g) for p, g in params_grads if g is not None]
        squares = [B.squared_l2_norm(g) for p, g in pairs if _needs_clip(p)]
        if not squares:
            return [(p, g, None) for p, g in pairs]
        if any(s.dtype == float64 for s in squares):
            squares = [s if s.dtype == float64 else B.cast(s, dtype=float64) for s in squares]
        scale = _norm_scale(reduce(B.add, squares), self.clip_norm)
        return [(p, g, scale if _needs_clip(p) else None) for p, g in pairs]

    def __str__(self) -> str:
        return f"Gradient Clip By GlobalNorm, global_norm={self.clip_norm:f}"
