"""``fastop.save`` / ``fastop.load``: state dicts as ``.npz`` files, without pickle.

A state dict is a (possibly nested) dict of names to tensors, numpy arrays or Python
numbers — ``layer.state_dict()``, ``optimizer.state_dict()``, or a dict of both. Nested
names are joined with ``/`` inside the archive, which also holds a format marker, so a
file that fastop did not write is refused with a clear error instead of misread.

Writes are atomic: the archive goes to a temporary file in the target's directory,
is flushed to disk, then renamed over the target (``os.replace``). A crash mid-write
leaves the previous file intact. Loading never executes code: arrays are read with
``allow_pickle=False``, and object arrays are refused when saving.

>>> import numpy as np, fastop, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "model.pdparams")
>>> fastop.save({"fc.weight": np.ones((2, 3), "float32")}, path)
>>> fastop.load(path, return_numpy=True)["fc.weight"].shape
(2, 3)
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from typing import Any, Iterator, Mapping

import numpy as np

__all__ = ["save", "load", "LoadError"]

_MARKER = "__fastop_state_dict__"
_FORMAT_VERSION = 1
_SEP = "/"
_DTYPES = {np.dtype(n) for n in ("bool", "int32", "int64", "float32", "float64")}


class LoadError(ValueError):
    """A file is not a readable fastop state dict (truncated, corrupted or foreign)."""


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
        if array.dtype not in _DTYPES:
            raise TypeError(f"fastop.save({path!r}): '{name}' has dtype {array.dtype}; "
                            f"only bool, int32, int64, float32 and float64 are saved "
                            f"(no pickled objects)")
        yield name, array


def save(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write a state dict to `path` (an .npz archive), atomically."""
    path = os.fspath(path)
    if not isinstance(obj, Mapping):
        raise TypeError(f"fastop.save({path!r}): expected a state dict (a dict of names "
                        f"to tensors), got {type(obj).__name__}")
    arrays = dict(_flatten(obj, "", path))
    arrays[_MARKER] = np.array(_FORMAT_VERSION, dtype=np.int64)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # object dtypes were refused by _flatten
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make the rename durable (POSIX); a no-op where directories can't be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read(path: str) -> dict[str, np.ndarray]:
    foreign = LoadError(f"fastop.load: {path!r} is not a fastop state-dict file (no "
                        f"'{_MARKER}' entry); it was not written by fastop.save")
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise foreign
        with archive:
            if _MARKER not in archive.files:
                raise foreign
            version = int(archive[_MARKER])
            if version > _FORMAT_VERSION:
                raise LoadError(f"fastop.load: {path!r} has format version {version}; "
                                f"this fastop reads up to {_FORMAT_VERSION}")
            return {name: archive[name] for name in archive.files if name != _MARKER}
    except LoadError:
        raise
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise LoadError(f"fastop.load: cannot read {path!r}: the file is truncated, "
                        f"corrupted or not a fastop state dict ({exc})") from exc


def load(path: str | os.PathLike, return_numpy: bool = False) -> dict:
    """Read a state dict written by :func:`save`: a nested dict of Tensors (or numpy
    arrays with ``return_numpy=True``). Raises :class:`LoadError` naming the path for a
    truncated, corrupted or foreign file."""
    path = os.fspath(path)
    flat = _read(path)
    if not return_numpy:
        from fastop import from_numpy   # the freshly read arrays become Tensors, no copy
        flat = {name: from_numpy(array) for name, array in flat.items()}
    result: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, leaf = name.split(_SEP)
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return result
