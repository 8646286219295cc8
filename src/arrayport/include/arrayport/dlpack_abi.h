/*
 * arrayport/dlpack_abi.h — arrayport's own declaration of the DLPack 1.3 ABI.
 *
 * Written for arrayport from the published DLPack ABI facts (struct layouts, enum values,
 * flag bits, capsule names). Every name carries the APDL / APDL_ prefix so this header can
 * be included in the same translation unit as any other DLPack header without clashing;
 * the layouts are identical, so pointers convert with a plain cast.
 *
 * Layout is frozen: tests/abi/layout_check.c pins every size and offset on 64-bit builds.
 */
#ifndef ARRAYPORT_DLPACK_ABI_H
#define ARRAYPORT_DLPACK_ABI_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The DLPack version this header describes. A consumer must refuse a different major
 * version (calling the deleter and touching nothing else); a newer minor is acceptable
 * when every field and enum value in the tensor is one it understands. */
#define APDL_MAJOR_VERSION 1
#define APDL_MINOR_VERSION 3

/* PyCapsule names. A consumer renames the capsule to the "used_" form once it has taken
 * ownership; a capsule destructor calls the deleter only while the name is the unused one. */
#define APDL_CAPSULE_LEGACY "dltensor"
#define APDL_CAPSULE_LEGACY_USED "used_dltensor"
#define APDL_CAPSULE_VERSIONED "dltensor_versioned"
#define APDL_CAPSULE_VERSIONED_USED "used_dltensor_versioned"
#define APDL_CAPSULE_EXCHANGE_API "dlpack_exchange_api"

/* Bits of APDLManagedTensorVersioned.flags. */
#define APDL_FLAG_READ_ONLY (UINT64_C(1) << 0)          /* consumer must not write */
#define APDL_FLAG_IS_COPIED (UINT64_C(1) << 1)          /* producer made a fresh copy */
#define APDL_FLAG_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2) /* sub-byte elements use a byte each */
#define APDL_FLAGS_KNOWN \
    (APDL_FLAG_READ_ONLY | APDL_FLAG_IS_COPIED | APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)

typedef struct {
    uint32_t major;
    uint32_t minor;
} APDLPackVersion;

/* Device types (DLDeviceType). Values are ABI: never renumber. 5 and 6 are unassigned. */
typedef enum {
    APDL_CPU = 1,
    APDL_CUDA = 2,
    APDL_CUDA_HOST = 3,      /* page-locked host memory allocated through CUDA */
    APDL_OPENCL = 4,
    APDL_VULKAN = 7,
    APDL_METAL = 8,
    APDL_VPI = 9,
    APDL_ROCM = 10,
    APDL_ROCM_HOST = 11,     /* page-locked host memory allocated through ROCm */
    APDL_EXT_DEV = 12,
    APDL_CUDA_MANAGED = 13,  /* CUDA unified (managed) memory */
    APDL_ONEAPI = 14,
    APDL_WEBGPU = 15,
    APDL_HEXAGON = 16,
    APDL_MAIA = 17,
    APDL_TRN = 18,
    /* Added upstream after the 1.3 tag, the minor version still 3: a 1.3 capsule may carry
     * them, so every code is checked by value, never by the version. */
    APDL_TPU = 19,
    APDL_TPU_HOST = 20,      /* host memory a TPU runtime allocated, host-readable */
    APDL_ASCEND = 21
} APDLDeviceType;

typedef struct {
    int32_t device_type;  /* an APDLDeviceType value */
    int32_t device_id;    /* 0 for CPU, pinned and managed memory */
} APDLDevice;

