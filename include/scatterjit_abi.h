/*
 * scatterjit_abi.h: the types of a scatterjit kernel call from C, shared by the
 * ahead-of-time headers that `scatterjit aot` writes and by the C ABI of the shared
 * library (scatterjit.h).
 *
 * Operands are DLPack tensors: sj_tensor has the fields and layout of DLPack's DLTensor,
 * so a framework passes its `DLTensor *` as an `sj_tensor *` without copying anything.
 * Element (i_0, ..., i_{n-1}) of a tensor lives at
 *
 *     (char *)data + byte_offset + (i_0 * strides[0] + ... ) * element_size
 *
 * Strides count elements (not bytes) and may be zero or negative; NULL strides mean
 * row-major. Only CPU memory (device_type 1, kDLCPU) is accepted; dtypes are DLPack's
 * (code, bits, lanes) with one lane.
 */
#ifndef SCATTERJIT_ABI_H
#define SCATTERJIT_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest rank of any one tensor. */
#define SJ_MAX_RANK 8

/* DLPack's DLDataType: type code (0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool),
 * bits per element, lanes (always 1). */
typedef struct sj_dtype {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} sj_dtype;

#define SJ_DTYPE(code, bits) ((sj_dtype){(code), (bits), 1})
#define SJ_DTYPE_I8 SJ_DTYPE(0, 8)
#define SJ_DTYPE_I16 SJ_DTYPE(0, 16)
#define SJ_DTYPE_I32 SJ_DTYPE(0, 32)
#define SJ_DTYPE_I64 SJ_DTYPE(0, 64)
#define SJ_DTYPE_U8 SJ_DTYPE(1, 8)
#define SJ_DTYPE_U16 SJ_DTYPE(1, 16)
#define SJ_DTYPE_U32 SJ_DTYPE(1, 32)
#define SJ_DTYPE_U64 SJ_DTYPE(1, 64)
#define SJ_DTYPE_F16 SJ_DTYPE(2, 16)
#define SJ_DTYPE_F32 SJ_DTYPE(2, 32)
#define SJ_DTYPE_F64 SJ_DTYPE(2, 64)
#define SJ_DTYPE_BF16 SJ_DTYPE(4, 16)
#define SJ_DTYPE_C64 SJ_DTYPE(5, 64)
#define SJ_DTYPE_C128 SJ_DTYPE(5, 128)
#define SJ_DTYPE_BOOL SJ_DTYPE(6, 8)

/* DLPack's DLDevice. */
typedef struct sj_device {
    int32_t device_type; /* 1: CPU (kDLCPU), the only one accepted */
    int32_t device_id;
} sj_device;

#define SJ_DEVICE_CPU ((sj_device){1, 0})

/* One operand, laid out as DLPack's DLTensor. */
typedef struct sj_tensor {
    void *data;             /* base address (may be NULL if the tensor has no elements) */
    sj_device device;       /* must be the CPU */
    int32_t ndim;           /* number of dims; must equal the kernel's rank for it */
    sj_dtype dtype;         /* must equal the kernel's dtype for it */
    const int64_t *shape;   /* ndim dims, none negative (may be NULL if ndim is 0) */
    const int64_t *strides; /* ndim element strides, or NULL for row-major */
    uint64_t byte_offset;   /* bytes from data to element 0 */
} sj_tensor;

/* The operands of one call. Inputs are only read; out is written. out must not share
 * memory with any input, except that a scatter's out may be its data (same address and
 * strides): the update then happens in place. The elements of out must not overlap each
 * other. */
