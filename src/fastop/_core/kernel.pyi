"""The kernel ABI: a CKernel is one Cython kernel (C shape inference plus one C function
per dtype of its dispatch input), callable from Python, eager dispatch and the executor."""
from typing import Any

import numpy as np

from fastop._core.storage import DenseTensor

def set_num_threads(n: int) -> None:
    """Threads used by fastop's own kernels (elementwise, reductions); BLAS is set by
    ``fastop._core.blas.set_num_threads``."""

def _get_num_threads() -> int: ...

def int_attr(attrs: dict, name: str, default: Any) -> int:
    """attrs[name] (else `default`) as an int; floats, strings and bools are refused."""
def bool_attr(attrs: dict, name: str, default: Any) -> bool:
    """attrs[name] (else `default`) as a bool: True/False (or 0/1)."""
def ints_attr(attrs: dict, name: str, default: Any = None) -> list[int]:
    """attrs[name] (else `default`) as a list of ints: None gives [], one int gives [it]."""

class IndexOutOfRangeError(IndexError, ValueError):
    """An index is out of range for its axis (an IndexError and a ValueError)."""


class CKernel:
    @property
    def name(self) -> str: ...
    @property
    def input_names(self) -> tuple[str, ...]: ...
    @property
    def output_names(self) -> tuple[str, ...]: ...
    @property
    def attr_names(self) -> tuple[str, ...]: ...
    @property
    def dispatch_input(self) -> int:
        """The input whose dtype selects the C function."""
    @property
    def parallel_grain(self) -> int:
        """Elements from which a raw call releases the GIL."""
    @property
    def inplace_safe(self) -> bool:
        """out[i] depends on the inputs' element i alone: an output may be any input."""
    @property
    def updates(self) -> tuple[str | None, ...]:
        """Per output, the input an update kernel overwrites with it (the one input it
        may be), else None."""
    @property
    def reasons(self) -> dict[int, str] | None:
        """What a failure status means for this kernel (e.g. which axes are valid); a
        status not in it gets the generic text."""
    @property
    def is_view(self) -> bool:
        """The output is a view of input 0's memory (the kernel sets its data pointer and
        strides; no data is written)."""
    @property
    def view_readonly(self) -> bool:
        """A view kernel's output is read-only (a broadcast)."""
    @property
    def n_in(self) -> int: ...
    @property
    def n_out(self) -> int: ...
    @property
    def dtypes(self) -> tuple[str, ...]:
        """Names of the dtypes (of the dispatch input) this kernel accepts."""
    def __call__(self, *inputs: Any, out: DenseTensor | np.ndarray | None = None,
                 **attrs: Any) -> DenseTensor | tuple[DenseTensor, ...]:
        """Run on DenseTensors (numpy arrays and scalars are wrapped); with ``out=`` the
        result is written there (in place when ``out`` is an input)."""
    def run_py(self, inputs: tuple, attrs: dict, out_cls: type = ...) -> tuple:
        """Run with an attrs dict; a tuple of outputs of type `out_cls`."""
    def meta(self, *metas: tuple[Any, Any], **attrs: Any) -> list[tuple[list[int | None], Any]]:
        """Output (shape, dtype) pairs from input (shape, dtype) pairs; unknown dims
        (None or -1) come back as None."""


class PythonKernel:
    """A Python kernel bound to one call's attributes and its outputs' metas; calling it
    runs the function on numpy views of DenseTensor inputs and checks and wraps its
    results (the one result checker of Python kernels)."""
    op_name: str
    fn: Any
    attrs: dict[str, Any]
    mismatch: Any
    metas: list[tuple[list[int | None], int]]
    def __init__(self, op_name: str, fn: Any, attrs: dict[str, Any],
                 metas: list[tuple[list[int | None], int]], mismatch: Any,
                 inputs: tuple[DenseTensor, ...] | None = None) -> None: ...
    def __call__(self, *inputs: Any) -> tuple[DenseTensor, ...]: ...

def add_note(exc: BaseException, note: str) -> None:
    """Attach a note to an exception (PEP 678), once."""
