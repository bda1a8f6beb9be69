"""fastop.save / fastop.load (being built)."""
__all__ = ["save", "load"]


def save(obj, path):
    raise NotImplementedError("fastop.save is being built")


def load(path):
    raise NotImplementedError("fastop.load is being built")
