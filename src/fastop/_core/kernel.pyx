"""CKernel: a Cython kernel described once, callable three ways.

* from Python, as a raw kernel (``fastop._core.elementwise.tanh(x, out=y)``);
* from eager dispatch, through :meth:`CKernel.run` (Cython, no Python in the loop);
* from the static executor, which reads ``infer`` and ``fns`` (C function pointers)
  into its plan once and calls them without the GIL.

The registry (``fastop.ops``) wraps a CKernel into an op definition; its shape/dtype
inference doubles as the op's meta function, so static graphs and kernels agree.
"""
from libc.string cimport memset
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from fastop._core.storage cimport (DenseTensor, DType, fastop_view, fastop_attrs,
                                   FASTOP_MAX_NDIM, FASTOP_MAX_ATTR_INTS, FASTOP_BOOL, FASTOP_INT32,
                                   FASTOP_INT64, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_NUM_DTYPES, alloc_tensor, alloc_like,
                                   as_dense, dtype_from_code, dtype_code, itemsize_of,
                                   view_same_meta, view_fits_meta, view_shape, view_copy, views_overlap,
                                   view_same_layout, bump_version, as_ndarray, shape_fits,
                                   wrap_ndarray, numpy_type_num, check_initialised)
cimport numpy as cnp

import operator

import numpy as np

from fastop._core.parallel import num_processors

cnp.import_array()

__all__ = ["CKernel", "PythonKernel", "set_num_threads", "int_attr", "bool_attr", "ints_attr",
           "add_note", "IndexOutOfRangeError"]


class IndexOutOfRangeError(IndexError, ValueError):
    """An index is out of range for its axis: an IndexError, as numpy, Python sequences
    and Paddle raise, and still a ValueError, as fastop raised before. A kernel's
    ``reasons`` give it as ``{status: (IndexOutOfRangeError, "what it means")}``."""

cdef int _num_threads = 1
cdef Py_ssize_t _thread_threshold = 1 << 15


def set_num_threads(int n) -> None:
    """Threads used by fastop's own kernels (elementwise, reductions). BLAS is set
    separately by ``fastop._core.blas.set_num_threads``."""
    global _num_threads
    if n < 1:
        raise ValueError(f"set_num_threads: expected n >= 1, got {n}")
    _num_threads = min(n, num_processors())


def _get_num_threads() -> int:
    return _num_threads


# -- attribute readers for the packers: a value of the wrong kind is refused, never
# truncated (axis=1.5 must not run on axis 1). The CKernel prefixes the op's name.

cdef object _as_int(str name, object value):
    """`value` as an int; floats, strings and bools are refused."""
    if type(value) is int:
        return value
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"attribute '{name}' must be an integer, got {value!r}")


def int_attr(dict attrs, str name, default):
    """attrs[name] (else `default`) as an int; floats, strings and bools are refused."""
    return _as_int(name, attrs.get(name, default))


def bool_attr(dict attrs, str name, default):
    """attrs[name] (else `default`) as a bool: True/False (or 0/1)."""
    value = attrs.get(name, default)
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_) or (isinstance(value, (int, np.integer))
                                               and value in (0, 1)):
        return bool(value)
    raise TypeError(f"attribute '{name}' must be a bool, got {value!r}")


def ints_attr(dict attrs, str name, default=None):
    """attrs[name] (else `default`) as a list of ints: None gives [], one int gives [it]."""
    value = attrs.get(name, default)
    if value is None:
        return []
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
    else:
        items = [value]
    try:
        return [_as_int(name, v) for v in items]
    except TypeError:
        raise TypeError(f"attribute '{name}' must be an integer or a sequence of "
                        f"integers, got {value!r}") from None


cdef int get_num_threads() noexcept nogil:
    return _num_threads


cdef bint use_threads(Py_ssize_t work) noexcept nogil:
    """Whether a loop of `work` elements is worth splitting over threads."""
    return _num_threads > 1 and work >= _thread_threshold


