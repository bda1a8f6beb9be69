"""``fastop.ops.<namespace>.<op>``: attribute access to one namespace's ops.

A namespace object is made once per namespace (``Registry.namespace``) and ``fastop.ops``
keeps it as a plain module attribute, so ``fastop.ops.activations`` costs a dict lookup.
Its ops are cached attributes, valid while ``registry.version`` stays the same: a removed
or redefined op is never served stale.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastop.ops._registry import OpDef, Registry

__all__ = ["OpNamespace", "make_namespace"]


class OpNamespace:
    """The ops of one namespace as attributes: ``fastop.ops.activations.swish``.

    Each namespace is the one instance of its own subclass (:func:`make_namespace`),
    whose attribute lookup closes over the registry and the cache.
    """

    __slots__ = ()
    _registry: Registry       # set on each namespace's class
    _namespace: str

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"fastop.ops.{type(self)._namespace}: ops are defined with "
                             f"registry.define, not by assigning '{name}'")

    def __dir__(self) -> list[str]:
        cls = type(self)
        return [op.short_name for op in cls._registry.ops(cls._namespace)]

    def __repr__(self) -> str:
        return f"<fastop ops namespace {type(self)._namespace!r}: {len(self.__dir__())} ops>"


def make_namespace(registry: Registry, namespace: str) -> OpNamespace:
    """The namespace object of ``namespace`` in ``registry``."""
    cache: dict[str, OpDef] = {}
    seen = [-1]             # the registry version the cache is valid for

    # Every attribute is an op name, so the lookup is written out as __getattribute__
    # (__getattr__ runs only after a failed normal lookup, raising and clearing an
    # AttributeError each time: 3x slower). Ops are not kept in an instance __dict__,
    # whose hits nothing could invalidate: the registry tells no one when an op is
    # removed, it bumps its version. Closure variables instead of slots: reading three
    # slots through object.__getattribute__ made a lookup 3.4x slower (935 ns against
    # 276 ns, registry.get 133 ns, on the loaded VM).
    def __getattribute__(self: OpNamespace, name: str) -> Any:
        if seen[0] == registry._version:     # the version without the property call
            op = cache.get(name)
            if op is not None:
                return op
        if name.startswith("__"):
            return object.__getattribute__(self, name)
        if seen[0] != registry._version:
            cache.clear()
            seen[0] = registry._version
        op = cache[name] = registry.get(f"{namespace}::{name}")
        return op

    cls = type(f"OpNamespace[{namespace}]", (OpNamespace,),
               {"__slots__": (), "__getattribute__": __getattribute__,
                "_registry": registry, "_namespace": namespace,
                "__module__": __name__})
    return cls()
