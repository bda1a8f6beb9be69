"""The op registry and its namespaces: ``fastop.ops.<namespace>.<op>``.

``fastop.ops.registry`` holds every op definition (see :mod:`fastop.ops._registry`);
``fastop.ops.fastop.tanh`` is the built-in tanh, ``fastop.ops.activations.swish`` a
plugin's op.
"""
from fastop.ops._registry import (ArgSpec, AttrSpec, DuplicateOpError, GradRule, OpDef,
                                  OpDefinitionError, OpError, Registry, TensorMeta,
                                  UnknownOpError, registry)

__all__ = ["ArgSpec", "AttrSpec", "DuplicateOpError", "GradRule", "OpDef",
           "OpDefinitionError", "OpError", "Registry", "TensorMeta", "UnknownOpError",
           "registry", "get"]


def get(name: str) -> OpDef:
    """The op definition named ``"namespace::op"`` (close matches suggested if unknown)."""
    return registry.get(name)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return registry.namespace(name)


def __dir__():
    return sorted(__all__ + registry.namespaces())