def _init_threads():
    import os
    global _num_threads
    env = os.environ.get("FASTOP_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    _num_threads = int(env) if env and env.isdigit() and int(env) > 0 \
        else num_processors()

_init_threads()

_REASONS = {
    K_ERR_BROADCAST: "input shapes do not broadcast together",
    K_ERR_DTYPE: "input dtypes are not accepted",
    K_ERR_ATTR: "an attribute is invalid for these inputs",
    K_ERR_SHAPE: "input shapes are incompatible",
    K_ERR_VALUE: "an input value is out of range",
    K_ERR_MEMORY: "out of memory",
    K_ERR_LAYOUT: "the input's memory layout cannot be viewed this way",
}


cdef class CKernel:
    """A Cython kernel with its shape inference and one C function per dtype."""

    def __cinit__(self):
        memset(self.fns, 0, sizeof(self.fns))
        self.infer = NULL

    # -- describing ------------------------------------------------------------
    @property
    def updates(self) -> tuple:
        """Per output, the name of the input an update kernel overwrites with it (the
        one input it may be), else None."""
        return tuple(self.input_names[self.update_of[j]] if self.update_of[j] >= 0
                     else None for j in range(len(self.output_names)))

    @property
    def n_in(self) -> int:
        return len(self.input_names)

    @property
    def n_out(self) -> int:
        return len(self.output_names)

    @property
    def dtypes(self) -> tuple:
        """Names of the dtypes (of the dispatch input) this kernel accepts."""
        return tuple(dtype_from_code(i).name for i in range(FASTOP_NUM_DTYPES)
                     if self.fns[i] is not NULL)

    def __repr__(self):
        return (f"<CKernel {self.name}({', '.join(self.input_names)}) -> "
                f"({', '.join(self.output_names)}) dtypes={list(self.dtypes)}>")

    def _set_op_name(self, str name):
        """Errors name the op as registered (``fastop::add``), set by the registry."""
        self.name = name

    # -- Cython API --------------------------------------------------------------
    cdef int pack(self, dict attrs, fastop_attrs* out) except -1:
        out.n_ints = 0
        if self.packer is None:
            if attrs:
                raise TypeError(f"{self.name}: takes no attributes, got {sorted(attrs)}")
            return 0
        if not attrs and self.defaults_packed:
            out[0] = self.defaults           # a raw call with every attribute defaulted
            return 0
        unknown = set(attrs) - set(self.attr_names)
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; "
                            f"expected some of {list(self.attr_names)}")
        try:
            ints, floats = self.packer(attrs)
        except (TypeError, ValueError) as e:      # packers leave naming the op to us
            raise type(e)(f"{self.name}: {e}") from None
        if len(ints) > FASTOP_MAX_ATTR_INTS or len(floats) > 4:
            raise ValueError(f"{self.name}: too many attribute values")
        out.n_ints = len(ints)
        for i, v in enumerate(ints):
            out.ints[i] = v
        for i, v in enumerate(floats):
            out.f[i] = v
        if not attrs:                        # packers are pure: keep the defaults
            self.defaults = out[0]
            self.defaults_packed = True
        return 0

    cdef kernel_fn resolve(self, int dtype) except NULL:
        cdef kernel_fn fn = self.fns[dtype]
        if fn is NULL:
            raise TypeError(f"{self.name}: dtype {dtype_from_code(dtype).name} is not "
                            f"supported for input '{self.input_names[self.dispatch_input]}'; "
                            f"expected one of {list(self.dtypes)}")
        return fn

    cdef int infer_views(self, fastop_view** ins, int n_in, fastop_view* outs,
                         const fastop_attrs* attrs, dict given=None) except -1:
        """Output metas into `outs`; an error names the inputs and the attributes given."""
        cdef int status = self.infer(ins, n_in, outs, len(self.output_names), attrs), i
        if status != K_OK:
            self._raise(status, [(None, None) if ins[i] is NULL else
                                 (view_shape(ins[i]), dtype_from_code(ins[i].dtype).name)
                                 for i in range(n_in)], given)
        return 0

    def _check_count(self, int given):
        """Raise unless `given` inputs leave off only optional trailing ones."""
        if given > len(self.input_names) or any(
                not name.endswith("?") for name in self.input_names[given:]):
            raise TypeError(f"{self.name}: expected {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {given}")

    def _check_optional(self, int i):
        if not self.input_names[i].endswith("?"):
            raise TypeError(f"{self.name}: input '{self.input_names[i]}' is required, got None")

    def _raise(self, int status, list described, dict given=None, str reason=None):
        parts = ", ".join(f"{name.rstrip('?')}: shape {shape} {dtype}" for name, (shape, dtype)
                          in zip(self.input_names, described) if shape is not None)
        if given:
            parts += ", " + ", ".join(f"{k}={v!r}" for k, v in given.items())
        exc = TypeError if status == K_ERR_DTYPE else ValueError
        meaning = reason or (self.reasons or {}).get(status) \
            or _REASONS.get(status, f"error {status}")
        if isinstance(meaning, tuple):      # (the exception class, the text)
            exc, meaning = meaning
        raise exc(f"{self.name}: {meaning}; got {parts}")

    cdef tuple run(self, tuple inputs, object out, const fastop_attrs* attrs, type out_cls,
                   dict given=None):
        """Validate, allocate (unless `out` is given) and compute; return the outputs.

        An optional input (declared ``"name?"``) may be None or left off the end; the
        kernel then sees a NULL view in its place.
        """
        cdef int n_in = len(self.input_names), n_out = len(self.output_names), i, j, status
        cdef fastop_view* in_views[MAX_OPERANDS]
        cdef fastop_view out_meta[MAX_OPERANDS]
        cdef fastop_view* out_views[MAX_OPERANDS]
        cdef DenseTensor t
        if len(inputs) != n_in:
            self._check_count(len(inputs))
        for i in range(n_in):
            x = inputs[i] if i < len(inputs) else None
            if x is None:
                self._check_optional(i)
                in_views[i] = NULL
            else:
                t = <DenseTensor>x
                if t.view.data == NULL and t.view.size:
                    check_initialised(t, f"{self.name}: input '{self.input_names[i]}'")
                in_views[i] = &t.view
        self.infer_views(in_views, n_in, out_meta, attrs, given)
        if self.is_view:
            if out is not None:
                raise TypeError(f"{self.name}: makes a view of its input; it takes no out=")
            return self._run_view(in_views, n_in, out_meta, inputs, attrs, out_cls, given)
        cdef kernel_fn fn = self.resolve(in_views[self.dispatch_input].dtype)
        cdef list results = []
        cdef list staging = []
        if out is None:
            try:
                for i in range(n_out):
                    t = alloc_tensor(out_cls, out_meta[i].ndim, out_meta[i].shape,
                                     out_meta[i].dtype)
                    results.append(t)
                    out_views[i] = &t.view
            except ValueError as e:     # a shape too big to address: name the op
                self._raise(K_ERR_SHAPE, [(None, None) if x is None else (x.shape, x.dtype.name)
                                          for x in inputs], given,
                            f"output '{self.output_names[i]}': {e}")
        else:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            if len(outs) != n_out:
                raise TypeError(f"{self.name}: out= needs {n_out} tensors "
                                f"({', '.join(self.output_names)}), got {len(outs)}")
            for i in range(n_out):
                t = _as_out(self, outs[i], i)
                if not view_same_meta(&t.view, &out_meta[i]):
                    raise ValueError(
                        f"{self.name}: out '{self.output_names[i]}' must have shape "
                        f"{view_shape(&out_meta[i])} and dtype "
                        f"{dtype_from_code(out_meta[i].dtype).name}, got shape {t.shape} "
                        f"and dtype {t.dtype.name}")
                for j in range(i):
                    # address ranges first (cheap); elements only when they intersect
                    if views_overlap(out_views[j], &t.view) and np.shares_memory(
                            as_ndarray(<DenseTensor>results[j]), as_ndarray(t)):
                        raise ValueError(
                            f"{self.name}: out '{self.output_names[i]}' shares memory "
                            f"with out '{self.output_names[j]}'; outputs must not overlap")
                results.append(t)
                out_views[i] = &t.view
            for i in range(n_out):
                bump_version(<DenseTensor>results[i])
                if self.must_stage(in_views, n_in, out_views[i], i):
                    # out shares memory with an input: compute aside, then copy
                    staged = alloc_tensor(DenseTensor, out_meta[i].ndim, out_meta[i].shape,
                                          out_meta[i].dtype)
                    out_views[i] = &(<DenseTensor>staged).view
                    staging.append((i, staged))
        if out_views[0].size >= self.parallel_grain:
            with nogil:
                status = fn(in_views, n_in, out_views, n_out, attrs)
        else:
            status = fn(in_views, n_in, out_views, n_out, attrs)
        if status != K_OK:
            self._raise(status, [(None, None) if inp is None else (inp.shape, inp.dtype.name)
                                 for inp in inputs], given)
        for i, staged in staging:
            view_copy(&(<DenseTensor>staged).view, &(<DenseTensor>results[i]).view)
        return tuple(results)

    cdef tuple _run_view(self, fastop_view** ins, int n_in, fastop_view* meta, tuple inputs,
                         const fastop_attrs* attrs, type out_cls, dict given):
        """A view kernel's output: a new `out_cls` tensor over input 0's memory (over a
        contiguous copy of it when the kernel cannot view its layout)."""
        cdef DenseTensor src = <DenseTensor>inputs[0]
        cdef kernel_fn fn = self.resolve(ins[self.dispatch_input].dtype)
        cdef DenseTensor out = <DenseTensor>(<PyTypeObject*>out_cls).tp_new(
            out_cls, <PyObject*>_NO_ARGS, NULL)
        cdef fastop_view* out_view = &out.view
        out.view = meta[0]
        cdef int status = fn(ins, n_in, &out_view, 1, attrs)
        if status == K_ERR_LAYOUT:
            src = src.copy()
            ins[0] = &src.view
            out.view = meta[0]
            status = fn(ins, n_in, &out_view, 1, attrs)
        if status != K_OK:
            self._raise(status, [(None, None) if x is None else (x.shape, x.dtype.name)
                                 for x in inputs], given)
        if not shape_fits(out.view.ndim, out.view.shape, out.view.dtype):
            self._raise(K_ERR_SHAPE, [(None, None) if x is None else (x.shape, x.dtype.name)
                                      for x in inputs], given,
                        f"the view of shape {view_shape(&out.view)} is too big to address")
        out.owner = view_owner(src)
        out.readonly = src.readonly or self.view_readonly
        return (out,)

    cdef bint must_stage(self, fastop_view** ins, int n_in, const fastop_view* out,
                         int out_index) noexcept nogil:
        """Whether writing output `out_index` directly into `out` could corrupt an input
        it shares memory with: anything but the same elements of an input it may be
        (any input of an in-place-safe kernel; the input an update kernel's output
        overwrites)."""
        cdef int j
        for j in range(n_in):
            if ins[j] != NULL and views_overlap(ins[j], out) and not (
                    (self.inplace_safe or self.update_of[out_index] == j)
                    and view_same_layout(ins[j], out)):
                return True
        return False

    # -- Python API ----------------------------------------------------------------
    def __call__(self, *inputs, out=None, **attrs):
        """Run the kernel on DenseTensors (numpy arrays and scalars are wrapped).

        Python scalars take the dtype of the dispatch input. With ``out=`` the result
        is written there (in place when ``out`` is an input; through a staging copy
        when it shares memory with an input in any other way).
        """
        cdef fastop_attrs packed
        if not attrs and self.packer is None and type(out) is DenseTensor and not self.is_view:
            fast = self._call_into(inputs, <DenseTensor>out)
            if fast is not None:
                return fast
        self.pack(attrs, &packed)
        cdef tuple dense = _as_inputs(self, inputs)
        cdef tuple results = self.run(dense, out, &packed, DenseTensor, attrs)
        return results[0] if len(results) == 1 else results

    cdef object _call_into(self, tuple inputs, DenseTensor out):
        """The raw call's common case without allocation or conversion: attribute-free,
        all inputs DenseTensors, one writable output of the inferred shape. Returns None
        when the case does not apply (the general path then handles it, errors included)."""
        cdef int n_in = len(inputs), i, status
        cdef fastop_view* in_views[MAX_OPERANDS]
        cdef fastop_view meta
        cdef fastop_view* out_view = &out.view
        cdef fastop_attrs none
        cdef kernel_fn fn
        if n_in != len(self.input_names) or len(self.output_names) != 1 or out.readonly:
            return None
        for i in range(n_in):
            x = inputs[i]
            if type(x) is not DenseTensor or (<DenseTensor>x).view.data == NULL:
                return None
            in_views[i] = &(<DenseTensor>x).view
        none.n_ints = 0
        if self.infer(in_views, n_in, &meta, 1, &none) != K_OK \
                or not view_same_meta(out_view, &meta) \
                or self.must_stage(in_views, n_in, out_view, 0):
            return None
        fn = self.fns[in_views[self.dispatch_input].dtype]
        if fn is NULL:
            return None
        bump_version(out)
        if out_view.size >= self.parallel_grain:
            with nogil:
                status = fn(in_views, n_in, &out_view, 1, &none)
        else:
            status = fn(in_views, n_in, &out_view, 1, &none)
        if status != K_OK:
            self._raise(status, [(x.shape, x.dtype.name) for x in inputs])
        return out

    def run_py(self, tuple inputs, dict attrs, type out_cls=DenseTensor):
        """Run on DenseTensors (or wrappable values) with an attrs dict; a tuple of
        outputs of type `out_cls`. Used by the registry's generic invoke path."""
        cdef fastop_attrs packed
        self.pack(attrs, &packed)
        return self.run(_as_inputs(self, inputs), None, &packed, out_cls, attrs)

    def meta(self, *metas, **attrs):
        """Infer output (shape, dtype) pairs from input (shape, dtype) pairs.

        Unknown dims may be None or -1; they come back as None.
        """
        cdef fastop_attrs packed
        cdef fastop_view views[MAX_OPERANDS]
        cdef fastop_view* in_views[MAX_OPERANDS]
        cdef fastop_view outs[MAX_OPERANDS]
        cdef int i, j
        cdef int n_in = len(self.input_names)
        if len(metas) != n_in:
            self._check_count(len(metas))
        self.pack(attrs, &packed)
        for i in range(n_in):
            if i >= len(metas) or metas[i] is None:
                self._check_optional(i)
                in_views[i] = NULL
                continue
            shape, dtype = metas[i]
            if len(shape) > FASTOP_MAX_NDIM:
                raise ValueError(f"{self.name}: at most {FASTOP_MAX_NDIM} dims")
            views[i].ndim = len(shape)
            views[i].dtype = dtype_code(dtype)
            views[i].size = 1
            for j, d in enumerate(shape):
                views[i].shape[j] = -1 if d is None or d < 0 else d
            in_views[i] = &views[i]
        self.infer_views(in_views, n_in, outs, &packed, attrs)
        return [([None if outs[i].shape[j] < 0 else outs[i].shape[j]
                  for j in range(outs[i].ndim)], dtype_from_code(outs[i].dtype))
                for i in range(len(self.output_names))]


