"""numpy twins of the random kernels (:mod:`fastop._core.random`).

The mask of a private stream (the ``seed`` attribute) is reproduced bit for bit:
element q of a call keeps the low (q even) or high (q odd) 32 bits of SplitMix64 word
q // 2, i.e. ``mix(key + (q // 2 + 1) * golden)`` minus one golden step, with the key
derived from the seed as ``random_impl.c`` does.
"""
from __future__ import annotations

import numpy as np

__all__ = ["rng_key", "stream_bits", "dropout_scale", "dropout", "dropout_grad"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def rng_key(seed: int) -> np.uint64:
    """The key of the private stream of `seed`."""
    with np.errstate(over="ignore"):
        first = _mix64(np.array([seed], dtype=np.uint64) + _GOLDEN)
        return _mix64(first ^ np.uint64(0x6A09E667F3BCC909))[0]


def stream_bits(key: np.uint64, count: int, word0: int = 0) -> np.ndarray:
    """32 random bits (uint64 values) for elements 0 .. count-1 of a call."""
    words = np.arange(word0, word0 + (count + 1) // 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = _mix64(key + words * _GOLDEN)
    halves = np.stack([mixed & np.uint64(0xFFFFFFFF), mixed >> np.uint64(32)], axis=1)
    return halves.reshape(-1)[:count]


def dropout_scale(p: float, mode: str) -> float:
    """The factor of kept elements."""
    if mode == "downscale_in_infer" or p == 0.0:
        return 1.0
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)


def dropout(x: np.ndarray, p: float = 0.5, mode: str = "upscale_in_train",
            seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(out, mask) of the kernel with a nonzero `seed` attribute."""
    threshold = np.uint64(min(round(p * 2.0 ** 32), 2 ** 32))
    mask = (stream_bits(rng_key(seed), x.size) >= threshold).reshape(x.shape)
    return dropout_grad(mask, x, p, mode), mask


def dropout_grad(mask: np.ndarray, dout: np.ndarray, p: float = 0.5,
                 mode: str = "upscale_in_train") -> np.ndarray:
    """dout * mask * scale."""
    return np.where(mask, dout * dout.dtype.type(dropout_scale(p, mode)),
                    dout.dtype.type(0)).astype(dout.dtype)
