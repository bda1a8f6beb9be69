"""Where an op defined outside an installed package came from: a directory of op
modules (:func:`fastop.plugins.load_directory`).

The plugin loader sets an op's ``OpDef.source`` to a :class:`DirectorySource` when it
defines the op, so saving a static Program reads the origin from the op itself; and it
installs itself here as the :class:`DirectoryOpLoader` that defines such an op again
when a saved Program needs it. ``fastop.static``, a layer below the plugin loader,
finds both here and imports nothing above it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

if TYPE_CHECKING:
    from fastop.ops._registry import OpDef

__all__ = ["DirectorySource", "DirectoryOpLoader", "set_directory_loader",
           "directory_loader"]


class DirectorySource(NamedTuple):
    """An op defined by module `module` (a ``module.py`` file) of op-module directory
    `directory` (its real path). A NamedTuple: a dataclass would cost ``import fastop``
    some 3 ms."""

    directory: str
    module: str

    def as_record(self) -> dict[str, str]:
        """The ``source`` a saved Program records for the op."""
        return {"directory": self.directory, "module": self.module}


class DirectoryOpLoader(Protocol):
    """What loads a saved Program's directory op again (fastop's plugin manager)."""

    def check_directory_source(self, op_name: str, source: dict[str, str],
                               allows: Callable[[str], bool] | None = None) -> str:
        """Check, importing nothing, that the recorded module is there and `allows`
        accepts its name; raise ValueError or an UntrustedCodeError otherwise."""

    def load_directory_source(self, op_name: str, source: dict[str, str],
                              allows: Callable[[str], bool] | None = None) -> OpDef:
        """Import the recorded module (when `allows` accepts it) and return the op."""


_loader: DirectoryOpLoader | None = None


def set_directory_loader(loader: DirectoryOpLoader) -> None:
    """Install the loader of directory ops (``fastop.plugins`` does, on import)."""
    global _loader
    _loader = loader


def directory_loader() -> DirectoryOpLoader:
    """The installed loader of directory ops."""
    if _loader is None:
        raise RuntimeError("no loader of directory op modules is installed: import "
                           "fastop (fastop.plugins installs it)")
    return _loader
