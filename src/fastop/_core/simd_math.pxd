# The contract of simd_math_impl.c (see simd_math.h): vectorized transcendentals and
# binary loops. A module that cimports it lists src/fastop/_core/simd_math_impl.c in its
# `# distutils: sources`.
cdef extern from "simd_math.h" nogil:
    const ptrdiff_t FASTOP_STREAM_MIN_BYTES
    void fastop_vexp_f32(const float* x, float* y, ptrdiff_t n)
    void fastop_vexp_f64(const double* x, double* y, ptrdiff_t n)
    float fastop_vexp_shift_sum_f32(const float* x, float shift, float* y, ptrdiff_t n,
                                    const float* next_x, const float* next_y)
    double fastop_vexp_shift_sum_f64(const double* x, double shift, double* y, ptrdiff_t n,
                                     const double* next_x, const double* next_y)
    void fastop_vscale_f32(const float* x, float a, float* y, ptrdiff_t n, ptrdiff_t hot,
                           int stream)
    void fastop_vscale_f64(const double* x, double a, double* y, ptrdiff_t n, ptrdiff_t hot,
                           int stream)
    void fastop_vlog_f32(const float* x, float* y, ptrdiff_t n)
    void fastop_vlog_f64(const double* x, double* y, ptrdiff_t n)
    void fastop_vtanh_f32(const float* x, float* y, ptrdiff_t n)
    void fastop_vtanh_f64(const double* x, double* y, ptrdiff_t n)
    void fastop_vsigmoid_f32(const float* x, float* y, ptrdiff_t n)
    void fastop_vsigmoid_f64(const double* x, double* y, ptrdiff_t n)
    void fastop_vrelu_f32(const float* x, float* y, ptrdiff_t n)
    void fastop_vrelu_f64(const double* x, double* y, ptrdiff_t n)
    enum:
        FASTOP_BIN_ADD
        FASTOP_BIN_SUB
        FASTOP_BIN_MUL
        FASTOP_BIN_DIV
        FASTOP_BIN_MAX
        FASTOP_BIN_MIN
        FASTOP_BIN_TANH_GRAD
        FASTOP_BIN_SIGMOID_GRAD
        FASTOP_BIN_RELU_GRAD
        FASTOP_BIN_SQRT_GRAD
    void fastop_vbinary_f32(int op, const float* a, const float* b, float* y, ptrdiff_t n)
    void fastop_vbinary_f64(int op, const double* a, const double* b, double* y, ptrdiff_t n)
