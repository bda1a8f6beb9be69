"""CKernel: a Cython kernel described once, callable three ways.

* from Python, as a raw kernel (``fastop._core.elementwise.tanh(x, out=y)``);
* from eager dispatch, through :meth:`CKernel.run` (Cython, no Python in the loop);
* from the static executor, which reads ``infer`` and ``fns`` (C function pointers)
  into its plan once and calls them without the GIL.

The registry (``fastop.ops``) wraps a CKernel into an op definition; its shape/dtype
inference doubles as the op's meta function, so static graphs and kernels agree.
"""
from libc.string cimport memset
from fastop._core.storage cimport (DenseTensor, DType, fastop_view, fastop_attrs,
                                   FASTOP_MAX_NDIM, FASTOP_BOOL, FASTOP_NUM_DTYPES, alloc_tensor,
                                   as_dense, dtype_from_code, dtype_code, itemsize_of,
                                   view_same_meta, view_shape, view_copy, views_overlap,
                                   view_same_layout, bump_version, as_ndarray)

import operator

import numpy as np

from fastop._core.parallel import num_processors

__all__ = ["CKernel", "set_num_threads", "int_attr", "bool_attr", "ints_attr"]

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
        if len(ints) > 2 * FASTOP_MAX_NDIM or len(floats) > 4:
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
        reason = reason or (self.reasons or {}).get(status) \
            or _REASONS.get(status, f"error {status}")
        raise exc(f"{self.name}: {reason}; got {parts}")

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
                in_views[i] = &t.view
        self.infer_views(in_views, n_in, out_meta, attrs, given)
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
        if not attrs and self.packer is None and type(out) is DenseTensor:
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
            if type(x) is not DenseTensor:
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
                         tuple updates=()):
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
    k.fns[0] = f_bool
    k.fns[1] = f_i32
    k.fns[2] = f_i64
    k.fns[3] = f_f32
    k.fns[4] = f_f64
    k.dispatch_input = dispatch_input
    k.packer = packer
    k.parallel_grain = parallel_grain
    k.inplace_safe = inplace_safe
    return k
