"""fastop's version, in the bottom layer so that any module (the plugin loader that
attributes the built-in ops to it, the command line) reads it without importing the
``fastop`` facade."""

__version__ = "0.1.0"
