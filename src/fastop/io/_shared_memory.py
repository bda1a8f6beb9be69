"""Batch arrays from a worker process to the main process through shared memory.

A worker writes each large array of a batch to a fresh file in a memory-backed
directory (``/dev/shm``, where POSIX shared memory lives on Linux; the temporary
directory elsewhere, as joblib does) and sends only its name, shape and dtype. The main
process maps the file with ``numpy.memmap``, unlinks it at once and wraps the mapping in
a Tensor without a copy: the pages are freed when the last Tensor over them is. Plain
files rather than ``multiprocessing.shared_memory``, because a ``SharedMemory`` can be
closed (unmapped) under a live numpy array, and must be closed to release its file
descriptor; a memmap is released by reference counting alone.

Small arrays travel inside the pickled message instead: a file's open, write, mmap,
page faults and unlink cost ~150-200 us on the reference VM, against 60-85 us for
pickling 64 KiB through a socket and back; at 256 KiB the file took 400 us and the
socket 670-780 us (the copies dominate), so the threshold sits between.

File names carry the main process's pid and a per-pool token, so a pool removes what
its workers wrote but nobody received, and a new pool removes the files of processes
that died before they could.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from itertools import count
from typing import Any

import numpy as np

from fastop._tensor import Tensor
from fastop.io._fetch import map_leaves, tensor_of_fresh_array

__all__ = ["SharedArray", "shm_directory", "new_prefix", "share_batch", "receive_batch",
           "release_batch", "remove_files", "remove_stale_files"]

# Arrays smaller than this are pickled into the message (see the module docstring).
MIN_SHARED_BYTES = 128 * 1024
_FILE_TAG = "fastop-io-"


def shm_directory() -> str:
    """Where batch files are written: /dev/shm when usable, else the temp directory."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def new_prefix() -> str:
    """A file-name prefix unique to one worker pool of this process."""
    return f"{_FILE_TAG}{os.getpid()}-{secrets.token_hex(4)}-"


class SharedArray:
    """A reference to an array a worker wrote to a shared-memory file."""

    __slots__ = ("path", "shape", "dtype")

    def __init__(self, path: str, shape: tuple[int, ...], dtype: str) -> None:
        self.path, self.shape, self.dtype = path, shape, dtype

    def __getstate__(self) -> tuple:
        return self.path, self.shape, self.dtype

    def __setstate__(self, state: tuple) -> None:
        self.path, self.shape, self.dtype = state


def share_batch(batch: Any, path_prefix: str | None) -> Any:
    """Worker side: `batch` with its large arrays written to shared memory (none when
    `path_prefix` is None: use_shared_memory=False). Tensors travel as arrays."""
    serial = count()

    def share(leaf: Any) -> Any:
        if isinstance(leaf, Tensor):
            leaf = leaf.numpy()
        if path_prefix is None or not isinstance(leaf, np.ndarray) \
                or leaf.nbytes < MIN_SHARED_BYTES or leaf.dtype.hasobject:
            return leaf
        path = f"{path_prefix}{next(serial)}-{secrets.token_hex(4)}"
        with open(path, "xb") as f:
            f.write(np.ascontiguousarray(leaf).data)
        return SharedArray(path, leaf.shape, leaf.dtype.str)

    return map_leaves(batch, share)


def _receive_leaf(leaf: Any) -> Any:
    if isinstance(leaf, SharedArray):
        try:
            mapped = np.memmap(leaf.path, dtype=np.dtype(leaf.dtype), mode="r+",
                               shape=leaf.shape)
        finally:
            os.unlink(leaf.path)
        return tensor_of_fresh_array(mapped.view(np.ndarray))
    return tensor_of_fresh_array(leaf)


def receive_batch(batch: Any) -> Any:
    """Main side: the batch with every array (shared or pickled) as a Tensor."""
    return map_leaves(batch, _receive_leaf)


def release_batch(batch: Any) -> None:
    """Main side: delete the shared-memory files of a batch nobody will receive."""
    def release(leaf: Any) -> None:
        if isinstance(leaf, SharedArray):
            try:
                os.unlink(leaf.path)
            except FileNotFoundError:
                pass
    map_leaves(batch, release)


def remove_files(path_prefix: str) -> None:
    """Delete every file starting with `path_prefix` (a pool's leftovers)."""
    directory, name = os.path.split(path_prefix)
    for entry in os.scandir(directory):
        if entry.name.startswith(name):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True                                 # alive, someone else's
    return True


def remove_stale_files(directory: str) -> None:
    """Delete batch files left by processes that no longer run (killed mid-epoch)."""
    for entry in os.scandir(directory):
        if not entry.name.startswith(_FILE_TAG):
            continue
        pid = entry.name[len(_FILE_TAG):].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            try:
                os.unlink(entry.path)
            except (FileNotFoundError, PermissionError):
                pass
