"""fastop: a small, fast deep-learning framework for writing operators in Python."""
__version__ = "0.1.0"

from fastop.hookspecs import hookimpl
from fastop import ops
from fastop.plugins import load_plugins as _load_plugins

_load_plugins()

__all__ = ["hookimpl", "ops", "__version__"]
