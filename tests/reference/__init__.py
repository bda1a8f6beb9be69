"""Pure-numpy twins of fastop's built-in kernels, one module per kernel family (tests only).

Each function takes and returns numpy arrays with the kernel's semantics: the test
oracle for the Cython kernels, and a readable statement of what each kernel computes.
"""
