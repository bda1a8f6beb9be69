"""fastop: a small, fast deep-learning framework for writing operators in Python.

Import order follows the layers: the op registry and fastop's own ops (registered by
the built-in plugin through the same hook third-party plugins use), eager mode, static
mode, nn/optimizer, then discovery of installed plugins.
"""
import gc as _gc

from fastop._version import __version__

# The import makes some 200k objects and no garbage: the collector's passes over them
# were 4% of `import fastop` (21M of 525M instructions, callgrind), so it waits.
_gc_was_enabled = _gc.isenabled()
_gc.disable()
try:
    from fastop.hookspecs import hookimpl
    from fastop import ops
    from fastop.plugins import load_builtin_plugin as _load_builtin_plugin

    _load_builtin_plugin()

    from fastop._core.storage import (DType, bool_, empty_cache, float16, float32, float64,
                                      int8, int16, int32, int64, uint8)
    from fastop._threads import set_num_threads, get_num_threads
    from fastop.tensor import *  # noqa: F401,F403  (eager: Tensor, creation, math, grad)
    from fastop.tensor import __all__ as _tensor_all
    from fastop import autograd
    from fastop.static import (CPUPlace, disable_static, enable_static,  # noqa: F401
                               in_dynamic_mode)
    from fastop import static
    from fastop import nn, optimizer, regularizer
    from fastop.device import get_device, is_compiled_with_cuda, set_device
    from fastop import device
    from fastop.nn import ParamAttr
    from fastop.plugins import load_plugins as _load_plugins

    _load_plugins()
finally:
    if _gc_was_enabled:
        _gc.enable()

bool = bool_  # PaddlePaddle spells it fastop.bool

# Imported on first use, to keep `import fastop` fast (zipfile + tempfile: ~15 ms;
# the io, metric, testing and profiler modules, which a script may not use;
# fastop.distributed: a few ms, and MPI itself only under an MPI launcher).
_LAZY = {"save": "fastop.serialization", "load": "fastop.serialization",
         "DataParallel": "fastop.distributed"}
_LAZY_SUBMODULES = {"io", "metric", "testing", "profiler", "distributed"}


def __getattr__(name: str):
    from importlib import import_module
    if name in _LAZY_SUBMODULES:
        return import_module(f"fastop.{name}")   # importing sets the attribute
    if name not in _LAZY:
        raise AttributeError(f"module 'fastop' has no attribute {name!r}")
    value = globals()[name] = getattr(import_module(_LAZY[name]), name)
    return value


def __dir__():
    return sorted({*globals(), *_LAZY, *_LAZY_SUBMODULES})

__all__ = ["hookimpl", "ops", "autograd", "static", "nn", "optimizer", "regularizer",
           "plugins", "io", "metric", "testing", "profiler", "distributed", "save", "load",
           "DataParallel", "DType", "bool", "float16", "float32", "float64", "uint8", "int8",
           "int16", "int32", "int64", "ParamAttr", "set_num_threads",
           "get_num_threads", "empty_cache", "CPUPlace", "enable_static", "disable_static",
           "in_dynamic_mode", "device", "set_device", "get_device", "is_compiled_with_cuda",
           "__version__", *_tensor_all]
