/* FASTOP_CLONES: compile a function for AVX-512, AVX2 and the baseline x86-64, the
 * variant picked once at load time for the CPU (gcc's target_clones, on x86-64 Linux;
 * elsewhere the plain function). The *_impl.c kernels mark their public loops with it. */
#ifndef FASTOP_TARGET_CLONES_H
#define FASTOP_TARGET_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FASTOP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FASTOP_CLONES
#endif

#endif
