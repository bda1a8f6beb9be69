# distutils: sources = src/fastop/_core/random_impl.c
"""Random kernels: dropout (mask drawn in the kernel) and its backward.

``dropout(x, p=0.5, mode="upscale_in_train", seed=0) -> (out, mask)``: each element is
dropped with probability ``p`` (``mask`` is False there and ``out`` 0); kept elements
are scaled by ``1 / (1 - p)`` in ``"upscale_in_train"`` mode and left as they are in
``"downscale_in_infer"`` mode (PaddlePaddle's two conventions). ``dropout_grad(mask,
dout, p, mode) -> dx = mask * dout * scale`` with the same scale.

The bits come from fastop's counter-based generator (``random_impl.c``): every call
with ``seed=0`` takes fresh words of the global stream, so a static program draws a new
mask on every ``Executor.run``; ``seed(n)`` (called by ``fastop.seed``) restarts the
stream, and a nonzero ``seed`` attribute gives the op a private stream of its own (the
same mask on every call, as PaddlePaddle's ``fix_seed``). Element ``q`` of a call (C
order) reads half of word ``q // 2``, so the mask depends neither on the layout of ``x``
nor on the number of threads.

Attributes: ``ints = [threshold, seed]`` (threshold = p * 2^32: an element is kept when
its 32 bits are >= it), ``f = [scale]``.
"""
import os

from libc.stdint cimport uint8_t, uint64_t
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_BOOL, FASTOP_FLOAT32,
                                   FASTOP_FLOAT64,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, K_OK, K_ERR_DTYPE, K_ERR_SHAPE)
from fastop._core.blockwise cimport run_blocks
from fastop._core.kernel import int_attr

__all__ = ["dropout", "dropout_grad", "seed", "MODES"]

cdef extern from "random_impl.h" nogil:
    void fastop_rng_seed(uint64_t seed)
    uint64_t fastop_rng_take(uint64_t nwords, uint64_t* key)
    uint64_t fastop_rng_key(uint64_t seed)
    void fastop_dropout_f32(const float* x, float* y, uint8_t* mask, ptrdiff_t n,
                            uint64_t key, uint64_t word0, ptrdiff_t start,
                            uint64_t threshold, float scale)
    void fastop_dropout_f64(const double* x, double* y, uint8_t* mask, ptrdiff_t n,
                            uint64_t key, uint64_t word0, ptrdiff_t start,
                            uint64_t threshold, double scale)
    void fastop_masked_scale_f32(const uint8_t* mask, const float* dy, float* dx,
                                 ptrdiff_t n, float scale)
    void fastop_masked_scale_f64(const uint8_t* mask, const double* dy, double* dx,
                                 ptrdiff_t n, double scale)

MODES = ("upscale_in_train", "downscale_in_infer")

cdef enum:
    # a mask element costs about an eighth of a transcendental one: threads pay later
    THREADS_AT = 1 << 18


