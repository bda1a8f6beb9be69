"""``fastop.nn.initializer``: the parameter initializers of :mod:`fastop.initializer`."""
from fastop.initializer import (Constant, Initializer, KaimingNormal, KaimingUniform,
                                Normal, TruncatedNormal, Uniform, XavierNormal,
                                XavierUniform, calculate_gain)

__all__ = ["Constant", "Initializer", "KaimingNormal", "KaimingUniform", "Normal",
           "TruncatedNormal", "Uniform", "XavierNormal", "XavierUniform", "calculate_gain"]