cdef DenseTensor _as_out(CKernel k, object obj, int i):
    if isinstance(obj, DenseTensor):
        if (<DenseTensor>obj).readonly:
            raise ValueError(f"{k.name}: out '{k.output_names[i]}' is read-only")
        return <DenseTensor>obj
    try:
        from fastop._core.storage import from_numpy
        t = from_numpy(obj)
    except TypeError:
        raise TypeError(f"{k.name}: out '{k.output_names[i]}' must be a tensor or a "
                        f"writable numpy array, got {type(obj).__name__}") from None
    if (<DenseTensor>t).readonly:
        raise ValueError(f"{k.name}: out '{k.output_names[i]}' is read-only")
    return <DenseTensor>t


cdef inline bint _is_python_scalar(object x):
    return isinstance(x, (int, float, bool)) and not isinstance(x, np.generic)


cdef tuple _as_inputs(CKernel k, tuple inputs):
    """Wrap non-tensor inputs. Python scalars take the dispatch input's dtype, or when that
    is a scalar too (``subtract(2, x)``), the first non-bool tensor's (``where``'s
    condition does not decide); numpy scalars and arrays keep their own dtype."""
    cdef int i, n = len(inputs), ref_dtype = -1
    for x in inputs:
        if x is not None and not isinstance(x, DenseTensor):
            break
    else:
        return inputs
    converted = list(inputs)
    for i in range(n):
        x = converted[i]
        if x is not None and not _is_python_scalar(x):
            try:
                converted[i] = as_dense(x)
            except TypeError as e:
                raise TypeError(f"{k.name}: input '{k.input_names[i] if i < len(k.input_names) else i}'"
                                f" must be a tensor or array, got {type(x).__name__} ({e})") from None
    if 0 <= k.dispatch_input < n and isinstance(converted[k.dispatch_input], DenseTensor):
        ref_dtype = (<DenseTensor>converted[k.dispatch_input]).view.dtype
    else:
        for x in converted:
            if isinstance(x, DenseTensor) and (ref_dtype < 0 or ref_dtype == FASTOP_BOOL):
                ref_dtype = (<DenseTensor>x).view.dtype
    for i in range(n):
        x = converted[i]
        if _is_python_scalar(x):
            converted[i] = as_dense(x, ref_dtype if ref_dtype >= 0 else -1)
    return tuple(converted)


