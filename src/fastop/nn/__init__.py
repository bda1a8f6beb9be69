"""Neural-network layers, losses, functional ops and initializers, for eager and static
mode alike (everything computes through registered ops)."""
from fastop.nn import functional, initializer
from fastop.nn.common import (Flatten, Identity, Linear, LogSoftmax, ReLU, Sequential,
                              Sigmoid, Softmax, Tanh)
from fastop.nn.layer import Layer, ParamAttr
from fastop.nn.loss import CrossEntropyLoss, L1Loss, MSELoss

__all__ = ["Layer", "ParamAttr", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid",
           "Softmax", "LogSoftmax", "Flatten", "Identity", "CrossEntropyLoss", "MSELoss",
           "L1Loss", "functional", "initializer"]
