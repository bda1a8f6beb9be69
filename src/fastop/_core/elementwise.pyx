# distutils: sources = src/fastop/_core/simd_math_impl.c
# distutils: libraries = npymath
"""Elementwise kernels: unary math, their backward forms, binary arithmetic,
comparisons, where, cast and full_like.

Every kernel runs the same way. The output and its inputs are walked in C order by the
broadcast iterator (``broadcast.pxd``: numpy's broadcasting rules, size-1 dims dropped,
contiguous dims merged), so a contiguous same-shape call is a single run. A run whose
operands all have unit stride goes straight to a typed contiguous loop (fused types;
exp/log/tanh/sigmoid/relu on floats call the SIMD functions of ``simd_math.h``);
anything else (views, transposes, stride-0 broadcast inputs) is gathered into small
per-thread buffers, computed by the same loop, and scattered back (``blockwise.pxd``'s
``blocks_range``, which activation.pyx and random.pyx use too). Work above
``use_threads`` (a cheap op needs 8x the elements of a transcendental one) is split
into equal pieces that the calling thread and fastop's pool workers
(``parallel.pyx``) take as they come; small calls never wake a thread. Float binary arithmetic and the backward kernels run on the vectorized loops
of ``simd_math.h`` too; results of 8 MB and more are streamed to memory.

``out=`` may be an input itself (in place). An input that overlaps the output in any
other way is copied first, so the result is always as if inputs were read before the
output is written.
"""
from libc.stdint cimport (uint8_t, uint16_t, int8_t, int16_t, INT32_MIN, INT32_MAX,
                          INT8_MIN, INT8_MAX, INT16_MIN, INT16_MAX, UINT8_MAX)
from libc.stdlib cimport malloc, free
from libc.math cimport fabs, sqrt as c_sqrt, pow as c_pow
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_BOOL,
                                   FASTOP_INT32, FASTOP_INT64, FASTOP_FLOAT32,
                                   FASTOP_FLOAT64, FASTOP_FLOAT16, FASTOP_UINT8,
                                   FASTOP_INT8, FASTOP_INT16, itemsize_of,
                                   view_copy, view_set_contiguous_strides,
                                   view_element_offset,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, accept_narrow_ints, K_OK,
                                  K_ERR_BROADCAST, K_ERR_DTYPE,
                                  K_ERR_VALUE, K_ERR_MEMORY, get_num_threads, use_threads)
from fastop._core.parallel cimport parallel_run
from fastop._core.broadcast cimport (bcast_iter, broadcast_shape, bcast_iter_init,
                                     BCAST_MAX_OPERANDS)
from fastop._core.blockwise cimport block_fn, blocks_range

from fastop._core.simd_math cimport *

# float16 conversions (round to nearest even, inf/nan/subnormals kept): numpy's own, from
# its npymath library, so a float16 cast gives exactly what numpy's astype gives
cdef extern from "numpy/halffloat.h" nogil:
    float npy_half_to_float(uint16_t h)
    uint16_t npy_float_to_half(float f)
    uint16_t npy_double_to_half(double d)

__all__ = ["neg", "abs", "sign", "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu",
           "tanh_grad", "sigmoid_grad", "relu_grad", "sqrt_grad",
           "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum",
           "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal",
           "where", "cast", "full_like"]

# Every type an element can have, and the types arithmetic computes in (this module's
# own numeric_t: storage.pxd's int, long long, float and double, and the narrow integers
# uint8, int8 and int16, whose results C's conversion back wraps, as numpy's arithmetic
# does). bool is stored as one byte (0 or 1), like numpy, and shares uint8_t with uint8.
ctypedef fused numeric_t:
    uint8_t
    int8_t
    int16_t
    int
    long long
    float
    double

# cast: source and destination vary independently (49 specializations; bool and uint8
# share uint8_t, told apart by _cast_loop's to_bool).
ctypedef fused src_t:
    uint8_t
    int8_t
    int16_t
    int
    long long
    float
    double

ctypedef fused dst_t:
    uint8_t
    int8_t
    int16_t
    int
    long long
    float
    double

cdef enum:
    PIECES_PER_THREAD = 4   # threads take pieces dynamically: a busy core slows no one
    MAX_PIECES = 256
    # Op codes. Binary arithmetic uses simd_math.h's FASTOP_BIN_* codes; pow (libm,
    # and integer powers) is the one binary op simd_math does not do.
    B_POW = 19
    U_NEG = 20
    U_ABS = 21
    U_SIGN = 22
    U_SQUARE = 23
    U_SQRT = 24
    U_EXP = 25
    U_LOG = 26
    U_TANH = 27
    U_SIGMOID = 28
    U_RELU = 29
    C_EQ = 40
    C_NE = 41
    C_LT = 42
    C_LE = 43
    C_GT = 44
    C_GE = 45

# Threads pay off once a loop has ~32K elements of transcendental work (use_threads'
# threshold); a cheap op (add, compare, copy) needs 8x more elements than that.
cdef enum:
    HEAVY = 0
    LIGHT = 3


ctypedef struct OpCtx:
    int op
    int dtype                      # dtype of the typed inputs (x for where)
    int out_dtype
    const fastop_attrs* attrs

