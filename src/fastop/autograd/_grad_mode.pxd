# Grad mode (per thread): cimported by the eager layer's modules.
cdef bint grad_enabled() noexcept
cdef bint swap_grad_enabled(bint mode) noexcept
