"""fastop-activations: activation ops for fastop as Python kernels (a fastop plugin)."""
__version__ = "0.1.0"
