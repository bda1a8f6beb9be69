# The backward walk. fastop._tensor reaches it (Tensor.backward) through the function
# pointer this module installs when it loads (fastop._tensor.set_backward_walk).
cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused)
