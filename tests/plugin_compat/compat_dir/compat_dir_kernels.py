"""The kernels of compat_dir_ops, in a module of their own (imported by the op module:
load_directory puts the directory on sys.path)."""
import numpy as np


def softsign_forward(x):
    return (x / (1.0 + np.abs(x))).astype(x.dtype)


def softsign_backward(x, dy):
    d = 1.0 + np.abs(x)
    return (dy / (d * d)).astype(dy.dtype)


def pairsum_forward(x):
    return x[..., 0::2] + x[..., 1::2]


def pairsum_backward(x, dy):
    return np.repeat(dy, 2, axis=-1).astype(x.dtype)
