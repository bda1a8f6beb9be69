"""Containers of layers and parameters (PaddlePaddle's ``LayerList``, ``LayerDict``,
``ParameterList``): their items are registered like attributes, so parameters,
``state_dict``, ``train()``/``eval()`` and ``to()`` reach into them.

>>> from fastop import nn
>>> blocks = nn.LayerList([nn.Linear(4, 4) for _ in range(3)])
>>> len(blocks.append(nn.ReLU())), [name for name, _ in blocks.named_parameters()][:2]
(4, ['0.weight', '0.bias'])
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from fastop._errors import ArgumentTypeError
from fastop.nn.layer import Layer, is_parameter

__all__ = ["LayerList", "LayerDict", "ParameterList"]


def _index(where: str, index: int, length: int) -> int:
    """A list index (negative: from the end) as a position in [0, length)."""
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"{where}: index must be an int, got {type(index).__name__}")
    if not -length <= index < length:
        raise IndexError(f"{where}: index {index} is out of range for {length} items")
    return index + length if index < 0 else index


class LayerList(Layer):
    """A list of sublayers, registered as ``"0"``, ``"1"``, ... (renumbered on insert
    and delete). Indexing with a slice gives a new LayerList of the same layers."""

    def __init__(self, sublayers: Iterable[Layer] | None = None) -> None:
        super().__init__()
        for layer in sublayers or ():
            self.append(layer)

    def _renumber(self, layers: list[Layer]) -> None:
        self._sub_layers.clear()
        for i, layer in enumerate(layers):
            self.add_sublayer(str(i), layer)

    def __getitem__(self, index: int | slice) -> Any:
        layers = list(self._sub_layers.values())
        if isinstance(index, slice):
            return LayerList(layers[index])
        return layers[_index("LayerList", index, len(layers))]

    def __setitem__(self, index: int, layer: Layer) -> None:
        i = _index("LayerList", index, len(self))
        self.add_sublayer(str(i), layer)

    def __delitem__(self, index: int | slice) -> None:
        layers = list(self._sub_layers.values())
        if isinstance(index, slice):
            del layers[index]
        else:
            del layers[_index("LayerList", index, len(layers))]
        self._renumber(layers)

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(list(self._sub_layers.values()))

    def append(self, sublayer: Layer) -> "LayerList":
        self.add_sublayer(str(len(self)), sublayer)
        return self

    def insert(self, index: int, sublayer: Layer) -> None:
        if not isinstance(sublayer, Layer):
            raise TypeError(f"LayerList.insert: expected a Layer, got "
                            f"{type(sublayer).__name__}")
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"LayerList.insert: index must be an int, got "
                            f"{type(index).__name__}")
        layers = list(self._sub_layers.values())
        layers.insert(index, sublayer)          # list.insert's clamping, as Paddle's
        self._renumber(layers)

    def extend(self, sublayers: Iterable[Layer]) -> "LayerList":
        for layer in sublayers:
            self.append(layer)
        return self


class LayerDict(Layer):
    """An ordered dict of sublayers by name."""

    def __init__(self, sublayers: Mapping[str, Layer] | Iterable[tuple[str, Layer]] | None
                 = None) -> None:
        super().__init__()
        if sublayers is not None:
            self.update(sublayers)

    def __getitem__(self, key: str) -> Layer:
        try:
            return self._sub_layers[key]
        except KeyError:
            raise KeyError(f"LayerDict has no sublayer {key!r}; it has "
                           f"{list(self._sub_layers)}") from None

    def __setitem__(self, key: str, sublayer: Layer) -> None:
        self.add_sublayer(key, sublayer)

    def __delitem__(self, key: str) -> None:
        self[key]                              # the KeyError naming the keys
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._sub_layers))

    def __contains__(self, key: object) -> bool:
        return key in self._sub_layers

    def clear(self) -> None:
        for key in list(self._sub_layers):
            delattr(self, key)

    def pop(self, key: str) -> Layer:
        layer = self[key]
        del self[key]
        return layer

    def keys(self) -> Iterable[str]:
        return self._sub_layers.keys()

    def items(self) -> Iterable[tuple[str, Layer]]:
        return self._sub_layers.items()

    def values(self) -> Iterable[Layer]:
        return self._sub_layers.values()

    def update(self, sublayers: Mapping[str, Layer] | Iterable[tuple[str, Layer]]) -> None:
        """Add (or replace) sublayers from a mapping or from (name, layer) pairs
        (PaddlePaddle's errors: not iterable, an AssertionError that is also a
        TypeError; an item that is not a pair, a ValueError)."""
        if not isinstance(sublayers, Iterable):
            raise ArgumentTypeError(f"LayerDict.update: sublayers must be a mapping or an "
                                    f"iterable of (name, layer) pairs, got "
                                    f"{type(sublayers).__name__}")
        items = sublayers.items() if isinstance(sublayers, Mapping) else sublayers
        for i, item in enumerate(items):
            if isinstance(sublayers, Mapping):
                key, layer = item
            else:
                if not isinstance(item, (tuple, list)) or len(item) != 2:
                    raise ValueError(f"LayerDict.update: item {i} must be a (name, layer) "
                                     f"pair, got {item!r:.60}")
                key, layer = item
            self[key] = layer


class ParameterList(Layer):
    """A list of parameters, registered as ``"0"``, ``"1"``, ..."""

    def __init__(self, parameters: Iterable[Any] | None = None) -> None:
        super().__init__()
        for param in parameters or ():
            self.append(param)

    def __getitem__(self, index: int) -> Any:
        params = list(self._parameters.values())
        return params[_index("ParameterList", index, len(params))]

    def __setitem__(self, index: int, param: Any) -> None:
        self.add_parameter(str(_index("ParameterList", index, len(self))),
                           self._checked(param))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._parameters.values()))

    def append(self, parameter: Any) -> "ParameterList":
        self.add_parameter(str(len(self)), self._checked(parameter))
        return self

    @staticmethod
    def _checked(param: Any) -> Any:
        if not is_parameter(param) and not hasattr(param, "stop_gradient"):
            raise TypeError(f"ParameterList: expected a parameter (a tensor), got "
                            f"{type(param).__name__}")
        return param

