"""Neural-network layers, losses, functional ops and initializers, for eager and static
mode alike (everything computes through registered ops)."""
from fastop.nn import functional, initializer
from fastop.nn.activation import GELU, LeakyReLU, SiLU, Softplus
from fastop.nn.clip import (ClipGradBase, ClipGradByGlobalNorm, ClipGradByNorm,
                            ClipGradByValue)
from fastop.nn.common import (Dropout, Embedding, Flatten, Identity, Linear, LogSoftmax,
                              ReLU, Sequential, Sigmoid, Softmax, Tanh)
from fastop.nn.container import LayerDict, LayerList, ParameterList
from fastop.nn.layer import Layer, ParamAttr
from fastop.nn.loss import CrossEntropyLoss, L1Loss, MSELoss
from fastop.nn.norm import BatchNorm1D, LayerNorm

__all__ = ["Layer", "ParamAttr", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid",
           "Softmax", "LogSoftmax", "Flatten", "Identity", "CrossEntropyLoss", "MSELoss",
           "L1Loss", "functional", "initializer", "LayerList", "LayerDict",
           "ParameterList", "Dropout", "Embedding", "LayerNorm", "BatchNorm1D", "GELU",
           "SiLU", "LeakyReLU", "Softplus", "ClipGradBase", "ClipGradByValue",
           "ClipGradByNorm", "ClipGradByGlobalNorm", "Conv1D", "Conv2D", "utils"]


def __getattr__(name: str):
    # fastop.nn.conv loads on first use of Conv1D/Conv2D: its bytecode alone is ~0.7 % of the
    # instructions of `import fastop` (callgrind), which most scripts never use
    if name in ("Conv1D", "Conv2D"):
        from fastop.nn import conv
        return getattr(conv, name)
    if name == "utils":                  # paddle.nn.utils.clip_grad_norm_ & co.
        from importlib import import_module
        return import_module("fastop.nn.utils")   # importing sets the attribute
    raise AttributeError(f"module 'fastop.nn' has no attribute '{name}'")
