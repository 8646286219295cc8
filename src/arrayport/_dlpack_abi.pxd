# Cython declarations of arrayport/dlpack_abi.h (arrayport's own DLPack 1.3 ABI header).
# Installed with the package so Cython extensions can `cimport arrayport._dlpack_abi`.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "arrayport/dlpack_abi.h" nogil:
    enum:
        APDL_MAJOR_VERSION
        APDL_MINOR_VERSION
    const char* APDL_CAPSULE_LEGACY
    const char* APDL_CAPSULE_LEGACY_USED
    const char* APDL_CAPSULE_VERSIONED
    const char* APDL_CAPSULE_VERSIONED_USED
    const char* APDL_CAPSULE_EXCHANGE_API
    uint64_t APDL_FLAG_READ_ONLY
    uint64_t APDL_FLAG_IS_COPIED
    uint64_t APDL_FLAG_IS_SUBBYTE_TYPE_PADDED
    uint64_t APDL_FLAGS_KNOWN

    # Device types (DLDeviceType) and type codes (DLDataTypeCode): the header's values.
    ctypedef enum APDLDeviceType:
        APDL_CPU
        APDL_CUDA
        APDL_CUDA_HOST
        APDL_OPENCL
        APDL_VULKAN
        APDL_METAL
        APDL_VPI
        APDL_ROCM
        APDL_ROCM_HOST
        APDL_EXT_DEV
        APDL_CUDA_MANAGED
        APDL_ONEAPI
        APDL_WEBGPU
        APDL_HEXAGON
        APDL_MAIA
        APDL_TRN
        APDL_TPU
        APDL_TPU_HOST
        APDL_ASCEND

    ctypedef enum APDLDataTypeCode:
        APDL_INT
        APDL_UINT
        APDL_FLOAT
        APDL_OPAQUE_HANDLE
        APDL_BFLOAT
        APDL_COMPLEX
        APDL_BOOL
        APDL_FLOAT8_E3M4
        APDL_FLOAT8_E4M3
        APDL_FLOAT8_E4M3B11FNUZ
        APDL_FLOAT8_E4M3FN
        APDL_FLOAT8_E4M3FNUZ
        APDL_FLOAT8_E5M2
        APDL_FLOAT8_E5M2FNUZ
        APDL_FLOAT8_E8M0FNU
        APDL_FLOAT6_E2M3FN
        APDL_FLOAT6_E3M2FN
        APDL_FLOAT4_E2M1FN
        APDL_BCOMPLEX

    ctypedef struct APDLPackVersion:
        uint32_t major
        uint32_t minor

    ctypedef struct APDLDevice:
        int32_t device_type
        int32_t device_id

    ctypedef struct APDLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct APDLTensor:
        void* data
        APDLDevice device
        int32_t ndim
        APDLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct APDLManagedTensor:
        APDLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(APDLManagedTensor*)

    ctypedef struct APDLManagedTensorVersioned:
        APDLPackVersion version
        void* manager_ctx
        void (*deleter)(APDLManagedTensorVersioned*)
        uint64_t flags
        APDLTensor dl_tensor

    # ---- DLPack 1.3 C exchange API (a static table behind __dlpack_c_exchange_api__) ----
    ctypedef void (*APDLSetErrorFn)(void* error_ctx, const char* kind, const char* message)
    ctypedef int (*APDLManagedTensorAllocatorFn)(
        APDLTensor* prototype, APDLManagedTensorVersioned** out, void* error_ctx,
        APDLSetErrorFn set_error)
    ctypedef int (*APDLManagedTensorFromPyObjectNoSyncFn)(
        void* py_object, APDLManagedTensorVersioned** out)
    ctypedef int (*APDLManagedTensorToPyObjectNoSyncFn)(
        APDLManagedTensorVersioned* tensor, void** out_py_object)
    ctypedef int (*APDLTensorFromPyObjectNoSyncFn)(void* py_object, APDLTensor* out)
    ctypedef int (*APDLCurrentWorkStreamFn)(
        int32_t device_type, int32_t device_id, void** out_stream)

    ctypedef struct APDLPackExchangeAPIHeader:
        APDLPackVersion version
        APDLPackExchangeAPIHeader* prev_api

    ctypedef struct APDLPackExchangeAPI:
        APDLPackExchangeAPIHeader header
        APDLManagedTensorAllocatorFn managed_tensor_allocator
        APDLManagedTensorFromPyObjectNoSyncFn managed_tensor_from_py_object_no_sync
        APDLManagedTensorToPyObjectNoSyncFn managed_tensor_to_py_object_no_sync
        APDLTensorFromPyObjectNoSyncFn dltensor_from_py_object_no_sync
        APDLCurrentWorkStreamFn current_work_stream
