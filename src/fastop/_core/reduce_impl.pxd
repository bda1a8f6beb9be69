# The contract of reduce_impl.c (see reduce_impl.h); a module that cimports it lists
# src/fastop/_core/reduce_impl.c in its `# distutils: sources`.
cdef extern from "reduce_impl.h" nogil:
    float fastop_sum_f32(const float* x, ptrdiff_t n)
    double fastop_sum_f64(const double* x, ptrdiff_t n)
    float fastop_dot_f32(const float* x, const float* y, ptrdiff_t n)
    double fastop_dot_f64(const double* x, const double* y, ptrdiff_t n)
    float fastop_max_f32(const float* x, ptrdiff_t n)
    double fastop_max_f64(const double* x, ptrdiff_t n)
    void fastop_addto_f32(float* acc, const float* x, ptrdiff_t n)
    void fastop_addto_f64(double* acc, const double* x, ptrdiff_t n)
    void fastop_maxto_f32(float* acc, const float* x, ptrdiff_t n)
    void fastop_maxto_f64(double* acc, const double* x, ptrdiff_t n)
    void fastop_axpb_f32(const float* x, float a, float b, float* y, ptrdiff_t n)
    void fastop_axpb_f64(const double* x, double a, double b, double* y, ptrdiff_t n)