def seed(value) -> None:
    """Restart the global stream from `value` (a non-negative int below 2**64)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2 ** 64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {value!r}")
    fastop_rng_seed(<uint64_t>value)


seed(int.from_bytes(os.urandom(8), "little"))     # unseeded runs differ


ctypedef struct DropoutCtx:
    int dtype
    uint64_t key
    uint64_t word0
    uint64_t threshold
    double scale


cdef int _dropout_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    """p: out, mask, x."""
    cdef DropoutCtx* c = <DropoutCtx*>ctx
    if c.dtype == FASTOP_FLOAT32:
        fastop_dropout_f32(<const float*>p[2], <float*>p[0], <uint8_t*>p[1], n, c.key,
                           c.word0, start, c.threshold, <float>c.scale)
    else:
        fastop_dropout_f64(<const double*>p[2], <double*>p[0], <uint8_t*>p[1], n, c.key,
                           c.word0, start, c.threshold, c.scale)
    return K_OK


cdef int _masked_scale_block(void* ctx, char** p, ptrdiff_t n,
                             ptrdiff_t start) noexcept nogil:
    """p: dx, mask, dout."""
    cdef DropoutCtx* c = <DropoutCtx*>ctx
    if c.dtype == FASTOP_FLOAT32:
        fastop_masked_scale_f32(<const uint8_t*>p[1], <const float*>p[2], <float*>p[0], n,
                                <float>c.scale)
    else:
        fastop_masked_scale_f64(<const uint8_t*>p[1], <const double*>p[2], <double*>p[0],
                                n, c.scale)
    return K_OK


cdef int _infer_dropout(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    """x -> (out like x, mask: x's shape, bool)."""
    view_copy_meta(ins[0], &outs[0])
    view_copy_meta(ins[0], &outs[1])
    outs[1].dtype = FASTOP_BOOL
    return K_OK


cdef int _infer_dropout_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                             const fastop_attrs* a) noexcept nogil:
    """(mask bool, dout) -> dx like dout; mask and dout of one shape."""
    cdef int d
    if ins[0].dtype != FASTOP_BOOL:
        return K_ERR_DTYPE
    if ins[0].ndim != ins[1].ndim:
        return K_ERR_SHAPE
    for d in range(ins[0].ndim):
        if ins[0].shape[d] != ins[1].shape[d] and ins[0].shape[d] != -1 \
                and ins[1].shape[d] != -1:
            return K_ERR_SHAPE
    view_copy_meta(ins[1], &outs[0])
    return K_OK


cdef int _dropout_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    cdef DropoutCtx c
    cdef fastop_view* operands[3]
    cdef uint64_t nwords = <uint64_t>(outs[0].size + 1) // 2
    c.dtype = ins[0].dtype
    c.threshold = <uint64_t>a.ints[0]
    c.scale = a.f[0]
    if a.ints[1] != 0:
        c.key = fastop_rng_key(<uint64_t>a.ints[1])
        c.word0 = 0
    else:
        c.word0 = fastop_rng_take(nwords, &c.key)
    operands[0], operands[1], operands[2] = outs[0], outs[1], ins[0]
    return run_blocks(_dropout_block, &c, operands, 2, 3, THREADS_AT)


cdef int _dropout_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                              const fastop_attrs* a) noexcept nogil:
    cdef DropoutCtx c
    cdef fastop_view* operands[3]
    c.dtype = ins[1].dtype
    c.scale = a.f[0]
    operands[0], operands[1], operands[2] = outs[0], ins[0], ins[1]
    return run_blocks(_masked_scale_block, &c, operands, 1, 3, THREADS_AT)


def _scale(attrs):
    """(p, the scale of kept elements) from the attributes, checked."""
    p = attrs.get("p", 0.5)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"attribute 'p' must be a number in [0, 1], got {p!r}")
    mode = attrs.get("mode", "upscale_in_train")
    if mode not in MODES:
        raise ValueError(f"attribute 'mode' must be one of {list(MODES)}, got {mode!r}")
    if mode == "downscale_in_infer" or p == 0.0:
        return float(p), 1.0
    return float(p), 0.0 if p == 1.0 else 1.0 / (1.0 - p)


def _pack_dropout(attrs):
    p, scale = _scale(attrs)
    seed_value = int_attr(attrs, "seed", 0)
    if not 0 <= seed_value < 2 ** 63:
        raise ValueError(f"attribute 'seed' must be in [0, 2**63), got {seed_value}")
    return [min(round(p * 2.0 ** 32), 2 ** 32), seed_value], [scale]


def _pack_dropout_grad(attrs):
    return [], [_scale(attrs)[1]]


dropout = make_kernel("dropout", ("x",), ("out", "mask"), _infer_dropout, NULL,
                      NULL, NULL, _dropout_kernel, _dropout_kernel, 0, ("p", "mode", "seed"),
                      _pack_dropout)
dropout_grad = make_kernel("dropout_grad", ("mask", "dout"), ("dx",),
                           _infer_dropout_grad, NULL, NULL, NULL, _dropout_grad_kernel,
                           _dropout_grad_kernel, 1, ("p", "mode"), _pack_dropout_grad,
                           4096, True)
(<CKernel>dropout_grad).reasons = {K_ERR_DTYPE: "mask must be bool",
                                   K_ERR_SHAPE: "mask and dout must have one shape"}
