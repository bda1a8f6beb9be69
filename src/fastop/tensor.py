"""Eager mode (being built): Tensor, creation functions, math, autograd entry points."""
__all__: list = []
