"""fastop-compat-index: a plugin package of fastop's compatibility suite (tests/plugin_compat)."""
__version__ = "0.1.0"
