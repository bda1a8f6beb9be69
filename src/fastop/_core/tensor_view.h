/* The C view of a strided n-d array: what every fastop kernel reads and writes.
 *
 * Strides are in bytes; `data` points at element [0, ..., 0] (the storage offset is
 * already applied).  A kernel never owns memory: DenseTensor (storage.pyx) or the
 * executor's arena does.
 */
#ifndef FASTOP_TENSOR_VIEW_H
#define FASTOP_TENSOR_VIEW_H
#include <stddef.h>
#include <stdint.h>

#define FASTOP_MAX_NDIM 8
/* room for a slice's (start, end, step) per dim plus flags */
#define FASTOP_MAX_ATTR_INTS (4 * FASTOP_MAX_NDIM + 4)

/* Codes below FASTOP_NUM_COMPUTE_DTYPES are the dtypes kernels compute in, ordered
 * bool, the integers (narrow to wide), the floats: a code below FASTOP_FLOAT32 is bool or
 * an integer, one from FASTOP_FLOAT32 on a float. float16 is a storage dtype: tensors hold
 * it and `cast` converts it; an op without a kernel for it computes in float32 (exact for
 * every float16 value). */
typedef enum {
    FASTOP_BOOL = 0,
    FASTOP_UINT8 = 1,
    FASTOP_INT8 = 2,
    FASTOP_INT16 = 3,
    FASTOP_INT32 = 4,
    FASTOP_INT64 = 5,
    FASTOP_FLOAT32 = 6,
    FASTOP_FLOAT64 = 7,
    FASTOP_NUM_COMPUTE_DTYPES = 8,
    FASTOP_FLOAT16 = 8,
    FASTOP_NUM_DTYPES = 9
} fastop_dtype;

typedef struct {
    char *data;
    int dtype;
    int ndim;
    ptrdiff_t size;
    ptrdiff_t shape[FASTOP_MAX_NDIM];
    ptrdiff_t strides[FASTOP_MAX_NDIM];
} fastop_view;

/* Attributes of one op call, packed once (at op creation in static mode, per call
 * in eager mode) so kernels read them without Python. */
typedef struct {
    int n_ints;
    ptrdiff_t ints[FASTOP_MAX_ATTR_INTS];
    double f[4];
} fastop_attrs;

#endif
