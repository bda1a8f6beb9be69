"""fastop's files, written atomically and read without trusting them.

Writing (:func:`atomic_write`): the bytes go to a temporary file beside the target,
named ``.<name>.<pid>.<random>.fastop-tmp``, which is flushed to disk and renamed over
the target. A process that dies mid-save leaves at most that temporary; the next save
of the same path removes the temporaries of that name whose process is gone (a live
process's, another thread's or another program's, are left alone).

Opening (:func:`open_to_load`): a loader opens a regular file only, without blocking
(a FIFO would block ``open()`` until a writer comes; ``/dev/zero`` never ends), and
checks its size before reading, so a file larger than the loader reads is refused
instead of read whole. Every loader of fastop opens its files through it.

Reading (:func:`read_npz`): an ``.npz`` archive is read member by member with numpy's
``.npy`` header parser and never with pickle; before anything is allocated, each
member's header must describe an array of a dtype fastop saves whose size is exactly
the bytes the member holds, and the members together may not hold more bytes than the
file. Every way a file can be malformed, truncated, crafted or foreign is one
:class:`LoadError` naming the file and the problem.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import numpy as np

from fastop._errors import LoadError, UntrustedCodeError

if TYPE_CHECKING:
    import zipfile

__all__ = ["LoadError", "UntrustedCodeError", "atomic_write", "open_to_load", "read_bounded",
           "read_npz"]

TMP_SUFFIX = ".fastop-tmp"
SAVED_DTYPES = {np.dtype(n) for n in ("bool", "uint8", "int8", "int16", "int32", "int64",
                                       "float32", "float64", "float16")}   # fastop's dtypes
SAVED_DTYPE_NAMES = "bool, uint8, int8, int16, int32, int64, float32, float64 and float16"
MAX_DEFLATE_RATIO = 1032        # deflate's limit: no member inflates more than this
_CHUNK = 1 << 24                # bytes read at a time into an array


# ----------------------------------------------------------------------------- writing

def atomic_write(path: str, write: Callable[[BinaryIO], Any]) -> None:
    """Call ``write(f)`` on a temporary file beside `path`, then rename it over `path`
    (after removing the temporaries of `path` left by processes that died)."""
    import secrets      # here, not at import: `import fastop` stays fast
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
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


def remove_stale_temporaries(path: str) -> list[str]:
    """Remove the temporaries of `path` whose writing process no longer runs; their
    names."""
    directory, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[0-9a-f]+" + re.escape(TMP_SUFFIX))
    removed = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry)
        if match and not _process_exists(int(match.group(1))):
            try:
                os.unlink(os.path.join(directory, entry))
                removed.append(entry)
            except OSError:     # removed by another save meanwhile, or not ours to remove
                pass
    return removed


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True             # this process: another thread may be saving
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True             # someone else's process, or unknowable: keep its file
    return True


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


# ----------------------------------------------------------------------------- opening

def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_to_load(path: str, caller: str, max_bytes: int | None = None) -> BinaryIO:
    """`path` opened for reading as a loader must: a regular file, at most `max_bytes`
    long (None: any size).

    The open does not block (``O_NONBLOCK``: a FIFO's ``open()`` would wait for a
    writer forever). A directory raises IsADirectoryError, a missing file
    FileNotFoundError (the OSErrors of ``open``); a FIFO, device or socket, or a file
    over `max_bytes`, raises :class:`LoadError` ``"<caller>: cannot read '<path>': ..."``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{caller}: cannot read a directory", path)
        if not stat.S_ISREG(info.st_mode):
            raise LoadError(f"{caller}: cannot read {path!r}: it is {_kind(info.st_mode)}, "
                            f"not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise LoadError(f"{caller}: cannot read {path!r}: it holds {info.st_size} bytes, "
                            f"more than the {max_bytes} such a file may hold")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str, caller: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (:func:`open_to_load`), refused with a
    :class:`LoadError` when it holds more than `max_bytes` (also a file that grows
    while it is read: no more than ``max_bytes + 1`` bytes are ever read)."""
    with open_to_load(path, caller, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LoadError(f"{caller}: cannot read {path!r}: it holds more than the "
                        f"{max_bytes} bytes such a file may hold")
    return data


# ----------------------------------------------------------------------------- reading

class _Capped:
    """A file whose ``read(n)`` never asks for more than the file has left. zipfile
    reads sizes found in the file, and a buffered read allocates what it is asked for
    before it reads: a crafted directory claiming 4 GiB would allocate 4 GiB."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f, self._size = f, size

    def read(self, n: int | None = -1) -> bytes:
        left = max(self._size - self._f.tell(), 0)
        return self._f.read(left if n is None or n < 0 else min(n, left))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def seekable(self) -> bool:
        return True


