"""Autograd: grad mode, backward/grad, PyLayer (Python-defined ops), gradient checks and
backward-end hooks."""
from fastop.autograd._engine import (backward, enable_grad, grad, is_grad_enabled,
                                     no_grad, set_grad_enabled)
from fastop.autograd.py_layer import PyLayer, PyLayerContext
from fastop.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from fastop.autograd.hooks import HookRemoveHelper, register_backward_end_hook

__all__ = ["PyLayer", "PyLayerContext", "backward", "grad", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "gradcheck", "gradgradcheck",
           "GradcheckError", "register_backward_end_hook", "HookRemoveHelper"]