typedef struct sj_args {
    const sj_tensor *data;    /* read (gathers), or copied into out and updated (scatter) */
    const sj_tensor *indices; /* integer positions along the axis; negative count from the back */
    const sj_tensor *updates; /* scatter: values combined into out; gathers: ignored */
    const sj_tensor *out;     /* the result, of the shape the op infers */
    /* On SJ_ERR_INDEX_OUT_OF_BOUNDS: the position in indices of the first bad index in
     * row-major order (its first indices->ndim entries). Otherwise left as it was. */
    int64_t bad_index[SJ_MAX_RANK];
    /* Scratch memory for an ahead-of-time kernel that needs some (mean: per-element sums
     * and counts; its header says how many bytes), used only during the call; any
     * alignment works, 16 bytes is fastest. Other kernels, and sj_kernel_run (which
     * allocates its own), ignore both fields: zero them. */
    void *workspace;
    uint64_t workspace_bytes;
} sj_args;

/* Status codes. On any error other than the index check's, nothing is read or written;
 * on SJ_ERR_INDEX_OUT_OF_BOUNDS, out is unchanged (all indices are checked first). */
#define SJ_OK 0
#define SJ_ERR_NULL_POINTER 1        /* a NULL args, tensor, shape, data of a non-empty tensor, or needed workspace */
#define SJ_ERR_DEVICE 2              /* a tensor not on the CPU */
#define SJ_ERR_DTYPE 3               /* a dtype other than the kernel's */
#define SJ_ERR_RANK 4                /* an ndim other than the kernel's */
#define SJ_ERR_SHAPE 5               /* dims that break the op's shape rules, or negative */
#define SJ_ERR_INDEX_OUT_OF_BOUNDS 6 /* an index outside [-s, s); see sj_args.bad_index */
#define SJ_ERR_OVERLAP 7             /* out shares memory with an input, or the workspace with a tensor */
#define SJ_ERR_KEY 8                 /* (C ABI) a kernel key that does not parse or is unsupported */
#define SJ_ERR_INTERNAL 9            /* (C ABI) a bug in scatterjit */
#define SJ_ERR_RESOURCE 10           /* a buffer over its size limit, out of memory, too many threads, or too small a workspace */

/* A short name for a status code. */
static inline const char *sj_status_name(int32_t status) {
    switch (status) {
    case SJ_OK: return "ok";
    case SJ_ERR_NULL_POINTER: return "null pointer";
    case SJ_ERR_DEVICE: return "not on the cpu";
    case SJ_ERR_DTYPE: return "wrong dtype";
    case SJ_ERR_RANK: return "wrong rank";
    case SJ_ERR_SHAPE: return "wrong shape";
    case SJ_ERR_INDEX_OUT_OF_BOUNDS: return "index out of bounds";
    case SJ_ERR_OVERLAP: return "output overlaps an input";
    case SJ_ERR_KEY: return "bad kernel key";
    case SJ_ERR_INTERNAL: return "internal error";
    case SJ_ERR_RESOURCE: return "over a size limit or out of memory";
    default: return "unknown status";
    }
}

/* The layout the compiled code reads (checked against the Rust definitions by a test). */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(offsetof(sj_tensor, data) == 0, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, device) == 8, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, ndim) == 16, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, dtype) == 20, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, shape) == 24, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, strides) == 32, "sj_tensor layout");
_Static_assert(offsetof(sj_tensor, byte_offset) == 40, "sj_tensor layout");
_Static_assert(sizeof(sj_tensor) == 48, "sj_tensor layout");
_Static_assert(offsetof(sj_args, data) == 0, "sj_args layout");
_Static_assert(offsetof(sj_args, indices) == 8, "sj_args layout");
_Static_assert(offsetof(sj_args, updates) == 16, "sj_args layout");
_Static_assert(offsetof(sj_args, out) == 24, "sj_args layout");
_Static_assert(offsetof(sj_args, bad_index) == 32, "sj_args layout");
_Static_assert(offsetof(sj_args, workspace) == 96, "sj_args layout");
_Static_assert(offsetof(sj_args, workspace_bytes) == 104, "sj_args layout");
_Static_assert(sizeof(sj_args) == 112, "sj_args layout");
#endif

#ifdef __cplusplus
}
#endif

#endif /* SCATTERJIT_ABI_H */