cdef CKernel make_kernel(str name, tuple input_names, tuple output_names, infer_fn infer,
                         kernel_fn f_bool, kernel_fn f_i32, kernel_fn f_i64,
                         kernel_fn f_f32, kernel_fn f_f64,
                         int dispatch_input=0, tuple attr_names=(), object packer=None,
                         Py_ssize_t parallel_grain=4096, bint inplace_safe=False,
                         tuple updates=(), bint is_view=False, bint view_readonly=False):
    """Describe a kernel: name, operand names, inference, one function per dtype
    (NULL where unsupported), how attributes pack into fastop_attrs, and which inputs
    an output may be: any (`inplace_safe`: elementwise kernels), or for an update
    kernel the input each output overwrites (`updates`, input names per output)."""
    cdef CKernel k = CKernel.__new__(CKernel)
    cdef int j
    if len(input_names) > MAX_OPERANDS or len(output_names) > MAX_OPERANDS:
        raise ValueError(f"{name}: at most {MAX_OPERANDS} inputs and outputs")
    if len(updates) > len(output_names):
        raise ValueError(f"{name}: updates names {len(updates)} inputs for "
                         f"{len(output_names)} outputs")
    for j in range(MAX_OPERANDS):
        k.update_of[j] = -1
    for j, updated in enumerate(updates):
        k.update_of[j] = input_names.index(updated)
    k.name = name
    k.input_names = input_names
    k.output_names = output_names
    k.attr_names = attr_names
    k.infer = infer
    k.fns[FASTOP_BOOL] = f_bool
    k.fns[FASTOP_INT32] = f_i32
    k.fns[FASTOP_INT64] = f_i64
    k.fns[FASTOP_FLOAT32] = f_f32
    k.fns[FASTOP_FLOAT64] = f_f64
    k.dispatch_input = dispatch_input
    k.packer = packer
    k.parallel_grain = parallel_grain
    k.inplace_safe = inplace_safe
    k.is_view = is_view
    k.view_readonly = view_readonly
    return k


