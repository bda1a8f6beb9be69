"""Plugin discovery: the pluggy manager, entry-point loading and the built-in plugin."""
from fastop.plugins._manager import (PluginLoadWarning, PluginError, load_plugins, load_builtin_plugin,
                                     plugin_manager, loaded_plugins)

__all__ = ["PluginLoadWarning", "PluginError", "load_plugins", "load_builtin_plugin", "plugin_manager",
           "loaded_plugins"]
