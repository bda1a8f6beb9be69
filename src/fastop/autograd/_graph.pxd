# The autograd graph's recording (registry ops' nodes, saved-tensor hooks), cimported by
# the eager layer (fastop.autograd._eager records op calls; _py_layer and the walk in
# _backward share the gradient checks).
from fastop.ops._dispatch cimport CallPlan


cdef tuple record_op(CallPlan plan, tuple inputs, tuple outputs, dict attrs)

# shared with PyLayer nodes and the walk
cdef object zeros_like_meta(tuple meta)
cdef tuple meta_of(object t)
cdef bint grad_fits(object g, object x)
cdef object check_grad(object g, object x, str who, object what)

# saved_tensors_hooks (per thread): the innermost (pack, unpack) or None; packing and
# unpacking the values a node saves
cdef tuple saved_hooks()
cdef tuple pack_saved(tuple values, object pack_hook)
cdef tuple unpack_saved(tuple packed, object unpack_hook)
