"""Errors shared by layers that must not import each other's modules: loading files
(``fastop._files``, ``fastop.static.io``, ``fastop.serialization``) and loading op
modules from a directory (``fastop.plugins``); argument errors that are also
PaddlePaddle's AssertionError (``fastop.io``, ``fastop.nn``); where a warning should
point."""
import sys

__all__ = ["LoadError", "UntrustedCodeError", "ArgumentTypeError", "ArgumentValueError",
           "caller_outside_fastop"]


class LoadError(ValueError):
    """A file is not readable as what it should be: truncated, corrupted, crafted or
    foreign. The message names the file and the problem."""


class UntrustedCodeError(LoadError):
    """A file refers to Python code the caller did not allow (loading it would import
    a module, which runs its code): pass ``allowed_modules=[...]`` or
    ``trust_code=True`` to the loader."""


class ArgumentTypeError(TypeError, AssertionError):
    """An argument of the wrong type where PaddlePaddle checks with ``assert`` (most of
    fastop.io's arguments, LayerDict.update): also an AssertionError, so code written
    against either (``except TypeError``, ``except AssertionError``) catches it."""


class ArgumentValueError(ValueError, AssertionError):
    """An argument with a wrong value; also an AssertionError, as ArgumentTypeError."""


def caller_outside_fastop() -> int:
    """The ``stacklevel`` that makes a warning point at the first caller outside fastop
    (the user's ``import fastop``, ``load_directory`` or ``exe.run`` line), counting
    frames as ``warnings`` does: importlib's bootstrap frames are skipped, not counted.
    Call it in the function that calls ``warnings.warn``."""
    frame, level = sys._getframe(2), 2          # the caller of the function warning
    while frame.f_back is not None:
        name = frame.f_globals.get("__name__", "")
        if name != "fastop" and not name.startswith("fastop."):
            break
        frame = frame.f_back
        while frame.f_back is not None and "importlib" in frame.f_code.co_filename \
                and "_bootstrap" in frame.f_code.co_filename:
            frame = frame.f_back
        level += 1
    return level
