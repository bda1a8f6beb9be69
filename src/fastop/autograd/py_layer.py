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

__all__ = ["PyLayer", "PyLayerContext", "BackwardNotImplementedError"]


class BackwardNotImplementedError(NotImplementedError, OSError):
    """Backward through a PyLayer that defines no ``backward``.

    A NotImplementedError, and an OSError too: PaddlePaddle reports any failure of a
    PyLayer's backward as its ``External`` error, which Python sees as OSError, so code
    written for either framework catches it.
    """


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
    * ``ctx.mark_not_inplace(*inputs)`` — in ``forward``, for inputs it returns
      unmodified (otherwise returning an input counts as modifying it in place).
    * ``ctx.set_materialize_grads(False)`` — in ``forward``: backward then receives
      None (instead of zeros) for outputs that got no gradient.
    * ``ctx.set_grad_in_dtype_consistent(False)`` — in ``forward``: backward receives
      gradients in the dtype they were computed in, not cast to the outputs' dtypes.
    * ``ctx.needs_input_grad`` — a tuple of bools, one per input slot of forward (a
      Tensor argument, or a list/tuple argument holding Tensors; positional, then
      keyword): skip computing gradients nobody needs.
    """


class PyLayer:
    """Base class of Python-defined autograd ops. See the module docstring for an example.

    Rules (as PaddlePaddle documents them):

    1. ``forward(ctx, *args, **kwargs)`` and ``backward(ctx, *grads)`` are static
       methods; the first argument is a :class:`PyLayerContext`. forward runs without
       recording ops; it takes any arguments (Tensors, lists of Tensors, callables,
       numbers, keywords) and returns a Tensor or a tuple/list with at least one Tensor
       (else ValueError). Every Tensor output carries a gradient, whatever its dtype,
       unless marked non-differentiable.
    2. ``backward`` receives one gradient per Tensor output of forward (a list of them
       for an output that is a list of Tensors) and returns one entry per input slot
       of forward — a Tensor argument, or a list/tuple argument holding Tensors
       (positional, then keyword) — as a tuple (a lone entry may be returned bare): a
       Tensor of the input's shape, or None for no gradient; a list of them for a list
       slot. Entries may be left off at the end for inputs that need no gradient. A
       gradient in another dtype than its input's is cast to it. Too many entries,
       a missing one, a value that is not a Tensor, or a wrong shape raise ValueError
       naming the PyLayer.
    3. An exception raised in forward or backward propagates unchanged, with a note
       naming the PyLayer.
    4. A forward that returns an input Tensor itself modifies it in place (see
       :meth:`PyLayerContext.mark_not_inplace`).

    If ``backward`` uses fastop ops, ``fastop.grad(..., create_graph=True)`` records it,
    so the PyLayer can be differentiated twice.
    """

    @staticmethod
    def forward(ctx: PyLayerContext, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a PyLayer subclass must define a static forward(ctx, ...)")

    @staticmethod
    def backward(ctx: PyLayerContext, *grads: Any) -> Any:
        raise BackwardNotImplementedError("a PyLayer subclass must define a static "
                                          "backward(ctx, *grads) to be differentiated")

    apply = classmethod(_py_layer.apply_py_layer)


_py_layer.set_context_type(PyLayerContext)