/* Type codes (DLDataTypeCode). bits is the width of one lane: complex64 has bits = 64. */
typedef enum {
    APDL_INT = 0,
    APDL_UINT = 1,
    APDL_FLOAT = 2,
    APDL_OPAQUE_HANDLE = 3,
    APDL_BFLOAT = 4,
    APDL_COMPLEX = 5,
    APDL_BOOL = 6,            /* bits = 8 */
    APDL_FLOAT8_E3M4 = 7,
    APDL_FLOAT8_E4M3 = 8,
    APDL_FLOAT8_E4M3B11FNUZ = 9,
    APDL_FLOAT8_E4M3FN = 10,
    APDL_FLOAT8_E4M3FNUZ = 11,
    APDL_FLOAT8_E5M2 = 12,
    APDL_FLOAT8_E5M2FNUZ = 13,
    APDL_FLOAT8_E8M0FNU = 14,
    APDL_FLOAT6_E2M3FN = 15,  /* bits must be 6 */
    APDL_FLOAT6_E3M2FN = 16,  /* bits must be 6 */
    APDL_FLOAT4_E2M1FN = 17,  /* bits must be 4 */
    APDL_BCOMPLEX = 18        /* complex of two bfloat16: bits must be 32; added upstream
                               * after the 1.3 tag, the minor version still 3 */
} APDLDataTypeCode;

typedef struct {
    uint8_t code;    /* an APDLDataTypeCode value */
    uint8_t bits;    /* bits per lane */
    uint16_t lanes;  /* 1 for scalars, > 1 for vector types */
} APDLDataType;

/* A strided view of memory. The element at index i lives at
 *   (char*)data + byte_offset + sum(i[k] * strides[k]) * element size.
 * strides count elements, not bytes. Since 1.2 strides must be non-NULL when ndim != 0
 * (NULL from older producers means C-contiguous); since 1.3 shape may be NULL when
 * ndim == 0. data may be NULL for a tensor with no elements. */
typedef struct {
    void *data;
    APDLDevice device;
    int32_t ndim;
    APDLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} APDLTensor;

/* DLPack 0.x managed tensor, carried by a capsule named "dltensor". No version, no flags. */
typedef struct APDLManagedTensor {
    APDLTensor dl_tensor;
    void *manager_ctx;                                 /* producer-owned context */
    void (*deleter)(struct APDLManagedTensor *self);   /* may be NULL; call exactly once */
} APDLManagedTensor;

/* DLPack 1.x managed tensor, carried by a capsule named "dltensor_versioned".
 * Everything up to and including flags is frozen across all 1.x versions. */
typedef struct APDLManagedTensorVersioned {
    APDLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct APDLManagedTensorVersioned *self);
    uint64_t flags;
    APDLTensor dl_tensor;
} APDLManagedTensorVersioned;

/* ---- DLPack 1.3 C exchange API ----------------------------------------------------------
 * A producer type exposes the attribute __dlpack_c_exchange_api__: a capsule named
 * "dlpack_exchange_api" pointing at a static, process-lifetime table. Every function
 * returns 0 on success and -1 with a Python error set (or reported through SetError). */

typedef void (*APDLSetErrorFn)(void *error_ctx, const char *kind, const char *message);

typedef int (*APDLManagedTensorAllocatorFn)(
    APDLTensor *prototype, APDLManagedTensorVersioned **out, void *error_ctx,
    APDLSetErrorFn set_error);
typedef int (*APDLManagedTensorFromPyObjectNoSyncFn)(
    void *py_object, APDLManagedTensorVersioned **out);
typedef int (*APDLManagedTensorToPyObjectNoSyncFn)(
    APDLManagedTensorVersioned *tensor, void **out_py_object);
typedef int (*APDLTensorFromPyObjectNoSyncFn)(void *py_object, APDLTensor *out);
typedef int (*APDLCurrentWorkStreamFn)(
    int32_t device_type, int32_t device_id, void **out_stream);

typedef struct APDLPackExchangeAPIHeader {
    APDLPackVersion version;
    struct APDLPackExchangeAPIHeader *prev_api;  /* an older table, or NULL */
} APDLPackExchangeAPIHeader;

typedef struct {
    APDLPackExchangeAPIHeader header;
    APDLManagedTensorAllocatorFn managed_tensor_allocator;
    APDLManagedTensorFromPyObjectNoSyncFn managed_tensor_from_py_object_no_sync;
    APDLManagedTensorToPyObjectNoSyncFn managed_tensor_to_py_object_no_sync;
    APDLTensorFromPyObjectNoSyncFn dltensor_from_py_object_no_sync;  /* may be NULL */
    APDLCurrentWorkStreamFn current_work_stream;
} APDLPackExchangeAPI;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* ARRAYPORT_DLPACK_ABI_H */