cdef tuple _NO_ARGS = ()


cdef object view_owner(DenseTensor src):
    return src.owner if isinstance(src.owner, DenseTensor) else src


# --------------------------------------------------------------------------- Python kernels


cdef DenseTensor _checked(object value, const fastop_view* meta, type out_cls):
    """`value` as an `out_cls` tensor if it is an array or tensor fitting `meta`, else
    None (the caller's mismatch path explains or converts)."""
    cdef DenseTensor t, out
    cdef cnp.ndarray arr
    cdef cnp.npy_intp* dims
    cdef int i
    if cnp.PyArray_CheckExact(value):
        arr = <cnp.ndarray>value
        if cnp.PyArray_TYPE(arr) != numpy_type_num(meta.dtype) \
                or cnp.PyArray_NDIM(arr) != meta.ndim or not cnp.PyArray_ISNOTSWAPPED(arr):
            return None
        dims = cnp.PyArray_DIMS(arr)
        for i in range(meta.ndim):
            if meta.shape[i] >= 0 and dims[i] != meta.shape[i]:
                return None
        return wrap_ndarray(out_cls, arr)
    if isinstance(value, DenseTensor):
        t = <DenseTensor>value
        if not view_fits_meta(&t.view, meta):
            return None
        if type(t) is out_cls:
            return t
        out = <DenseTensor>(<PyTypeObject*>out_cls).tp_new(out_cls,
                                                           <PyObject*>_NO_ARGS, NULL)
        out.view = t.view
        out.owner = view_owner(t)
        out.readonly = t.readonly
        return out
    return None


