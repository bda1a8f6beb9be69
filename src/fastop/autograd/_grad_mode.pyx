# cython: freethreading_compatible = False
"""Grad mode: whether ops are recorded for autograd, per thread (as in PyTorch: no_grad
on one thread does not stop another from recording, and a new thread starts with
recording on). ``fastop.no_grad()``, ``enable_grad()``, ``set_grad_enabled(mode)``."""
import functools
import inspect
from threading import get_ident

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]


cdef extern from *:
    """
    /* Grad mode is per thread, as in PyTorch: no_grad on one thread does not stop
       another from recording, and a new thread starts with recording on. */
    static _Thread_local int fastop_grad_enabled = 1;
    """
    bint _grad_enabled "fastop_grad_enabled"


cdef bint grad_enabled() noexcept:
    return _grad_enabled


cdef bint swap_grad_enabled(bint mode) noexcept:
    """Set this thread's grad mode; the previous one."""
    global _grad_enabled
    cdef bint prev = _grad_enabled
    _grad_enabled = mode
    return prev


def is_grad_enabled() -> bool:
    """Whether ops are recorded for autograd (False inside ``no_grad``)."""
    return _grad_enabled


cdef class set_grad_enabled:
    """Turn recording on or off; restores the previous mode on exit.

    Usable as a context manager (``with set_grad_enabled(False): ...``) and as a
    decorator. Grad mode is per thread: it applies to the thread that set it.
    """
    cdef bint mode
    cdef dict _saved              # thread id -> the modes to restore, innermost last

    def __init__(self, bint mode=True):
        self.mode = mode
        self._saved = {}

    def __enter__(self):
        global _grad_enabled
        self._saved.setdefault(get_ident(), []).append(_grad_enabled)
        _grad_enabled = self.mode
        return self

    def __exit__(self, *exc_info):
        global _grad_enabled
        ident = get_ident()
        cdef bint here = ident in self._saved
        if not here:
            # the block was entered on another thread (a generator resumed on a worker
            # thread): its mode was set there, so this thread's mode (maybe its own
            # block's) stays; the entering thread's record is dropped when it is known
            if len(self._saved) != 1:
                raise RuntimeError(
                    f"{type(self).__name__}: exited on a thread that did not enter it "
                    f"while {len(self._saved)} threads are inside it; use one grad-mode "
                    f"object per thread")
            ident = next(iter(self._saved))
        stack = self._saved[ident]
        mode = stack.pop()
        if here:
            _grad_enabled = mode
        if not stack:
            del self._saved[ident]
        return False

    def __call__(self, func):
        mode = self.mode
        if inspect.isgeneratorfunction(func):
            return _generator_in_mode(func, mode)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)
        return wrapper


def _generator_in_mode(func, bint mode):
    """A generator function decorated with a grad mode: the mode holds while the
    generator's own code runs (each resumption), not while its caller's does."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with set_grad_enabled(mode):
                response = next(gen)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with set_grad_enabled(mode):
                        gen.close()
                    raise
                except BaseException as exc:
                    with set_grad_enabled(mode):
                        response = gen.throw(exc)
                else:
                    with set_grad_enabled(mode):
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value
    return wrapper


class no_grad(set_grad_enabled):
    """Run without recording ops: results have ``stop_gradient=True``.

    Context manager or decorator (with or without parentheses)::

        with fastop.no_grad():
            y = x * 2

        @fastop.no_grad()
        def evaluate(model, x): ...
    """

    def __new__(cls, func=None):
        if func is not None:                  # @no_grad without parentheses
            return set_grad_enabled(False)(func)
        return super().__new__(cls)

    def __init__(self, func=None):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Record ops again inside a ``no_grad`` region (context manager or decorator)."""

    def __init__(self):
        super().__init__(True)
