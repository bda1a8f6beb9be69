"""Type stub of fastop.autograd._node (the graph node base class)."""

__all__ = ["Node"]


class Node: ...
