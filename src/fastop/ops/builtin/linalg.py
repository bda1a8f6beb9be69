"""Built-in linalg ops (placeholder until the kernels land)."""


def register(registry) -> None:
    pass
