"""PaddlePaddle's device API (``paddle.device``), answered as a CPU-only PaddlePaddle
build answers it: fastop runs on the CPU, so ``set_device("cpu")`` works,
``get_device()`` is ``"cpu"``, ``is_compiled_with_cuda()`` is False, and asking for a
GPU (``"gpu"``, ``"gpu:0"``, ...) is a ValueError saying so.

>>> import fastop
>>> fastop.set_device("cpu")
Place(cpu)
>>> fastop.get_device(), fastop.is_compiled_with_cuda()
('cpu', False)
"""
from __future__ import annotations

import re
from typing import Any

from fastop.static import CPUPlace

__all__ = ["set_device", "get_device", "is_compiled_with_cuda", "is_compiled_with_rocm",
           "is_compiled_with_xpu", "as_place"]

# the accelerators PaddlePaddle names (a device string like "gpu" or "gpu:1")
# (a pattern string: re compiles and caches it on first use, not at import fastop)
_ACCELERATOR = r"(gpu|dcu|xpu|npu|ipu|mlu|custom_cpu)(:\d+)?"


def as_place(device: Any, caller: str) -> CPUPlace:
    """`device` (``"cpu"``, a ``CPUPlace``) as the CPUPlace; anything else a ValueError
    (a GPU or other accelerator: fastop is CPU-only) or TypeError naming `caller`."""
    if isinstance(device, CPUPlace):
        return device
    if not isinstance(device, str):
        raise TypeError(f"{caller}: the device must be a string like 'cpu' or a "
                        f"fastop.CPUPlace(), got {type(device).__name__}")
    name = device.strip().lower()
    if name == "cpu":
        return CPUPlace()
    if re.fullmatch(_ACCELERATOR, name):
        raise ValueError(f"{caller}: the device should not be {device!r}, since fastop is "
                         f"not compiled with CUDA or any accelerator (it runs on the CPU: "
                         f"use 'cpu')")
    raise ValueError(f"{caller}: the device must be a string like 'cpu', 'gpu' or "
                     f"'gpu:x'; got {device!r} (fastop runs on 'cpu' only)")


def set_device(device: str | CPUPlace) -> CPUPlace:
    """Select the device ops run on; only ``"cpu"`` exists. Returns the place."""
    return as_place(device, "set_device")


def get_device() -> str:
    """The device ops run on: always ``"cpu"``."""
    return "cpu"


def is_compiled_with_cuda() -> bool:
    """False: fastop has no CUDA kernels (as a CPU-only PaddlePaddle build)."""
    return False


def is_compiled_with_rocm() -> bool:
    """False: fastop has no ROCm kernels."""
    return False


def is_compiled_with_xpu() -> bool:
    """False: fastop has no XPU kernels."""
    return False
