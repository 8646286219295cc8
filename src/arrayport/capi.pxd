# Cython declarations of arrayport/capi.h, arrayport's own C API (see that header for the
# contract). Use it from a Cython extension built with arrayport.get_include() on the
# include path:
#
#     from arrayport.capi cimport ArrayportCAPI, arrayport_import_capi
#     cdef const ArrayportCAPI* ap = arrayport_import_capi()
#     v = ap.view(obj, NULL)          # a View, exceptions propagate
#
# Objects cross as `object` (borrowed arguments, new-reference results), so Cython manages
# the reference counts; int-returning functions raise on -1.
from libc.stdint cimport int64_t, uint32_t, uint64_t
from cpython.object cimport PyTypeObject

from arrayport._dlpack_abi cimport APDLManagedTensorVersioned, APDLTensor

cdef extern from "arrayport/capi.h":
    enum:
        ARRAYPORT_CAPI_MAJOR
        ARRAYPORT_CAPI_MINOR
    const char* ARRAYPORT_CAPI_CAPSULE

    ctypedef struct ArrayportCAPIVersion:
        uint32_t major
        uint32_t minor

    ctypedef struct ArrayportCAPI:
        ArrayportCAPIVersion version
        const ArrayportCAPI* prev
        PyTypeObject* view_type
        int (*to_managed)(object obj, const int64_t* stream,
                          APDLManagedTensorVersioned** out) except -1
        object (*view_from_managed)(APDLManagedTensorVersioned* tensor)
        int (*view_dltensor)(object view, APDLTensor* out, uint64_t* flags) except -1
        object (*view)(object obj, const int64_t* stream)

    const ArrayportCAPI* arrayport_import_capi() except NULL
