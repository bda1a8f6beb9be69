"""Errors shared by layers that must not import each other's modules: loading files
(``fastop._files``, ``fastop.static.io``, ``fastop.serialization``) and loading op
modules from a directory (``fastop.plugins``)."""

__all__ = ["LoadError", "UntrustedCodeError"]


class LoadError(ValueError):
    """A file is not readable as what it should be: truncated, corrupted, crafted or
    foreign. The message names the file and the problem."""


class UntrustedCodeError(LoadError):
    """A file refers to Python code the caller did not allow (loading it would import
    a module, which runs its code): pass ``allowed_modules=[...]`` or
    ``trust_code=True`` to the loader."""
