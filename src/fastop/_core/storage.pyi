"""Tensor storage: DenseTensor (owned 64-byte-aligned memory or a borrowed buffer), its
dtypes, and zero-copy exchange with numpy (buffer protocol, ``__array__``) and DLPack."""
from typing import Any, Sequence, TypeVar

import numpy as np

_T = TypeVar("_T", bound="DenseTensor")

MAX_NDIM: int

class DType:
    """One of fastop's dtypes; compares equal to its name and numpy dtype."""
    @property
    def code(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def numpy_dtype(self) -> np.dtype: ...
    def __init__(self, code: int, name: str) -> None: ...
    @property
    def is_floating(self) -> bool: ...
    @property
    def is_storage_only(self) -> bool: ...

bool_: DType
uint8: DType
int8: DType
int16: DType
int32: DType
int64: DType
float32: DType
float64: DType
float16: DType
DTYPE_NAMES: tuple[str, ...]

def as_dtype(dtype: Any) -> DType:
    """Resolve a DType, a name ('float32'), a numpy dtype or a Python type."""

class DenseTensor:
    """A strided n-d array of one dtype; ``np.asarray(t)`` shares its memory."""
    @property
    def readonly(self) -> bool: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def strides(self) -> tuple[int, ...]:
        """In bytes, as numpy's."""
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def offset(self) -> int:
        """Bytes from the start of the owner's memory to this view's first element."""
    @property
    def data_ptr(self) -> int: ...
    @property
    def T(self: _T) -> _T: ...
    def is_contiguous(self) -> bool: ...
    def __len__(self) -> int: ...
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray: ...
    def numpy(self, set_to_1d: bool = False) -> np.ndarray:
        """A numpy array sharing this tensor's memory (no copy); `set_to_1d` (PaddlePaddle
        2.5's flag) is accepted and ignored, as PaddlePaddle 3 does."""
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any: ...
    def reshape(self: _T, *shape: int | Sequence[int]) -> _T:
        """A view with a new shape (one -1 inferred); copies only if not contiguous."""
    def transpose(self: _T, *perm: int | Sequence[int]) -> _T:
        """A view with permuted axes (reversed when no permutation is given)."""
    def broadcast_to(self: _T, shape: Sequence[int]) -> _T:
        """A read-only view expanded to `shape` (stride 0, no copy)."""
    def __getitem__(self: _T, key: Any) -> _T:
        """Basic indexing (ints, slices, None, Ellipsis): a view."""
    def contiguous(self: _T) -> _T:
        """This tensor if C-contiguous, else a contiguous copy."""
    def copy(self: _T) -> _T:
        """A contiguous copy that owns its memory."""
    def item(self, *index: int) -> bool | int | float: ...
    def tolist(self) -> Any: ...

def as_ndarray(t: DenseTensor) -> np.ndarray:
    """A numpy array viewing t's memory (numpy's C API); it keeps t alive."""

def empty(shape: Sequence[int], dtype: Any = "float32") -> DenseTensor:
    """An uninitialized contiguous tensor."""

def zeros(shape: Sequence[int], dtype: Any = "float32") -> DenseTensor: ...

def from_numpy(array: Any, cls: type[_T] = ...) -> _T:
    """Wrap a numpy array (or any buffer) without copying; the tensor keeps it alive."""

def from_dlpack(obj: Any, cls: type[_T] = ...) -> _T:
    """Import a DLPack producer without copying."""

def take_view_shape(t: DenseTensor, view: DenseTensor) -> None:
    """Give `t` the shape and strides of `view` (a view of exactly t's elements), as
    squeeze_/unsqueeze_ do, counted as an in-place write."""

def empty_cache() -> None:
    """Give the freed blocks fastop keeps for reuse back to the C allocator (and so the
    large ones to the system). Live tensors are untouched."""
def _large_block_sizes() -> list[int]:
    """Sizes of the freed large blocks waiting for reuse, oldest first: a test shim."""
def _small_block_counts() -> list[int]:
    """Free small blocks waiting per size class (64, 128, 192, 256 bytes): a test shim."""
