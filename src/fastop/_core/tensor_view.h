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

/* Codes below FASTOP_NUM_COMPUTE_DTYPES are the dtypes kernels compute in. float16 and
 * uint8 are storage dtypes: tensors hold them and `cast` converts them; an op without a
 * kernel for them computes in float32 (exact for every float16 and uint8 value). */
typedef enum {
    FASTOP_BOOL = 0,
    FASTOP_INT32 = 1,
    FASTOP_INT64 = 2,
    FASTOP_FLOAT32 = 3,
    FASTOP_FLOAT64 = 4,
    FASTOP_NUM_COMPUTE_DTYPES = 5,
    FASTOP_FLOAT16 = 5,
    FASTOP_UINT8 = 6,
    FASTOP_NUM_DTYPES = 7
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
