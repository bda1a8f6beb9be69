"""PyLayer: a custom autograd op written in Python (PaddlePaddle's ``paddle.autograd.PyLayer``).

Subclass :class:`PyLayer` with two static methods and run it with ``apply``:

    >>> import fastop as paddle
    >>> from fastop.autograd import PyLayer
    >>> class cus_tanh(PyLayer):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         y = paddle.tanh(x)
    ...         ctx.save_for_backward(y)          # tensors backward needs
    ...         return y
    ...
    ...     @staticmethod
    ...     def backward(ctx, dy):                # one gradient per forward output
    ...         y, = ctx.saved_tensor()
    ...         return dy * (1 - paddle.square(y))   # one gradient per Tensor input
    >>> x = paddle.to_tensor([0.0, 1.0], dtype="float64", stop_gradient=False)
    >>> cus_tanh.apply(x).sum().backward()
    >>> x.grad.numpy().round(4).tolist()
    [1.0, 0.42]

``apply`` and the graph node live in the Cython engine (:mod:`fastop.autograd._py_layer`);
the context object *is* the node, so one call allocates one object.
"""
from __future__ import annotations

from typing import Any

from fastop.autograd import _py_layer

__all__ = ["PyLayer", "PyLayerContext"]


class PyLayerContext(_py_layer.PyLayerNode):
    """What ``forward`` and ``backward`` of a :class:`PyLayer` receive as ``ctx``.

    Call-site rules:

    * ``ctx.save_for_backward(*tensors)`` — in ``forward``, once; read them in
      ``backward`` with ``ctx.saved_tensor()`` (a tuple). Saved tensors are freed after
      backward unless ``retain_graph=True``; reading them after that raises. Saving
      forward's own outputs is fine (no reference cycle: fastop keeps the raw result).
    * Any other attribute (``ctx.func = f``, ``ctx.scale = 2``) is free-form storage
      for backward; avoid storing forward's outputs there (use save_for_backward).
    * ``ctx.mark_non_differentiable(*outputs)`` — in ``forward``, for returned tensors
      without gradient (indices, masks): they get ``stop_gradient=True``.
    * ``ctx.set_materialize_grads(False)`` — in ``forward``: backward then receives
      None (instead of zeros) for outputs that got no gradient.
    * ``ctx.needs_input_grad`` — a tuple of bools, one per Tensor input of forward
      (positional, then keyword): skip computing gradients nobody needs.
    """


class PyLayer:
    """Base class of Python-defined autograd ops. See the module docstring for an example.

    Rules (as PaddlePaddle documents them):

    1. ``forward(ctx, *args, **kwargs)`` and ``backward(ctx, *grads)`` are static
       methods; the first argument is a :class:`PyLayerContext`. forward runs without
       recording ops; it takes any arguments (Tensors, callables, numbers, keywords)
       and returns a Tensor or a tuple/list with at least one Tensor.
    2. ``backward`` receives one gradient per output of forward and returns one
       gradient per Tensor input of forward (positional Tensors, then keyword ones):
       a Tensor of the input's shape and dtype, or None for no gradient. A wrong count,
       shape or dtype raises an error naming the PyLayer.
    3. An exception raised in forward or backward propagates unchanged, with a note
       naming the PyLayer.

    If ``backward`` uses fastop ops, ``fastop.grad(..., create_graph=True)`` records it,
    so the PyLayer can be differentiated twice.
    """

    @staticmethod
    def forward(ctx: PyLayerContext, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a PyLayer subclass must define a static forward(ctx, ...)")

    @staticmethod
    def backward(ctx: PyLayerContext, *grads: Any) -> Any:
        raise NotImplementedError("a PyLayer subclass must define a static "
                                  "backward(ctx, *grads)")

    apply = classmethod(_py_layer.apply_py_layer)


_py_layer.set_context_type(PyLayerContext)
