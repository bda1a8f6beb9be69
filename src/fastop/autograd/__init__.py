"""Autograd: grad mode, backward/grad, PyLayer (Python-defined ops), gradient checks,
backward-end hooks and leaf gradient hooks.

The engine is Cython, one module per job: ``_grad_mode`` (per-thread recording switch),
``_node`` (the graph node base class and its checks), ``_graph`` (recording: registry
ops' nodes, saved-tensor hooks), ``_backward`` (the backward walk), ``_eager`` (how an op
call computes in eager mode: the eager half of the one dispatch entry) and ``_py_layer``
(PyLayer's context and ``apply``).
"""
from fastop.autograd import _eager  # noqa: F401  (installs the eager dispatcher)
from fastop.autograd._grad_mode import (enable_grad, is_grad_enabled, no_grad,
                                        set_grad_enabled)
from fastop.autograd._backward import backward, grad
from fastop.autograd.py_layer import PyLayer, PyLayerContext
from fastop.autograd.saved_tensors_hooks import saved_tensors_hooks
from fastop.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from fastop.autograd.hooks import (HookRemoveHelper, register_backward_end_hook,
                                   register_leaf_grad_hook)

__all__ = ["PyLayer", "PyLayerContext", "backward", "grad", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "saved_tensors_hooks", "gradcheck",
           "gradgradcheck", "GradcheckError", "register_backward_end_hook", "HookRemoveHelper",
           "register_leaf_grad_hook"]
