"""Parameter initializers: small objects that draw a numpy array for a shape and dtype.

``init(shape, dtype)`` draws from fastop's global generator (:mod:`fastop._random`),
so ``fastop.seed(n)`` makes parameter init reproducible; pass ``generator=`` to draw
from another one (a static startup op carrying its own seed does). ``config()`` returns
a flat dict of plain values and :func:`from_config` rebuilds the initializer from it,
so a static program can store an initializer as op attributes.

Fans follow PaddlePaddle: a 2-D weight ``[in, out]`` has ``fan_in = in`` and
``fan_out = out``; a conv weight ``[out_c, in_c, *k]`` multiplies both by ``prod(k)``.

>>> import fastop
>>> from fastop.initializer import XavierUniform
>>> _ = fastop.seed(0)
>>> XavierUniform()([784, 256], "float32").shape
(784, 256)
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np

from fastop import _random
from fastop._core.storage import as_dtype

__all__ = ["Initializer", "Constant", "Normal", "Uniform", "TruncatedNormal",
           "XavierNormal", "XavierUniform", "KaimingNormal", "KaimingUniform",
           "calculate_gain", "compute_fans", "from_config"]


def compute_fans(shape: Sequence[int]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shape, PaddlePaddle's convention."""
    shape = [int(d) for d in shape]
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended init gain for a nonlinearity (as ``paddle.nn.initializer``)."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


class Initializer:
    """Base class: subclasses implement :meth:`draw`; their ``__init__`` arguments are
    the config (stored as attributes of the same names)."""

    _params: ClassVar[tuple[str, ...]] = ()

    def __call__(self, shape: Sequence[int], dtype: Any = "float32",
                 generator: np.random.Generator | None = None) -> np.ndarray:
        """A new array of `shape` and `dtype` (C-contiguous)."""
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"{type(self).__name__}: cannot initialize a parameter of "
                             f"unknown or negative shape {list(shape)}")
        np_dtype = as_dtype(dtype).numpy_dtype
        rng = _random.generator() if generator is None else generator
        return np.ascontiguousarray(self.draw(shape, rng), dtype=np_dtype)

    def draw(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """Plain values (str, float, int, None) that :func:`from_config` rebuilds this from."""
        return {"type": type(self).__name__, **{k: getattr(self, k) for k in self._params}}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Initializer) and self.config() == other.config()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._params)
        return f"{type(self).__name__}({args})"


class Constant(Initializer):
    """Every element is `value`."""

    _params = ("value",)

    def __init__(self, value: float = 0.0) -> None:
        self.value = float(value)

    def draw(self, shape, rng):
        return np.full(shape, self.value)


class Normal(Initializer):
    """Gaussian N(mean, std^2)."""

    _params = ("mean", "std")

    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        self.mean, self.std = float(mean), float(std)

    def draw(self, shape, rng):
        return rng.normal(self.mean, self.std, shape)


class TruncatedNormal(Initializer):
    """Gaussian N(mean, std^2) redrawn outside [mean - 2 std, mean + 2 std]."""

    _params = ("mean", "std")

    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        self.mean, self.std = float(mean), float(std)

    def draw(self, shape, rng):
        out = rng.standard_normal(shape)
        bad = np.abs(out) > 2.0
        while bad.any():
            out[bad] = rng.standard_normal(int(bad.sum()))
            bad = np.abs(out) > 2.0
        return self.mean + self.std * out


class Uniform(Initializer):
    """Uniform on [low, high)."""

    _params = ("low", "high")

    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        if low > high:
            raise ValueError(f"Uniform: low ({low}) must not exceed high ({high})")
        self.low, self.high = float(low), float(high)

    def draw(self, shape, rng):
        return rng.uniform(self.low, self.high, shape)


class _Fans(Initializer):
    """Shared by the Xavier/Kaiming family: fans given or computed from the shape."""

    def fans(self, shape: tuple[int, ...]) -> tuple[int, int]:
        fan_in, fan_out = compute_fans(shape)
        given_in = getattr(self, "fan_in", None)
        given_out = getattr(self, "fan_out", None)
        return (fan_in if given_in is None else given_in,
                fan_out if given_out is None else given_out)


class XavierUniform(_Fans):
    """Glorot uniform: limit = gain * sqrt(6 / (fan_in + fan_out)); Linear's default."""

    _params = ("fan_in", "fan_out", "gain")

    def __init__(self, fan_in: int | None = None, fan_out: int | None = None,
                 gain: float = 1.0) -> None:
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, float(gain)

    def draw(self, shape, rng):
        fan_in, fan_out = self.fans(shape)
        limit = self.gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
        return rng.uniform(-limit, limit, shape)


class XavierNormal(_Fans):
    """Glorot normal: std = gain * sqrt(2 / (fan_in + fan_out))."""

    _params = ("fan_in", "fan_out", "gain")

    def __init__(self, fan_in: int | None = None, fan_out: int | None = None,
                 gain: float = 1.0) -> None:
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, float(gain)

    def draw(self, shape, rng):
        fan_in, fan_out = self.fans(shape)
        return rng.normal(0.0, self.gain * math.sqrt(2.0 / max(fan_in + fan_out, 1)), shape)


class KaimingNormal(_Fans):
    """He normal: std = gain / sqrt(fan_in), gain from the nonlinearity."""

    _params = ("fan_in", "negative_slope", "nonlinearity")

    def __init__(self, fan_in: int | None = None, negative_slope: float = 0.0,
                 nonlinearity: str = "relu") -> None:
        calculate_gain(nonlinearity, negative_slope)  # validate early
        self.fan_in, self.negative_slope = fan_in, float(negative_slope)
        self.nonlinearity = nonlinearity

    def draw(self, shape, rng):
        gain = calculate_gain(self.nonlinearity, self.negative_slope)
        return rng.normal(0.0, gain / math.sqrt(max(self.fans(shape)[0], 1)), shape)


class KaimingUniform(_Fans):
    """He uniform: limit = gain * sqrt(3 / fan_in), gain from the nonlinearity."""

    _params = ("fan_in", "negative_slope", "nonlinearity")

    def __init__(self, fan_in: int | None = None, negative_slope: float = 0.0,
                 nonlinearity: str = "relu") -> None:
        calculate_gain(nonlinearity, negative_slope)
        self.fan_in, self.negative_slope = fan_in, float(negative_slope)
        self.nonlinearity = nonlinearity

    def draw(self, shape, rng):
        gain = calculate_gain(self.nonlinearity, self.negative_slope)
        limit = gain * math.sqrt(3.0 / max(self.fans(shape)[0], 1))
        return rng.uniform(-limit, limit, shape)


_TYPES: dict[str, type[Initializer]] = {cls.__name__: cls for cls in (
    Constant, Normal, TruncatedNormal, Uniform, XavierUniform, XavierNormal,
    KaimingNormal, KaimingUniform)}


def from_config(config: dict[str, Any]) -> Initializer:
    """Rebuild an initializer from :meth:`Initializer.config`."""
    config = dict(config)
    name = config.pop("type", None)
    cls = _TYPES.get(name)
    if cls is None:
        raise ValueError(f"from_config: unknown initializer type {name!r}; expected one "
                         f"of {sorted(_TYPES)}")
    return cls(**config)