def _malformed() -> tuple[type[BaseException], ...]:
    """What zipfile, zlib and numpy's header parser raise on bytes that are not what
    they should be (NotImplementedError: an unknown compression method; RuntimeError:
    an encrypted member; OverflowError: offsets beyond what seek takes)."""
    import struct
    import tokenize
    import zipfile
    import zlib
    return (tokenize.TokenError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error,
            struct.error, EOFError, ValueError, KeyError, IndexError, TypeError,
            OverflowError, NotImplementedError, RuntimeError, OSError, SyntaxError)


def read_npz(path: str, caller: str, what: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive at `path` by member name (without ``.npy``),
    in archive order, as native-byte-order numpy arrays of a dtype fastop saves.

    The file is opened with :func:`open_to_load` (a regular file only). A missing or
    unreadable file raises the OSError of opening it; anything wrong with
    its contents a :class:`LoadError` ``"<caller>: cannot read '<path>': <problem>"``
    (`what` names the kind of file expected, for a file that is no archive at all).
    """
    def fail(problem: str, cause: BaseException | None = None) -> LoadError:
        error = LoadError(f"{caller}: cannot read {path!r}: {problem}")
        error.__cause__ = cause
        return error
    import zipfile      # here, not at import: `import fastop` stays fast (~15 ms)
    with open_to_load(path, caller) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            with zipfile.ZipFile(_Capped(f, size)) as archive:  # type: ignore[arg-type]
                infos = archive.infolist()
                _check_directory(infos, size, fail)
                return {info.filename[:-4]: _read_member(archive, info, fail)
                        for info in infos}
        except LoadError:
            raise
        except _malformed() as exc:
            raise fail(f"the file is truncated, corrupted or not {what} "
                       f"({type(exc).__name__}: {exc})", exc) from exc


def _check_directory(infos: list[zipfile.ZipInfo], size: int,
                     fail: Callable[..., LoadError]) -> None:
    """Member names, compression and sizes, before any member is read."""
    import zipfile
    seen: set[str] = set()
    stored = 0
    for info in infos:
        name = info.filename
        if not name.endswith(".npy") or len(name) == 4:
            raise fail(f"member {name!r} is not a .npy array (fastop writes only those)")
        if name in seen:
            raise fail(f"two members are named {name!r}")
        seen.add(name)
        if info.flag_bits & 0x1:
            raise fail(f"member {name[:-4]!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise fail(f"member {name[:-4]!r} uses compression method "
                       f"{info.compress_type}; only stored and deflated members are read")
        limit = info.compress_size * (1 if info.compress_type == zipfile.ZIP_STORED
                                      else MAX_DEFLATE_RATIO)
        if info.file_size > limit or info.header_offset + info.compress_size > size:
            raise fail(f"member {name[:-4]!r} claims more bytes than the file holds "
                       f"({info.file_size} bytes; the file has {size})")
        stored += info.compress_size
    if stored > size:
        raise fail(f"its members' bytes overlap ({stored} bytes in members, "
                   f"{size} in the file)")


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
                 fail: Callable[..., LoadError]) -> np.ndarray:
    """One member's array: its header checked against its size, then its bytes."""
    import tokenize
    name = info.filename[:-4]
    fmt = np.lib.format
    with archive.open(info) as member:
        try:
            version = fmt.read_magic(member)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(member)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(member)
            else:
                raise ValueError(f".npy format version {version} is not read")
        except (ValueError, TypeError, SyntaxError, EOFError, tokenize.TokenError) as exc:
            # a header whose length field lies ends mid-expression: TokenError
            raise fail(f"member {name!r} is not a .npy array "
                       f"({type(exc).__name__}: {exc})", exc) from exc
        if dtype.hasobject or dtype.newbyteorder("=") not in SAVED_DTYPES:
            raise fail(f"member {name!r} has dtype {dtype}; fastop reads "
                       f"{SAVED_DTYPE_NAMES} (no pickled objects)")
        native = dtype.newbyteorder("=")
        count = 1
        for d in shape:
            count *= d
        expected = count * dtype.itemsize
        held = info.file_size - member.tell()
        if expected != held:
            raise fail(f"member {name!r} claims {native.name}{list(shape)} "
                       f"({expected} bytes) but holds {held} bytes")
        flat = np.empty(count, dtype)
        view = memoryview(flat).cast("B")
        done = 0
        while done < expected:
            chunk = member.read(min(_CHUNK, expected - done))
            if not chunk:
                raise fail(f"member {name!r} ends after {done} of {expected} bytes")
            view[done:done + len(chunk)] = chunk
            done += len(chunk)
        member.read(1)      # reach the end, where zipfile checks the CRC
    array = flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)
    return array if dtype.isnative else array.astype(native)