cdef tuple wrap_results(object result, int n_out, const fastop_view* metas, type out_cls,
                        object mismatch):
    cdef DenseTensor t
    cdef int i
    cdef tuple out
    if n_out == 1 and not isinstance(result, (tuple, list)):
        t = _checked(result, &metas[0], out_cls)
        if t is not None:
            return (t,)
    elif isinstance(result, (tuple, list)) and len(result) == n_out:
        out = PyTuple_New(n_out)
        for i in range(n_out):
            t = _checked(result[i], &metas[i], out_cls)
            if t is None:
                break
            Py_INCREF(t)
            PyTuple_SET_ITEM(out, i, t)
        else:
            return out
    # the rare case: the op's own errors, or values its policy converts (py_func)
    values = mismatch(result)
    return tuple([_accepted(v, out_cls) for v in values])


cdef class PythonKernel:
    """A Python kernel bound to one call's attributes and its outputs' metas.

    ``PythonKernel(op_name, fn, attrs, metas, mismatch, inputs=None)``: `metas` is a list
    of ``(shape, dtype code)`` per output (None or -1 for a dim unknown until run time);
    `mismatch(result)` explains a result that does not fit them (raises) or returns the
    values to take as they are; `inputs`, a tuple of DenseTensors, records the signature
    eager dispatch memoizes the metas for (:meth:`matches`).
    """

    def __cinit__(self, str op_name, fn, dict attrs, list metas, mismatch, tuple inputs=None):
        cdef int i, j
        self.op_name, self.fn, self.attrs, self.mismatch = op_name, fn, attrs, mismatch
        self.metas = metas
        self.n_out = len(metas)
        self.out_metas = <fastop_view*>PyMem_Malloc(max(self.n_out, 1) * sizeof(fastop_view))
        self.n_in = -1 if inputs is None or not all(
            [isinstance(x, DenseTensor) for x in inputs]) else len(inputs)
        self.in_sig = <fastop_view*>PyMem_Malloc(max(self.n_in, 1) * sizeof(fastop_view))
        if self.out_metas is NULL or self.in_sig is NULL:
            raise MemoryError()
        for i, (shape, dtype) in enumerate(metas):
            if len(shape) > FASTOP_MAX_NDIM:
                raise ValueError(f"{op_name}: output {i} has {len(shape)} dims, at most "
                                 f"{FASTOP_MAX_NDIM} are supported")
            self.out_metas[i].dtype = dtype
            self.out_metas[i].ndim = len(shape)
            for j, d in enumerate(shape):
                self.out_metas[i].shape[j] = -1 if d is None or d < 0 else d
        for i in range(max(self.n_in, 0)):
            self.in_sig[i] = (<DenseTensor>inputs[i]).view

    def __dealloc__(self):
        PyMem_Free(self.out_metas)
        PyMem_Free(self.in_sig)

    cdef bint matches(self, tuple inputs, dict attrs) noexcept:
        """Whether `inputs` (DenseTensors) have the recorded dtypes and shapes and
        `attrs` is the recorded attrs dict itself."""
        cdef int i, d
        cdef fastop_view* have
        if attrs is not self.attrs or len(inputs) != self.n_in:
            return False
        for i in range(self.n_in):
            if not isinstance(inputs[i], DenseTensor):
                return False
            have = &(<DenseTensor>inputs[i]).view
            if have.dtype != self.in_sig[i].dtype or have.ndim != self.in_sig[i].ndim:
                return False
            for d in range(have.ndim):
                if have.shape[d] != self.in_sig[i].shape[d]:
                    return False
        return True

    cdef tuple call(self, object inputs, type out_cls):
        """Run on `inputs` (per declared input: a DenseTensor, a list of them for a
        variadic input, or None); the outputs as `out_cls` tensors."""
        cdef Py_ssize_t i, n = len(inputs)
        cdef list arrays = [None] * n
        for i in range(n):
            x = inputs[i]
            if isinstance(x, DenseTensor):
                arrays[i] = as_ndarray(<DenseTensor>x)
            elif x is not None:
                arrays[i] = [as_ndarray(<DenseTensor>t) for t in x]
        return self.call_arrays(arrays, out_cls)

    cdef tuple call_arrays(self, list arrays, type out_cls):
        """Run on numpy arrays (the static executor makes them from its slots)."""
        try:
            if self.attrs:
                result = self.fn(*arrays, **self.attrs)
            elif len(arrays) == 1:
                result = self.fn(arrays[0])
            else:
                result = self.fn(*arrays)
        except Exception as exc:
            add_note(exc, f"raised inside the Python kernel of op '{self.op_name}'")
            raise
        return wrap_results(result, self.n_out, self.out_metas, out_cls, self.mismatch)

    def __call__(self, *inputs):
        """Run on DenseTensors (a list for a variadic input, None for an absent one)."""
        return self.call(inputs, DenseTensor)


def add_note(exc, str note):
    """Attach a note to an exception (PEP 678), once."""
    notes = getattr(exc, "__notes__", None) or []
    if note in notes:
        return
    try:
        exc.add_note(note)
    except AttributeError:  # Python 3.10
        exc.__notes__ = [*notes, note]


cdef DenseTensor _accepted(object value, type out_cls):
    """A value the mismatch path accepted, as an `out_cls` tensor (zero-copy)."""
    cdef DenseTensor t, out
    if isinstance(value, DenseTensor) and type(value) is out_cls:
        return <DenseTensor>value
    if isinstance(value, DenseTensor):
        t = <DenseTensor>value
    else:
        t = wrap_ndarray(out_cls, value)
        if t is not None:
            return t
        t = as_dense(value)
    out = <DenseTensor>(<PyTypeObject*>out_cls).tp_new(out_cls, <PyObject*>_NO_ARGS,
                                                       NULL)
    out.view = t.view
    out.owner = view_owner(t)
    out.readonly = t.readonly
    return out
