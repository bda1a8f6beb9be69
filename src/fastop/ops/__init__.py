"""The op registry and its namespaces: ``fastop.ops.<namespace>.<op>``.

``fastop.ops.registry`` holds every op definition (see :mod:`fastop.ops._registry`);
``fastop.ops.fastop.tanh`` is the built-in tanh, ``fastop.ops.activations.swish`` a
plugin's op.

``fastop.ops.<name>`` means the op namespace ``<name>``, whatever the name: fastop's own
submodules (``fastop.ops.checking``, ``fastop.ops.builtin``, ...) are imported by their
full names (``from fastop.ops.checking import check_grad_rule``) and never bound as
attributes here, so a plugin namespace called ``checking`` or ``builtin`` is not
shadowed by them. Only the names of this module's API (``__all__``) come first.
"""
import sys as _sys
import types as _types

from fastop.ops._registry import (ArgSpec, AttrSpec, DuplicateOpError, GradRule, OpDef,
                                  OpDefinitionError, OpError, Registry, TensorMeta,
                                  UnknownOpError, UntakenGradientError, registry)
from fastop.ops._registry import did_you_mean as _did_you_mean

__all__ = ["ArgSpec", "AttrSpec", "DuplicateOpError", "GradRule", "OpDef",
           "OpDefinitionError", "OpError", "Registry", "TensorMeta", "UnknownOpError",
           "UntakenGradientError", "registry", "get"]


def get(name: str) -> OpDef:
    """The op definition named ``"namespace::op"`` (close matches suggested if unknown)."""
    return registry.get(name)


class _OpsModule(_types.ModuleType):
    """``fastop.ops``, whose submodules are not attributes (see the module docstring)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, _types.ModuleType) and value.__name__ == f"{__name__}.{name}":
            return      # the import system binding a submodule to its package
        super().__setattr__(name, value)


def __getattr__(name: str):
    """An op namespace (its plugin imported on first use), kept as a plain attribute
    afterwards (``fastop.ops.activations`` then costs a dict lookup); else an imported
    submodule, looked up by its full name."""
    if name.startswith("__"):
        raise AttributeError(name)
    module = _sys.modules.get(f"{__name__}.{name}")
    if (module is not None or name.startswith("_")) and not registry.declares(name):
        if module is not None:
            return module
        raise AttributeError(name)   # a private submodule not imported yet (no hint to build)
    try:
        namespace = registry.namespace(name)
    except UnknownOpError as exc:
        if exc.reason:
            raise AttributeError(f"module 'fastop.ops' has no op namespace {name!r}: "
                                 f"{exc.reason}") from exc.__cause__
        raise AttributeError(f"module 'fastop.ops' has no op namespace or attribute "
                             f"{name!r}{_did_you_mean(name, registry.namespaces())}") from None
    globals()[name] = namespace
    return namespace


def __dir__():
    return sorted(__all__ + registry.namespaces())


for _submodule in [n for n, v in globals().items() if isinstance(v, _types.ModuleType)
                   and v.__name__ == f"{__name__}.{n}"]:
    del globals()[_submodule]
_sys.modules[__name__].__class__ = _OpsModule
