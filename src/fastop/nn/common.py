"""Common layers: Linear, Sequential, activations, Flatten, Identity, Dropout,
Embedding."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterator

from fastop import initializer as _init
from fastop._core.linalg import ACTIVATIONS as FC_ACTIVATIONS
from fastop.nn import functional as F
from fastop.nn.layer import Layer

__all__ = ["Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
           "Flatten", "Identity", "Dropout", "Embedding"]


class Linear(Layer):
    """``y = x @ weight + bias`` with ``weight`` of shape ``[in_features, out_features]``.

    Weights default to XavierUniform, the bias to zeros; ``bias_attr=False`` drops the
    bias. Runs on the fused fc kernel.
    """

    def __init__(self, in_features: int, out_features: int, weight_attr: Any = None,
                 bias_attr: Any = None, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = self.create_parameter([self.in_features, self.out_features],
                                            attr=weight_attr,
                                            default_initializer=_init.XavierUniform())
        self.bias = self.create_parameter([self.out_features], attr=bias_attr, is_bias=True)

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"dtype={self._dtype.name}")


class Sequential(Layer):
    """Layers run one after another: ``Sequential(l1, l2)`` or with names,
    ``Sequential(("fc", l1), ("act", l2))``. Indexable and iterable.

    A :class:`Linear` directly followed by :class:`Tanh`, :class:`ReLU` or
    :class:`Sigmoid` runs as one fc op with the activation fused into its kernel (the
    same values and gradients, one pass less over the output).
    """

    def __init__(self, *layers: Any) -> None:
        super().__init__()
        named = len(layers) > 0 and all(isinstance(item, (tuple, list)) for item in layers)
        if len(layers) == 1 and isinstance(layers[0], (dict, OrderedDict)):
            items = list(layers[0].items())
        elif named:
            items = [(str(name), layer) for name, layer in layers]
        else:
            items = [(str(i), layer) for i, layer in enumerate(layers)]
        for name, layer in items:
            self.add_sublayer(name, layer)

    def forward(self, x: Any) -> Any:
        layers = [layer for layer in self._sub_layers.values() if layer is not None]
        i, n = 0, len(layers)
        while i < n:
            layer = layers[i]
            activation = _FUSED.get(type(layers[i + 1])) if i + 1 < n and \
                type(layer) is Linear else None
            if activation:
                x = F.linear(x, layer.weight, layer.bias, activation=activation)
                i += 2
            else:
                x = layer(x)
                i += 1
        return x

    def __getitem__(self, index: int | slice | str) -> Any:
        if isinstance(index, str):
            return self._sub_layers[index]
        layers = list(self._sub_layers.values())
        if isinstance(index, slice):
            return Sequential(*layers[index])
        return layers[index]

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(list(self._sub_layers.values()))


class ReLU(Layer):
    """max(x, 0)."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return F.relu(x)


class Tanh(Layer):
    def __init__(self, name: str | None = None) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return F.tanh(x)


class Sigmoid(Layer):
    def __init__(self, name: str | None = None) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return F.sigmoid(x)


class Softmax(Layer):
    def __init__(self, axis: int = -1, name: str | None = None) -> None:
        super().__init__()
        self.axis = axis

    def forward(self, x: Any) -> Any:
        return F.softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class LogSoftmax(Layer):
    def __init__(self, axis: int = -1, name: str | None = None) -> None:
        super().__init__()
        self.axis = axis

    def forward(self, x: Any) -> Any:
        return F.log_softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class Flatten(Layer):
    """Merge axes `start_axis`..`stop_axis` (by default all but the batch axis)."""

    def __init__(self, start_axis: int = 1, stop_axis: int = -1) -> None:
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, x: Any) -> Any:
        return F.flatten(x, self.start_axis, self.stop_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}, stop_axis={self.stop_axis}"


class Identity(Layer):
    """Returns its input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


# The activation layers whose op the fc kernel applies itself (its epilogues): a Linear
# followed by one of them runs as one fc op.
_FUSED = {layer: layer.__name__.lower() for layer in (Tanh, ReLU, Sigmoid)
          if layer.__name__.lower() in FC_ACTIVATIONS}


# -- regularization and lookup ---------------------------------------------------------

class Dropout(Layer):
    """Zero each element with probability `p` in training mode (``train()``); see
    :func:`fastop.nn.functional.dropout` for `axis` and the two modes. In evaluation
    mode (``eval()``) it is the identity (``"upscale_in_train"``) or a scaling by
    ``1 - p`` (``"downscale_in_infer"``)."""

    def __init__(self, p: float = 0.5, axis: int | list[int] | None = None,
                 mode: str = "upscale_in_train", name: str | None = None) -> None:
        super().__init__(name_scope=name)
        F.check_dropout_args("Dropout", p, mode)
        self.p, self.axis, self.mode = p, axis, mode

    def forward(self, x: Any) -> Any:
        return F.dropout(x, self.p, self.axis, self.training, self.mode)

    def extra_repr(self) -> str:
        return f"p={self.p}, axis={self.axis}, mode={self.mode}"


class Embedding(Layer):
    """A lookup table of `num_embeddings` rows of `embedding_dim` values: ids in, rows
    out (``x.shape + [embedding_dim]``). Rows of `padding_idx` (negative: from the
    end) come out as zeros and never train. `sparse` is accepted for PaddlePaddle
    compatibility (the gradient is dense). With `max_norm`, looked-up rows whose
    `norm_type`-norm exceeds it are scaled down in place first (:func:`F.embedding`).
    The weight defaults to XavierUniform."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 padding_idx: int | None = None, max_norm: float | None = None,
                 norm_type: float = 2.0, sparse: bool = False,
                 weight_attr: Any = None, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        self._num_embeddings, self._embedding_dim = int(num_embeddings), int(embedding_dim)
        if self._num_embeddings <= 0 or self._embedding_dim <= 0:
            raise ValueError(f"Embedding: num_embeddings and embedding_dim must be "
                             f"positive, got {num_embeddings} and {embedding_dim}")
        if padding_idx is not None and not -self._num_embeddings <= padding_idx < \
                self._num_embeddings:
            raise ValueError(f"Embedding: padding_idx must be in [-{num_embeddings}, "
                             f"{num_embeddings}), got {padding_idx}")
        self._padding_idx = None if padding_idx is None else \
            padding_idx % self._num_embeddings
        self._sparse = bool(sparse)
        self._max_norm, self._norm_type = max_norm, float(norm_type)
        self.weight = self.create_parameter([self._num_embeddings, self._embedding_dim],
                                            attr=weight_attr)

    def forward(self, x: Any) -> Any:
        return F.embedding(x, self.weight, self._padding_idx, max_norm=self._max_norm,
                           norm_type=self._norm_type, sparse=self._sparse)

    def extra_repr(self) -> str:
        return (f"{self._num_embeddings}, {self._embedding_dim}, "
                f"padding_idx={self._padding_idx}, sparse={self._sparse}")
