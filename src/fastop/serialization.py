"""``fastop.save`` / ``fastop.load``: state dicts as ``.npz`` files, without pickle.

A state dict is a (possibly nested) dict of names to tensors, numpy arrays or Python
numbers — ``layer.state_dict()``, ``optimizer.state_dict()``, or a dict of both. Nested
names are joined with ``/`` inside the archive, which also holds a format marker, so a
file that fastop did not write is refused with a clear error instead of misread.

Writes are atomic (:func:`fastop._files.atomic_write`): a crash mid-write leaves the
previous file intact, and at most a temporary that the next save of the path removes.
Loading never executes code and trusts nothing in the file: every malformed,
truncated, crafted or foreign file raises :class:`LoadError` naming the file and the
problem, before anything larger than the file could hold is allocated.

>>> import numpy as np, fastop, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "model.pdparams")
>>> fastop.save({"fc.weight": np.ones((2, 3), "float32")}, path)
>>> fastop.load(path, return_numpy=True)["fc.weight"].shape
(2, 3)
"""
from __future__ import annotations

import os
from typing import Any, Iterator, Mapping

import numpy as np

from fastop._files import (SAVED_DTYPE_NAMES, SAVED_DTYPES, LoadError, UntrustedCodeError,
                           atomic_write, read_npz)
from fastop._tensor import from_numpy_tensor

__all__ = ["save", "load", "LoadError", "UntrustedCodeError"]

_MARKER = "__fastop_state_dict__"
_FORMAT_VERSION = 1
_SEP = "/"


def _flatten(obj: Mapping[str, Any], prefix: str, path: str) -> Iterator[tuple[str, np.ndarray]]:
    for key, value in obj.items():
        if not isinstance(key, str) or not key or _SEP in key or key == _MARKER:
            raise ValueError(f"fastop.save({path!r}): state-dict keys must be non-empty "
                             f"strings without {_SEP!r}, got {key!r}")
        name = prefix + key
        if isinstance(value, Mapping):
            if not value:
                raise ValueError(f"fastop.save({path!r}): '{name}' is an empty dict, "
                                 f"which the format cannot represent")
            yield from _flatten(value, name + _SEP, path)
            continue
        if not (hasattr(value, "__array__") or hasattr(value, "__array_interface__")
                or isinstance(value, (bool, int, float, np.generic))):
            raise TypeError(f"fastop.save({path!r}): '{name}' must be a tensor, array or "
                            f"number, got {type(value).__name__}")
        array = np.asarray(value)
        if array.dtype not in SAVED_DTYPES:
            raise TypeError(f"fastop.save({path!r}): '{name}' has dtype {array.dtype}; "
                            f"only {SAVED_DTYPE_NAMES} are saved (no pickled objects)")
        yield name, array


def save(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write a state dict to `path` (an .npz archive), atomically."""
    path = os.fspath(path)
    if not isinstance(obj, Mapping):
        raise TypeError(f"fastop.save({path!r}): expected a state dict (a dict of names "
                        f"to tensors), got {type(obj).__name__}")
    arrays = dict(_flatten(obj, "", path))
    arrays[_MARKER] = np.array(_FORMAT_VERSION, dtype=np.int64)
    atomic_write(path, lambda f: np.savez(f, **arrays))  # object dtypes were refused


def _read(path: str) -> dict[str, np.ndarray]:
    arrays = read_npz(path, "fastop.load", "a fastop state-dict file")
    marker = arrays.pop(_MARKER, None)
    if marker is None:
        raise LoadError(f"fastop.load: {path!r} is not a fastop state-dict file (no "
                        f"'{_MARKER}' entry); it was not written by fastop.save")
    if marker.shape != () or marker.dtype != np.int64:
        raise LoadError(f"fastop.load: {path!r} has a malformed format marker "
                        f"({marker.dtype}{list(marker.shape)})")
    if int(marker) > _FORMAT_VERSION or int(marker) < 1:
        raise LoadError(f"fastop.load: {path!r} has format version {int(marker)}; this "
                        f"fastop reads 1 to {_FORMAT_VERSION}")
    return arrays


def _nest(flat: dict[str, Any], path: str) -> dict[str, Any]:
    """``{"a/b": v}`` -> ``{"a": {"b": v}}``; names that cannot nest are a LoadError."""
    result: dict[str, Any] = {}
    for name, value in flat.items():
        parts = name.split(_SEP)
        if not all(parts):
            raise LoadError(f"fastop.load: cannot read {path!r}: {name!r} is not a valid name "
                            f"(an empty part between '{_SEP}')")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise LoadError(f"fastop.load: cannot read {path!r}: "
                                f"'{_SEP.join(parts[:depth + 1])}' is both a value and a "
                                f"dict (of {name!r})")
            node = child
        if parts[-1] in node:
            what = "a dict" if isinstance(node[parts[-1]], dict) else "a value"
            raise LoadError(f"fastop.load: cannot read {path!r}: {name!r} is both a value and "
                            f"{what} (of its other entries)")
        node[parts[-1]] = value
    return result


def load(path: str | os.PathLike, return_numpy: bool = False) -> dict:
    """Read a state dict written by :func:`save`: a nested dict of Tensors (or numpy
    arrays with ``return_numpy=True``). Raises :class:`LoadError` naming the path for a
    truncated, corrupted or foreign file."""
    path = os.fspath(path)
    flat = _read(path)
    if not return_numpy:
        # the freshly read arrays become Tensors, no copy
        flat = {name: from_numpy_tensor(array) for name, array in flat.items()}
    return _nest(flat, path)
