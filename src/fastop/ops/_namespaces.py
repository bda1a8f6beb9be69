"""``fastop.ops.<namespace>.<op>``: attribute access to one namespace's ops.

An :class:`OpNamespace` is made once per namespace (``Registry.namespace``) and
``fastop.ops`` keeps it as a plain module attribute, so ``fastop.ops.activations`` costs
a dict lookup. Its ops are cached attributes, valid while ``registry.version`` stays the
same: a removed or redefined op is never served stale.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastop.ops._registry import OpDef, Registry

__all__ = ["OpNamespace"]

_get = object.__getattribute__
_set = object.__setattr__


class OpNamespace:
    """The ops of one namespace as attributes: ``fastop.ops.activations.swish``."""

    __slots__ = ("_registry", "_namespace", "_cache", "_version")

    def __init__(self, registry: Registry, namespace: str) -> None:
        _set(self, "_registry", registry)
        _set(self, "_namespace", namespace)
        _set(self, "_cache", {})
        _set(self, "_version", -1)

    # Every attribute is an op name, so the lookup is written out here instead of
    # __getattr__ (which runs only after a failed normal lookup, raising and clearing
    # an AttributeError each time: 3x slower than this in the measurement). Ops are not
    # kept in an instance __dict__, whose hits nothing could invalidate: the registry
    # tells no one when an op is removed, it only bumps its version (read here without
    # the property call: this is the hot path).
    def __getattribute__(self, name: str) -> Any:
        if _get(self, "_version") == _get(self, "_registry")._version:
            op = _get(self, "_cache").get(name)
            if op is not None:
                return op
        if name.startswith("__"):
            return _get(self, name)
        return _get(self, "_lookup")(name)

    def _lookup(self, name: str) -> OpDef:
        registry = _get(self, "_registry")
        if _get(self, "_version") != registry.version:
            _set(self, "_cache", {})
            _set(self, "_version", registry.version)
        op = registry.get(f"{_get(self, '_namespace')}::{name}")
        _get(self, "_cache")[name] = op
        return op

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"fastop.ops.{_get(self, '_namespace')}: ops are defined with "
                             f"registry.define, not by assigning '{name}'")

    def __dir__(self) -> list[str]:
        return [op.short_name for op in _get(self, "_registry").ops(_get(self, "_namespace"))]

    def __repr__(self) -> str:
        return (f"<fastop ops namespace {_get(self, '_namespace')!r}: "
                f"{len(self.__dir__())} ops>")
