/*
 * host_allocator.h — the `managed_tensor_allocator` of arrayport's DLPack C exchange API.
 *
 * A consumer (a kernel library, tvm-ffi…) asks for a new tensor "like this prototype"
 * (dtype, ndim, shape, device) without going through Python. arrayport allocates host
 * memory only (device memory arrives with the device layer), in pure C: no GIL, no Python
 * objects, so it can be called from any thread.
 *
 * Ownership: one malloc block holds the managed struct, then shape[ndim] and
 * strides[ndim]; manager_ctx is the data block (64-byte aligned). The deleter frees both.
 * Whoever receives the tensor owns it: they call the deleter exactly once (wrapping it as
 * a View with managed_tensor_to_py_object_no_sync hands that duty to the View).
 */
#ifndef ARRAYPORT_HOST_ALLOCATOR_H
#define ARRAYPORT_HOST_ALLOCATOR_H

#include "core_support.h"

/* Tensors made by the allocator whose deleter has not run yet. */
static long ap_live_allocated = 0;

static void ap_allocated_deleter(APDLManagedTensorVersioned *self) {
    if (self == NULL) return;
    free(self->manager_ctx);
    free(self);
    ap_counter_add(&ap_live_allocated, -1);
}

static int ap_allocator_fail(void *error_ctx, APDLSetErrorFn set_error, const char *kind,
                             const char *message) {
    if (set_error != NULL) set_error(error_ctx, kind, message);
    return -1;
}

static int ap_exchange_allocate(APDLTensor *prototype, APDLManagedTensorVersioned **out,
                                void *error_ctx, APDLSetErrorFn set_error) {
    if (out == NULL || prototype == NULL)
        return ap_allocator_fail(error_ctx, set_error, "ValueError",
                                 "arrayport allocator: prototype and out must not be NULL");
    *out = NULL;
    int32_t ndim = prototype->ndim;
    if (prototype->device.device_type != 1 /* CPU */)
        return ap_allocator_fail(error_ctx, set_error, "BufferError",
                                 "arrayport allocator: only host (CPU) tensors can be allocated; "
                                 "device memory needs arrayport's device layer");
    if (ndim < 0 || ndim > AP_COPY_MAX_NDIM || (ndim > 0 && prototype->shape == NULL))
        return ap_allocator_fail(error_ctx, set_error, "ValueError",
                                 "arrayport allocator: ndim must be 0..64 with a shape array");
    if (!ap_dtype_is_valid(prototype->dtype.code, prototype->dtype.bits,
                           prototype->dtype.lanes))
        return ap_allocator_fail(error_ctx, set_error, "ValueError",
                                 "arrayport allocator: the prototype's dtype is not a DLPack type");
    /* Elements, then bytes (packed sub-byte types round up), refusing overflow: extent.h. */
    int64_t size, nbytes_signed;
    int64_t item_bits = (int64_t)prototype->dtype.bits * prototype->dtype.lanes;
    int problem = ap_element_count(ndim, prototype->shape, item_bits, &size);
    if (problem == AP_EXTENT_NEGATIVE_SHAPE)
        return ap_allocator_fail(error_ctx, set_error, "ValueError",
                                 "arrayport allocator: a shape entry is negative");
    if (problem == AP_EXTENT_SIZE_OVERFLOW)
        return ap_allocator_fail(error_ctx, set_error, "MemoryError",
                                 "arrayport allocator: the tensor has too many elements");
    if (problem != AP_EXTENT_OK || ap_nbytes_of(size, item_bits, &nbytes_signed) != AP_EXTENT_OK)
        return ap_allocator_fail(error_ctx, set_error, "MemoryError",
                                 "arrayport allocator: the tensor is too large");
    size_t nbytes = (size_t)nbytes_signed;

    APDLManagedTensorVersioned *m = (APDLManagedTensorVersioned *)malloc(
        sizeof(APDLManagedTensorVersioned) + 2 * (size_t)ndim * sizeof(int64_t));
    void *data = m == NULL ? NULL : ap_host_alloc(nbytes);
    if (data == NULL) {
        free(m);
        return ap_allocator_fail(error_ctx, set_error, "MemoryError",
                                 "arrayport allocator: out of host memory");
    }
    memset(m, 0, sizeof(*m));
    m->version.major = APDL_MAJOR_VERSION;
    m->version.minor = APDL_MINOR_VERSION;
    m->manager_ctx = data;
    m->deleter = ap_allocated_deleter;
    m->dl_tensor.data = data;
    m->dl_tensor.device = prototype->device;
    m->dl_tensor.ndim = ndim;
    m->dl_tensor.dtype = prototype->dtype;
    m->dl_tensor.shape = (int64_t *)(m + 1);
    m->dl_tensor.strides = m->dl_tensor.shape + ndim;
    int64_t step = 1;
    for (int32_t i = ndim - 1; i >= 0; --i) {
        m->dl_tensor.shape[i] = prototype->shape[i];
        m->dl_tensor.strides[i] = step;
        step *= prototype->shape[i] > 1 ? prototype->shape[i] : 1;
    }
    ap_counter_add(&ap_live_allocated, 1);
    *out = m;
    return 0;
}

#endif  /* ARRAYPORT_HOST_ALLOCATOR_H */