# Block functions (blockwise.pxd's block_fn) get an OpCtx as their context; p[0] is
# the output, p[1 + i] input i; the elements' position (`start`) is not used here.


# --------------------------------------------------------------------------- typed loops

cdef inline void _unary_loop(int op, const numeric_t* x, numeric_t* y, ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    if op == U_NEG:
        for i in range(n):
            y[i] = -x[i]
    elif op == U_ABS:
        if numeric_t is float or numeric_t is double:
            for i in range(n):
                y[i] = fabs(x[i])
        elif numeric_t is uint8_t:
            for i in range(n):
                y[i] = x[i]
        else:
            for i in range(n):
                y[i] = -x[i] if x[i] < 0 else x[i]
    elif op == U_SIGN:
        if numeric_t is float or numeric_t is double:
            for i in range(n):   # nan stays nan, like numpy
                y[i] = x[i] if x[i] != x[i] else <numeric_t>((x[i] > 0) - (x[i] < 0))
        else:
            for i in range(n):
                y[i] = (x[i] > 0) - (x[i] < 0)
    elif op == U_SQUARE:
        for i in range(n):
            y[i] = x[i] * x[i]
    elif op == U_RELU:
        if numeric_t is float:
            fastop_vrelu_f32(x, y, n)
        elif numeric_t is double:
            fastop_vrelu_f64(x, y, n)
        else:
            for i in range(n):
                y[i] = 0 if x[i] < 0 else x[i]
    elif numeric_t is float:
        if op == U_SQRT:
            for i in range(n):
                y[i] = c_sqrt(x[i])
        elif op == U_EXP:
            fastop_vexp_f32(x, y, n)
        elif op == U_LOG:
            fastop_vlog_f32(x, y, n)
        elif op == U_TANH:
            fastop_vtanh_f32(x, y, n)
        elif op == U_SIGMOID:
            fastop_vsigmoid_f32(x, y, n)
    elif numeric_t is double:
        if op == U_SQRT:
            for i in range(n):
                y[i] = c_sqrt(x[i])
        elif op == U_EXP:
            fastop_vexp_f64(x, y, n)
        elif op == U_LOG:
            fastop_vlog_f64(x, y, n)
        elif op == U_TANH:
            fastop_vtanh_f64(x, y, n)
        elif op == U_SIGMOID:
            fastop_vsigmoid_f64(x, y, n)


cdef inline numeric_t _ipow(numeric_t base, long long e) noexcept nogil:
    """base ** e for a non-negative integer e, by squaring (wraps like numpy)."""
    cdef numeric_t result = 1
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e = e >> 1
    return result


cdef inline int _binary_loop(int op, const numeric_t* a, const numeric_t* b, numeric_t* y,
                             ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    if numeric_t is float:
        if op != B_POW:
            fastop_vbinary_f32(op, a, b, y, n)
            return K_OK
    elif numeric_t is double:
        if op != B_POW:
            fastop_vbinary_f64(op, a, b, y, n)
            return K_OK
    if op == FASTOP_BIN_ADD:
        for i in range(n):
            y[i] = a[i] + b[i]
    elif op == FASTOP_BIN_SUB:
        for i in range(n):
            y[i] = a[i] - b[i]
    elif op == FASTOP_BIN_MUL:
        for i in range(n):
            y[i] = a[i] * b[i]
    elif op == FASTOP_BIN_MAX:
        for i in range(n):
            y[i] = a[i] if a[i] >= b[i] else b[i]
    elif op == FASTOP_BIN_MIN:
        for i in range(n):
            y[i] = a[i] if a[i] <= b[i] else b[i]
    elif op == B_POW:
        if numeric_t is float or numeric_t is double:
            for i in range(n):
                y[i] = c_pow(a[i], b[i])
        else:
            for i in range(n):
                y[i] = _ipow(a[i], <long long>b[i])   # b >= 0: checked by _k_pow
    return K_OK


cdef inline void _compare_loop(int op, const numeric_t* a, const numeric_t* b, uint8_t* y,
                               ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    if op == C_EQ:
        for i in range(n):
            y[i] = a[i] == b[i]
    elif op == C_NE:
        for i in range(n):
            y[i] = a[i] != b[i]
    elif op == C_LT:
        for i in range(n):
            y[i] = a[i] < b[i]
    elif op == C_LE:
        for i in range(n):
            y[i] = a[i] <= b[i]
    elif op == C_GT:
        for i in range(n):
            y[i] = a[i] > b[i]
    elif op == C_GE:
        for i in range(n):
            y[i] = a[i] >= b[i]


cdef inline void _where_loop(const uint8_t* c, const numeric_t* x, const numeric_t* y, numeric_t* out,
                             ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    for i in range(n):
        out[i] = x[i] if c[i] else y[i]


cdef inline void _cast_loop(const src_t* x, dst_t* y, ptrdiff_t n, bint to_bool) noexcept nogil:
    """y = x converted: to bool x != 0; a float to a narrow integer (uint8, int8, int16)
    truncates toward zero into int64 first, then wraps, as numpy's astype does for the
    values numpy defines; integers to narrower integers wrap."""
    cdef ptrdiff_t i
    if dst_t is uint8_t:
        if to_bool:
            for i in range(n):
                y[i] = x[i] != 0
            return
    if (src_t is float or src_t is double) and (
            dst_t is uint8_t or dst_t is int8_t or dst_t is int16_t):
        for i in range(n):
            y[i] = <dst_t><long long>x[i]
    else:
        for i in range(n):
            y[i] = <dst_t>x[i]


cdef inline void _cast_half_loop(const uint16_t* x, dst_t* y, ptrdiff_t n,
                                 bint to_bool) noexcept nogil:
    cdef ptrdiff_t i
    cdef float v
    for i in range(n):
        v = npy_half_to_float(x[i])
        if dst_t is uint8_t:
            y[i] = (v != 0) if to_bool else <uint8_t><long long>v
        elif dst_t is int8_t or dst_t is int16_t:
            y[i] = <dst_t><long long>v
        else:
            y[i] = <dst_t>v


cdef inline void _cast_from(int src, const char* x, dst_t* y, ptrdiff_t n,
                            bint to_bool) noexcept nogil:
    if src == FASTOP_BOOL or src == FASTOP_UINT8:   # uint8 to bool: x != 0, as numpy
        _cast_loop(<const uint8_t*>x, y, n, to_bool)
    elif src == FASTOP_FLOAT16:
        _cast_half_loop(<const uint16_t*>x, y, n, to_bool)
    elif src == FASTOP_INT8:
        _cast_loop(<const int8_t*>x, y, n, to_bool)
    elif src == FASTOP_INT16:
        _cast_loop(<const int16_t*>x, y, n, to_bool)
    elif src == FASTOP_INT32:
        _cast_loop(<const int*>x, y, n, to_bool)
    elif src == FASTOP_INT64:
        _cast_loop(<const long long*>x, y, n, to_bool)
    elif src == FASTOP_FLOAT32:
        _cast_loop(<const float*>x, y, n, to_bool)
    else:
        _cast_loop(<const double*>x, y, n, to_bool)


cdef inline void _fill_loop(numeric_t* y, numeric_t value, ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    for i in range(n):
        y[i] = value


# --------------------------------------------------------------------------- block functions

cdef int _unary_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    if c.dtype == FASTOP_FLOAT32:
        _unary_loop(c.op, <const float*>p[1], <float*>p[0], n)
    elif c.dtype == FASTOP_FLOAT64:
        _unary_loop(c.op, <const double*>p[1], <double*>p[0], n)
    elif c.dtype == FASTOP_INT32:
        _unary_loop(c.op, <const int*>p[1], <int*>p[0], n)
    elif c.dtype == FASTOP_INT64:
        _unary_loop(c.op, <const long long*>p[1], <long long*>p[0], n)
    elif c.dtype == FASTOP_INT16:
        _unary_loop(c.op, <const int16_t*>p[1], <int16_t*>p[0], n)
    elif c.dtype == FASTOP_INT8:
        _unary_loop(c.op, <const int8_t*>p[1], <int8_t*>p[0], n)
    else:
        _unary_loop(c.op, <const uint8_t*>p[1], <uint8_t*>p[0], n)
    return K_OK


cdef int _binary_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    if c.dtype == FASTOP_FLOAT32:
        return _binary_loop(c.op, <const float*>p[1], <const float*>p[2], <float*>p[0], n)
    if c.dtype == FASTOP_FLOAT64:
        return _binary_loop(c.op, <const double*>p[1], <const double*>p[2], <double*>p[0], n)
    if c.dtype == FASTOP_INT32:
        return _binary_loop(c.op, <const int*>p[1], <const int*>p[2], <int*>p[0], n)
    if c.dtype == FASTOP_INT64:
        return _binary_loop(c.op, <const long long*>p[1], <const long long*>p[2],
                            <long long*>p[0], n)
    if c.dtype == FASTOP_INT16:
        return _binary_loop(c.op, <const int16_t*>p[1], <const int16_t*>p[2], <int16_t*>p[0], n)
    if c.dtype == FASTOP_INT8:
        return _binary_loop(c.op, <const int8_t*>p[1], <const int8_t*>p[2],
                            <int8_t*>p[0], n)
    return _binary_loop(c.op, <const uint8_t*>p[1], <const uint8_t*>p[2], <uint8_t*>p[0], n)


cdef int _compare_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    cdef uint8_t* y = <uint8_t*>p[0]
    if c.dtype == FASTOP_BOOL or c.dtype == FASTOP_UINT8:
        _compare_loop(c.op, <const uint8_t*>p[1], <const uint8_t*>p[2], y, n)
    elif c.dtype == FASTOP_INT8:
        _compare_loop(c.op, <const int8_t*>p[1], <const int8_t*>p[2], y, n)
    elif c.dtype == FASTOP_INT16:
        _compare_loop(c.op, <const int16_t*>p[1], <const int16_t*>p[2], y, n)
    elif c.dtype == FASTOP_INT32:
        _compare_loop(c.op, <const int*>p[1], <const int*>p[2], y, n)
    elif c.dtype == FASTOP_INT64:
        _compare_loop(c.op, <const long long*>p[1], <const long long*>p[2], y, n)
    elif c.dtype == FASTOP_FLOAT32:
        _compare_loop(c.op, <const float*>p[1], <const float*>p[2], y, n)
    else:
        _compare_loop(c.op, <const double*>p[1], <const double*>p[2], y, n)
    return K_OK


cdef int _where_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    cdef const uint8_t* cond = <const uint8_t*>p[1]
    if c.dtype == FASTOP_BOOL or c.dtype == FASTOP_UINT8:
        _where_loop(cond, <const uint8_t*>p[2], <const uint8_t*>p[3], <uint8_t*>p[0], n)
    elif c.dtype == FASTOP_INT8:
        _where_loop(cond, <const int8_t*>p[2], <const int8_t*>p[3],
                    <int8_t*>p[0], n)
    elif c.dtype == FASTOP_INT16:
        _where_loop(cond, <const int16_t*>p[2], <const int16_t*>p[3], <int16_t*>p[0], n)
    elif c.dtype == FASTOP_INT32:
        _where_loop(cond, <const int*>p[2], <const int*>p[3], <int*>p[0], n)
    elif c.dtype == FASTOP_INT64:
        _where_loop(cond, <const long long*>p[2], <const long long*>p[3], <long long*>p[0], n)
    elif c.dtype == FASTOP_FLOAT32:
        _where_loop(cond, <const float*>p[2], <const float*>p[3], <float*>p[0], n)
    else:
        _where_loop(cond, <const double*>p[2], <const double*>p[3], <double*>p[0], n)
    return K_OK


cdef void _cast_to_half(int src, const char* x, uint16_t* y, ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    if src == FASTOP_FLOAT32:
        for i in range(n):
            y[i] = npy_float_to_half((<const float*>x)[i])
    elif src == FASTOP_FLOAT64:
        for i in range(n):
            y[i] = npy_double_to_half((<const double*>x)[i])
    elif src == FASTOP_INT32:
        for i in range(n):
            y[i] = npy_double_to_half((<const int*>x)[i])
    elif src == FASTOP_INT64:
        for i in range(n):
            y[i] = npy_double_to_half(<double>(<const long long*>x)[i])
    elif src == FASTOP_INT16:
        for i in range(n):
            y[i] = npy_float_to_half((<const int16_t*>x)[i])
    elif src == FASTOP_INT8:
        for i in range(n):
            y[i] = npy_float_to_half((<const int8_t*>x)[i])
    elif src == FASTOP_FLOAT16:
        for i in range(n):
            y[i] = (<const uint16_t*>x)[i]
    else:                                        # bool, uint8
        for i in range(n):
            y[i] = npy_float_to_half((<const uint8_t*>x)[i])


cdef int _cast_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    if c.out_dtype == FASTOP_FLOAT16:
        _cast_to_half(c.dtype, p[1], <uint16_t*>p[0], n)
    elif c.out_dtype == FASTOP_BOOL:
        _cast_from(c.dtype, p[1], <uint8_t*>p[0], n, True)
    elif c.out_dtype == FASTOP_UINT8:
        _cast_from(c.dtype, p[1], <uint8_t*>p[0], n, False)
    elif c.out_dtype == FASTOP_INT8:
        _cast_from(c.dtype, p[1], <int8_t*>p[0], n, False)
    elif c.out_dtype == FASTOP_INT16:
        _cast_from(c.dtype, p[1], <int16_t*>p[0], n, False)
    elif c.out_dtype == FASTOP_INT32:
        _cast_from(c.dtype, p[1], <int*>p[0], n, False)
    elif c.out_dtype == FASTOP_INT64:
        _cast_from(c.dtype, p[1], <long long*>p[0], n, False)
    elif c.out_dtype == FASTOP_FLOAT32:
        _cast_from(c.dtype, p[1], <float*>p[0], n, False)
    else:
        _cast_from(c.dtype, p[1], <double*>p[0], n, False)
    return K_OK


cdef int _fill_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    cdef const OpCtx* c = <const OpCtx*>ctx
    # attrs: f[0] = the value; ints[0] = the value as an integer (exact for int64;
    # in range for the integer dtypes: _k_full_like)
    if c.dtype == FASTOP_BOOL:
        _fill_loop(<uint8_t*>p[0], <uint8_t>(c.attrs.f[0] != 0), n)
    elif c.dtype == FASTOP_UINT8:
        _fill_loop(<uint8_t*>p[0], <uint8_t>c.attrs.ints[0], n)
    elif c.dtype == FASTOP_INT8:
        _fill_loop(<int8_t*>p[0], <int8_t>c.attrs.ints[0], n)
    elif c.dtype == FASTOP_INT16:
        _fill_loop(<int16_t*>p[0], <int16_t>c.attrs.ints[0], n)
    elif c.dtype == FASTOP_INT32:
        _fill_loop(<int*>p[0], <int>c.attrs.ints[0], n)
    elif c.dtype == FASTOP_INT64:
        _fill_loop(<long long*>p[0], <long long>c.attrs.ints[0], n)
    elif c.dtype == FASTOP_FLOAT32:
        _fill_loop(<float*>p[0], <float>c.attrs.f[0], n)
    else:
        _fill_loop(<double*>p[0], c.attrs.f[0], n)
    return K_OK


# --------------------------------------------------------------------------- the driver

cdef inline bint _same_view(const fastop_view* a, const fastop_view* b) noexcept nogil:
    cdef int i
    if a.data != b.data or a.ndim != b.ndim:
        return False
    for i in range(a.ndim):
        if a.shape[i] != b.shape[i] or (a.shape[i] > 1 and a.strides[i] != b.strides[i]):
            return False
    return True


cdef inline void _extent(const fastop_view* v, char** lo, char** hi) noexcept nogil:
    """The byte range [lo, hi) a view touches."""
    cdef int i
    cdef ptrdiff_t span
    lo[0] = v.data
    hi[0] = v.data + itemsize_of(v.dtype)
    for i in range(v.ndim):
        span = (v.shape[i] - 1) * v.strides[i]
        if span < 0:
            lo[0] += span
        else:
            hi[0] += span


cdef inline bint _overlaps(const fastop_view* a, const fastop_view* b) noexcept nogil:
    cdef char* alo
    cdef char* ahi
    cdef char* blo
    cdef char* bhi
    if a.size == 0 or b.size == 0:
        return False
    _extent(a, &alo, &ahi)
    _extent(b, &blo, &bhi)
    return alo < bhi and blo < ahi


ctypedef struct RangeJob:
    block_fn fn
    void* ctx                      # the OpCtx
    const bcast_iter* it
    const ptrdiff_t* itemsizes
    ptrdiff_t size, chunk          # output elements, elements per piece
    int* codes                     # status of each piece


cdef void _range_piece(void* job, int t) noexcept nogil:
    """Piece t of a threaded _execute: output elements [t·chunk, (t+1)·chunk)."""
    cdef RangeJob* j = <RangeJob*>job
    j.codes[t] = blocks_range(j.fn, j.ctx, j.it, j.itemsizes, 1, min(t * j.chunk, j.size),
                              min((t + 1) * j.chunk, j.size))


cdef int _execute(block_fn fn, OpCtx* c, fastop_view** ins, int n_in, fastop_view* out,
                  int cost_shift) noexcept nogil:
    """Run `fn` over out = f(ins) with broadcasting, buffering and threads."""
    cdef bcast_iter it
    cdef ptrdiff_t itemsizes[BCAST_MAX_OPERANDS]
    cdef fastop_view copies[BCAST_MAX_OPERANDS]
    cdef fastop_view* views[BCAST_MAX_OPERANDS]
    cdef void* temps[BCAST_MAX_OPERANDS]
    cdef int codes[MAX_PIECES]
    cdef RangeJob job
    cdef int i, t, nt = 1, npieces, status = K_OK
    cdef ptrdiff_t size = out.size, chunk, nbytes
    if size == 0:
        return K_OK
    for i in range(n_in):
        views[i] = ins[i]
        temps[i] = NULL
    for i in range(n_in):
        if _overlaps(ins[i], out) and not _same_view(ins[i], out):
            # partial overlap: read from a private copy
            copies[i] = ins[i][0]
            view_set_contiguous_strides(&copies[i])
            temps[i] = malloc(copies[i].size * itemsize_of(copies[i].dtype))
            if temps[i] == NULL:
                status = K_ERR_MEMORY
                break
            copies[i].data = <char*>temps[i]
            view_copy(ins[i], &copies[i])
            views[i] = &copies[i]
    if status == K_OK:
        bcast_iter_init(&it, out, views, n_in)
        itemsizes[0] = itemsize_of(out.dtype)
        for i in range(n_in):
            itemsizes[i + 1] = itemsize_of(views[i].dtype)
        if use_threads(size >> cost_shift):
            nt = get_num_threads()
        if nt <= 1:
            status = blocks_range(fn, c, &it, itemsizes, 1, 0, size)
        else:
            # A few equal pieces per thread, taken as they come (fastop._core.parallel:
            # the caller starts at once, a worker slow to wake or busy elsewhere holds no
            # one up). Very large
            # results keep pieces of at least FASTOP_STREAM_MIN_BYTES (streamed out).
            npieces = nt * PIECES_PER_THREAD
            nbytes = size * itemsizes[0]
            if nbytes >= FASTOP_STREAM_MIN_BYTES * nt:
                npieces = nt * <int>min(PIECES_PER_THREAD,
                                        nbytes // (FASTOP_STREAM_MIN_BYTES * nt))
            npieces = min(npieces, MAX_PIECES)
            # multiples of 16 elements, so that pieces never share a cache line
            chunk = ((size + npieces - 1) // npieces + 15) & ~(<ptrdiff_t>15)
            job.fn, job.ctx, job.it, job.itemsizes = fn, c, &it, itemsizes
            job.size, job.chunk, job.codes = size, chunk, codes
            parallel_run(_range_piece, &job, npieces, nt)
            for t in range(npieces):
                if codes[t] != K_OK:
                    status = codes[t]
    for i in range(n_in):
        free(temps[i])
    return status


cdef inline int _unary(int op, fastop_view** ins, fastop_view* out, int cost_shift) noexcept nogil:
    cdef OpCtx c
    c.op = op
    c.dtype = ins[0].dtype
    return _execute(_unary_block, &c, ins, 1, out, cost_shift)


cdef inline int _binary(int op, fastop_view** ins, fastop_view* out, int cost_shift) noexcept nogil:
    cdef OpCtx c
    c.op = op
    c.dtype = ins[0].dtype
    return _execute(_binary_block, &c, ins, 2, out, cost_shift)


cdef inline int _compare(int op, fastop_view** ins, fastop_view* out) noexcept nogil:
    cdef OpCtx c
    c.op = op
    c.dtype = ins[0].dtype
    return _execute(_compare_block, &c, ins, 2, out, LIGHT)


# --------------------------------------------------------------------------- inference

cdef int _infer_same(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    """Output: the input's shape and dtype."""
    view_copy_meta(ins[0], &outs[0])
    return K_OK


cdef int _infer_binary(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                       const fastop_attrs* attrs) noexcept nogil:
    """Equal dtypes; the broadcast shape; the inputs' dtype."""
    if ins[0].dtype != ins[1].dtype:
        return K_ERR_DTYPE
    outs[0].dtype = ins[0].dtype
    return K_ERR_BROADCAST if broadcast_shape(ins, 2, &outs[0]) else K_OK


cdef int _infer_compare(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                        const fastop_attrs* attrs) noexcept nogil:
    """Equal dtypes; the broadcast shape; bool."""
    if ins[0].dtype != ins[1].dtype:
        return K_ERR_DTYPE
    outs[0].dtype = FASTOP_BOOL
    return K_ERR_BROADCAST if broadcast_shape(ins, 2, &outs[0]) else K_OK


cdef int _infer_where(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    """A bool condition, x and y of one dtype; the broadcast of all three."""
    if ins[0].dtype != FASTOP_BOOL or ins[1].dtype != ins[2].dtype:
        return K_ERR_DTYPE
    outs[0].dtype = ins[1].dtype
    return K_ERR_BROADCAST if broadcast_shape(ins, 3, &outs[0]) else K_OK


cdef int _infer_cast(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    """x's shape, the dtype given by attrs.ints[0]."""
    _infer_same(ins, n_in, outs, n_out, attrs)
    outs[0].dtype = <int>attrs.ints[0]
    return K_OK


# --------------------------------------------------------------------------- kernels

cdef int _k_neg(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_NEG, ins, outs[0], LIGHT)

cdef int _k_abs(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_ABS, ins, outs[0], LIGHT)

cdef int _k_sign(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_SIGN, ins, outs[0], LIGHT)

cdef int _k_square(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                   const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_SQUARE, ins, outs[0], LIGHT)

cdef int _k_relu(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_RELU, ins, outs[0], LIGHT)

cdef int _k_sqrt(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_SQRT, ins, outs[0], HEAVY)

cdef int _k_exp(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_EXP, ins, outs[0], HEAVY)

cdef int _k_log(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_LOG, ins, outs[0], HEAVY)

cdef int _k_tanh(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_TANH, ins, outs[0], HEAVY)

cdef int _k_sigmoid(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                    const fastop_attrs* attrs) noexcept nogil:
    return _unary(U_SIGMOID, ins, outs[0], HEAVY)

cdef int _k_add(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_ADD, ins, outs[0], LIGHT)

cdef int _k_subtract(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_SUB, ins, outs[0], LIGHT)

cdef int _k_multiply(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_MUL, ins, outs[0], LIGHT)

cdef int _k_divide(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                   const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_DIV, ins, outs[0], LIGHT)

cdef bint _has_negative(const fastop_view* v) noexcept nogil:
    """Whether a signed integer view (any layout) holds a value below 0."""
    cdef ptrdiff_t j, off
    for j in range(v.size):
        off = view_element_offset(v, j)
        if v.dtype == FASTOP_INT32:
            if (<const int*>(v.data + off))[0] < 0:
                return True
        elif v.dtype == FASTOP_INT16:
            if (<const int16_t*>(v.data + off))[0] < 0:
                return True
        elif v.dtype == FASTOP_INT8:
            if (<const int8_t*>(v.data + off))[0] < 0:
                return True
        elif (<const long long*>(v.data + off))[0] < 0:
            return True
    return False


cdef int _k_pow(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                const fastop_attrs* attrs) noexcept nogil:
    # integers to negative powers are refused (as numpy) before anything is written,
    # so a failed call leaves out= (which may be x) as it was
    if FASTOP_INT8 <= ins[1].dtype <= FASTOP_INT64 and _has_negative(ins[1]):
        return K_ERR_VALUE
    return _binary(B_POW, ins, outs[0], HEAVY)

cdef int _k_maximum(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                    const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_MAX, ins, outs[0], LIGHT)

cdef int _k_minimum(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                    const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_MIN, ins, outs[0], LIGHT)

cdef int _k_tanh_grad(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_TANH_GRAD, ins, outs[0], LIGHT)

cdef int _k_sigmoid_grad(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_SIGMOID_GRAD, ins, outs[0], LIGHT)

cdef int _k_relu_grad(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_RELU_GRAD, ins, outs[0], LIGHT)

cdef int _k_sqrt_grad(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _binary(FASTOP_BIN_SQRT_GRAD, ins, outs[0], LIGHT)

cdef int _k_equal(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                  const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_EQ, ins, outs[0])

cdef int _k_not_equal(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_NE, ins, outs[0])

cdef int _k_less_than(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_LT, ins, outs[0])

cdef int _k_less_equal(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                       const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_LE, ins, outs[0])

cdef int _k_greater_than(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_GT, ins, outs[0])

cdef int _k_greater_equal(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                          const fastop_attrs* attrs) noexcept nogil:
    return _compare(C_GE, ins, outs[0])

cdef int _k_where(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                  const fastop_attrs* attrs) noexcept nogil:
    cdef OpCtx c
    c.dtype = ins[1].dtype
    return _execute(_where_block, &c, ins, 3, outs[0], LIGHT)

cdef int _k_cast(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* attrs) noexcept nogil:
    cdef OpCtx c
    c.dtype = ins[0].dtype
    c.out_dtype = outs[0].dtype
    return _execute(_cast_block, &c, ins, 1, outs[0], LIGHT)

cdef inline bint _fits_integer(long long value, int dtype) noexcept nogil:
    """Whether an integer fits an integer dtype (int64: every one that arrives)."""
    if dtype == FASTOP_UINT8:
        return 0 <= value <= UINT8_MAX
    if dtype == FASTOP_INT8:
        return INT8_MIN <= value <= INT8_MAX
    if dtype == FASTOP_INT16:
        return INT16_MIN <= value <= INT16_MAX
    if dtype == FASTOP_INT32:
        return INT32_MIN <= value <= INT32_MAX
    return True


cdef int _k_full_like(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    cdef OpCtx c
    cdef long long value = attrs.ints[0]
    if FASTOP_UINT8 <= outs[0].dtype <= FASTOP_INT64 and not (
            attrs.ints[1] and _fits_integer(value, outs[0].dtype)):
        return K_ERR_VALUE             # checked before writing: numpy's OverflowError
    c.dtype = outs[0].dtype
    c.attrs = attrs
    return _execute(_fill_block, &c, ins, 0, outs[0], LIGHT)


# --------------------------------------------------------------------------- attribute packers

def _pack_cast(attrs):
    """cast(x, dtype=...): ints = [dtype code]."""
    from fastop._core.storage import as_dtype
    if "dtype" not in attrs:
        raise TypeError("missing attribute 'dtype'")
    return (as_dtype(attrs["dtype"]).code,), ()


def _pack_fill(attrs):
    """full_like(x, fill_value=...): f = [value]; ints = [value as an int64, whether it
    is one] (not: inf, nan, beyond int64)."""
    value = attrs.get("fill_value", 0.0)
    if not isinstance(value, (bool, int, float)):
        try:
            value = value.item()
        except AttributeError:
            raise TypeError(f"fill_value must be a number, got "
                            f"{type(value).__name__}") from None
    try:
        as_int = int(value)            # a float truncates toward zero, as in numpy
    except (OverflowError, ValueError):    # inf, nan
        as_int = None
    fits = as_int is not None and -2 ** 63 <= as_int < 2 ** 63
    return (as_int if fits else 0, int(fits)), (float(value),)


# --------------------------------------------------------------------------- the kernels

# Unary math. neg/abs/sign/square/relu take the integers and the floats; the rest
# floats only (numpy would promote ints to float; fastop asks for an explicit cast).
neg = make_kernel("neg", ("x",), ("out",), _infer_same, NULL, _k_neg, _k_neg, _k_neg, _k_neg)
abs = make_kernel("abs", ("x",), ("out",), _infer_same, NULL, _k_abs, _k_abs, _k_abs, _k_abs)
sign = make_kernel("sign", ("x",), ("out",), _infer_same, NULL, _k_sign, _k_sign, _k_sign,
                   _k_sign)
square = make_kernel("square", ("x",), ("out",), _infer_same, NULL, _k_square, _k_square,
                     _k_square, _k_square)
relu = make_kernel("relu", ("x",), ("out",), _infer_same, NULL, _k_relu, _k_relu, _k_relu,
                   _k_relu)
sqrt = make_kernel("sqrt", ("x",), ("out",), _infer_same, NULL, NULL, NULL, _k_sqrt, _k_sqrt)
exp = make_kernel("exp", ("x",), ("out",), _infer_same, NULL, NULL, NULL, _k_exp, _k_exp)
log = make_kernel("log", ("x",), ("out",), _infer_same, NULL, NULL, NULL, _k_log, _k_log)
tanh = make_kernel("tanh", ("x",), ("out",), _infer_same, NULL, NULL, NULL, _k_tanh, _k_tanh)
sigmoid = make_kernel("sigmoid", ("x",), ("out",), _infer_same, NULL, NULL, NULL,
                      _k_sigmoid, _k_sigmoid)

# Backward forms, from the forward output y and the output gradient dy (floats).
tanh_grad = make_kernel("tanh_grad", ("y", "dy"), ("dx",), _infer_binary, NULL, NULL, NULL,
                        _k_tanh_grad, _k_tanh_grad)
sigmoid_grad = make_kernel("sigmoid_grad", ("y", "dy"), ("dx",), _infer_binary, NULL, NULL,
                           NULL, _k_sigmoid_grad, _k_sigmoid_grad)
relu_grad = make_kernel("relu_grad", ("y", "dy"), ("dx",), _infer_binary, NULL, NULL, NULL,
                        _k_relu_grad, _k_relu_grad)
sqrt_grad = make_kernel("sqrt_grad", ("y", "dy"), ("dx",), _infer_binary, NULL, NULL, NULL,
                        _k_sqrt_grad, _k_sqrt_grad)

# Binary arithmetic (equal dtypes, broadcasting). divide is true division: floats only.
add = make_kernel("add", ("x", "y"), ("out",), _infer_binary, NULL, _k_add, _k_add, _k_add,
                  _k_add)
subtract = make_kernel("subtract", ("x", "y"), ("out",), _infer_binary, NULL, _k_subtract,
                       _k_subtract, _k_subtract, _k_subtract)
multiply = make_kernel("multiply", ("x", "y"), ("out",), _infer_binary, NULL, _k_multiply,
                       _k_multiply, _k_multiply, _k_multiply)
divide = make_kernel("divide", ("x", "y"), ("out",), _infer_binary, NULL, NULL, NULL,
                     _k_divide, _k_divide)
pow = make_kernel("pow", ("x", "y"), ("out",), _infer_binary, NULL, _k_pow, _k_pow, _k_pow,
                  _k_pow)
maximum = make_kernel("maximum", ("x", "y"), ("out",), _infer_binary, NULL, _k_maximum,
                      _k_maximum, _k_maximum, _k_maximum)
minimum = make_kernel("minimum", ("x", "y"), ("out",), _infer_binary, NULL, _k_minimum,
                      _k_minimum, _k_minimum, _k_minimum)

# Comparisons: every dtype (bool too), bool output.
equal = make_kernel("equal", ("x", "y"), ("out",), _infer_compare, _k_equal, _k_equal,
                    _k_equal, _k_equal, _k_equal)
not_equal = make_kernel("not_equal", ("x", "y"), ("out",), _infer_compare, _k_not_equal,
                        _k_not_equal, _k_not_equal, _k_not_equal, _k_not_equal)
less_than = make_kernel("less_than", ("x", "y"), ("out",), _infer_compare, _k_less_than,
                        _k_less_than, _k_less_than, _k_less_than, _k_less_than)
less_equal = make_kernel("less_equal", ("x", "y"), ("out",), _infer_compare, _k_less_equal,
                         _k_less_equal, _k_less_equal, _k_less_equal, _k_less_equal)
greater_than = make_kernel("greater_than", ("x", "y"), ("out",), _infer_compare,
                           _k_greater_than, _k_greater_than, _k_greater_than,
                           _k_greater_than, _k_greater_than)
greater_equal = make_kernel("greater_equal", ("x", "y"), ("out",), _infer_compare,
                            _k_greater_equal, _k_greater_equal, _k_greater_equal,
                            _k_greater_equal, _k_greater_equal)

# where(condition, x, y): dispatched on x's dtype (every dtype).
where = make_kernel("where", ("condition", "x", "y"), ("out",), _infer_where, _k_where,
                    _k_where, _k_where, _k_where, _k_where, 1)
# cast(x, dtype=...): any dtype to any dtype (to bool: x != 0; float to int truncates).
cast = make_kernel("cast", ("x",), ("out",), _infer_cast, _k_cast, _k_cast, _k_cast, _k_cast,
                   _k_cast, 0, ("dtype",), _pack_cast)
# ... and from float16, the storage dtype, which only cast computes in
(<CKernel>cast).fns[FASTOP_FLOAT16] = _k_cast
# full_like(x, fill_value=0.0): x's shape and dtype, every element fill_value.
full_like = make_kernel("full_like", ("x",), ("out",), _infer_same, _k_full_like,
                        _k_full_like, _k_full_like, _k_full_like, _k_full_like, 0,
                        ("fill_value",), _pack_fill)

# The narrow integers (uint8, int8, int16) run the integer kernels: their loops are typed
# for every integer (numeric_t), none computes through a wider dtype.
for _kernel in (neg, abs, sign, square, relu, add, subtract, multiply, pow, maximum,
                minimum, equal, not_equal, less_than, less_equal, greater_than,
                greater_equal, where, cast, full_like):
    accept_narrow_ints(<CKernel>_kernel, (<CKernel>_kernel).fns[FASTOP_INT32])

# what their errors mean (CKernel.reasons)
_SAME_DTYPE = {K_ERR_DTYPE: "x and y must have the same dtype (kernels do not promote: "
                            "cast one first)"}
for _k in (tanh_grad, sigmoid_grad, relu_grad, sqrt_grad, add, subtract, multiply, divide,
           maximum, minimum, equal, not_equal, less_than, less_equal, greater_than,
           greater_equal):
    (<CKernel>_k).reasons = _SAME_DTYPE
(<CKernel>pow).reasons = {**_SAME_DTYPE, K_ERR_VALUE: "integers cannot be raised to a "
                                                      "negative integer power"}
(<CKernel>where).reasons = {K_ERR_DTYPE: "condition must be bool, and x and y of one dtype"}
(<CKernel>full_like).reasons = {K_ERR_VALUE: "fill_value does not fit x's integer dtype"}

# Each kernel above computes out[i] from its inputs' element i alone, so an output may be
# one of its inputs (an update in place); any other overlap is staged (CKernel.must_stage).
for _kernel in (neg, abs, sign, square, relu, sqrt, exp, log, tanh, sigmoid, tanh_grad,
                sigmoid_grad, relu_grad, sqrt_grad, add, subtract, multiply, divide, pow,
                maximum, minimum, equal, not_equal, less_than, less_equal, greater_than,
                greater_equal, where, cast, full_like):
    (<CKernel>_kernel).inplace_safe = True
del _kernel
