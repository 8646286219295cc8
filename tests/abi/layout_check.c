/* Compile-time pins of the DLPack 1.3 ABI layout declared in arrayport/dlpack_abi.h
 * (64-bit targets). Compiled by tests/test_abi_layout.py; a failure is a compile error. */
#include <stddef.h>
#include "arrayport/dlpack_abi.h"

#define PIN(expr) _Static_assert(expr, #expr)

PIN(sizeof(void *) == 8);
PIN(sizeof(APDLPackVersion) == 8);
PIN(sizeof(APDLDevice) == 8);
PIN(offsetof(APDLDevice, device_id) == 4);
PIN(sizeof(APDLDataType) == 4);
PIN(offsetof(APDLDataType, bits) == 1);
PIN(offsetof(APDLDataType, lanes) == 2);

PIN(offsetof(APDLTensor, data) == 0);
PIN(offsetof(APDLTensor, device) == 8);
PIN(offsetof(APDLTensor, ndim) == 16);
PIN(offsetof(APDLTensor, dtype) == 20);
PIN(offsetof(APDLTensor, shape) == 24);
PIN(offsetof(APDLTensor, strides) == 32);
PIN(offsetof(APDLTensor, byte_offset) == 40);
PIN(sizeof(APDLTensor) == 48);

PIN(offsetof(APDLManagedTensor, dl_tensor) == 0);
PIN(offsetof(APDLManagedTensor, manager_ctx) == 48);
PIN(offsetof(APDLManagedTensor, deleter) == 56);
PIN(sizeof(APDLManagedTensor) == 64);

PIN(offsetof(APDLManagedTensorVersioned, version) == 0);
PIN(offsetof(APDLManagedTensorVersioned, manager_ctx) == 8);
PIN(offsetof(APDLManagedTensorVersioned, deleter) == 16);
PIN(offsetof(APDLManagedTensorVersioned, flags) == 24);
PIN(offsetof(APDLManagedTensorVersioned, dl_tensor) == 32);
PIN(sizeof(APDLManagedTensorVersioned) == 80);

PIN(sizeof(APDLPackExchangeAPIHeader) == 16);
PIN(offsetof(APDLPackExchangeAPI, managed_tensor_allocator) == 16);
PIN(offsetof(APDLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24);
PIN(offsetof(APDLPackExchangeAPI, managed_tensor_to_py_object_no_sync) == 32);
PIN(offsetof(APDLPackExchangeAPI, dltensor_from_py_object_no_sync) == 40);
PIN(offsetof(APDLPackExchangeAPI, current_work_stream) == 48);
PIN(sizeof(APDLPackExchangeAPI) == 56);

/* Enum values are ABI too. */
PIN(APDL_CPU == 1 && APDL_CUDA == 2 && APDL_CUDA_HOST == 3 && APDL_OPENCL == 4);
PIN(APDL_VULKAN == 7 && APDL_METAL == 8 && APDL_VPI == 9 && APDL_ROCM == 10);
PIN(APDL_ROCM_HOST == 11 && APDL_EXT_DEV == 12 && APDL_CUDA_MANAGED == 13);
PIN(APDL_ONEAPI == 14 && APDL_WEBGPU == 15 && APDL_HEXAGON == 16 && APDL_MAIA == 17);
PIN(APDL_TRN == 18);
PIN(APDL_INT == 0 && APDL_UINT == 1 && APDL_FLOAT == 2 && APDL_OPAQUE_HANDLE == 3);
PIN(APDL_BFLOAT == 4 && APDL_COMPLEX == 5 && APDL_BOOL == 6);
PIN(APDL_FLOAT8_E3M4 == 7 && APDL_FLOAT8_E4M3 == 8 && APDL_FLOAT8_E4M3B11FNUZ == 9);
PIN(APDL_FLOAT8_E4M3FN == 10 && APDL_FLOAT8_E4M3FNUZ == 11 && APDL_FLOAT8_E5M2 == 12);
PIN(APDL_FLOAT8_E5M2FNUZ == 13 && APDL_FLOAT8_E8M0FNU == 14);
PIN(APDL_FLOAT6_E2M3FN == 15 && APDL_FLOAT6_E3M2FN == 16 && APDL_FLOAT4_E2M1FN == 17);
PIN(APDL_FLAG_READ_ONLY == 1 && APDL_FLAG_IS_COPIED == 2 && APDL_FLAG_IS_SUBBYTE_TYPE_PADDED == 4);
PIN(APDL_MAJOR_VERSION == 1 && APDL_MINOR_VERSION == 3);

int arrayport_layout_check(void) { return 0; }
