"""Eager mode: Tensor, creation functions, math functions and autograd entry points.

Every name here is re-exported as ``fastop.<name>``. The functions have PaddlePaddle's
signatures and are grouped as Paddle groups them (``creation``, ``math``,
``manipulation``, ``logic``, ``search``); each calls a registry op (``fastop.tanh``
runs ``fastop.ops.fastop.tanh``) through the one dispatch entry, so they also work on
static-mode variables. The ones Paddle also has as Tensor methods are bound as such
(``x.sum()`` is ``fastop.sum(x)``).

For another layer that needs trainable tensors (parameters): make them with
``fastop.to_tensor(array, stop_gradient=False)`` (a copy) and update their values in
place with ``Tensor.set_value(array)``.
"""
from fastop import autograd as _autograd  # noqa: F401  (the eager dispatcher)
from fastop._tensor import Tensor
from fastop.tensor._common import tensor_methods
from fastop.autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from fastop.tensor import manipulation as _manipulation, math as _math
from fastop.tensor.creation import *  # noqa: F401,F403
from fastop.tensor.inplace import *  # noqa: F401,F403
from fastop.tensor.inplace import __all__ as _inplace_all
from fastop.tensor.creation import __all__ as _creation_all
from fastop.tensor.logic import *  # noqa: F401,F403
from fastop.tensor.logic import __all__ as _logic_all
from fastop.tensor.manipulation import *  # noqa: F401,F403
from fastop.tensor.manipulation import __all__ as _manipulation_all
from fastop.tensor.math import *  # noqa: F401,F403
from fastop.tensor.math import __all__ as _math_all
from fastop.tensor.search import *  # noqa: F401,F403
from fastop.tensor.search import __all__ as _search_all

__all__ = ["Tensor", *_creation_all, *_math_all, *_manipulation_all, *_logic_all,
           *_search_all, *_inplace_all, "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "grad"]

# Tensor methods: the functions themselves (Paddle's tensor_method_func)
tensor_methods({name: getattr(module, name) for module, names in (
    (_math, ("tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul",
             "add", "subtract", "multiply", "divide", "pow", "neg", "mean", "sum", "max")),
    (_manipulation, ("reshape", "transpose", "concat")),
) for name in names})
