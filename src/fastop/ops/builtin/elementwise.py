"""Built-in elementwise ops (placeholder until the kernels land)."""


def register(registry) -> None:
    pass
