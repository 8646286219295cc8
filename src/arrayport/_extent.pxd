# Cython declarations of _csrc/extent.h: the checked layout arithmetic every importer,
# export, copy and allocation takes its sizes from.
from libc.stdint cimport int64_t, uint64_t, uintptr_t

cdef extern from "_csrc/extent.h" nogil:
    enum:
        AP_EXTENT_OK
        AP_EXTENT_NEGATIVE_SHAPE
        AP_EXTENT_SIZE_OVERFLOW
        AP_EXTENT_NBYTES_OVERFLOW
        AP_EXTENT_SPAN_OVERFLOW
        AP_EXTENT_ADDRESS_WRAPS
        AP_EXTENT_SUBBYTE_START

    ctypedef struct APExtent:
        int64_t size
        int64_t nbytes
        int64_t low
        int64_t high

    int ap_element_count(int ndim, const int64_t* shape, int64_t storage_bits, int64_t* size_out)
    int ap_nbytes_of(int64_t size, int64_t storage_bits, int64_t* nbytes_out)
    int ap_layout_extent(int ndim, const int64_t* shape, const int64_t* strides,
                         int64_t storage_bits, uintptr_t data, uint64_t byte_offset,
                         APExtent* out)
    int ap_shifted_offset(int64_t byte_offset, int64_t element_shift, int64_t storage_bits,
                          int64_t* offset_out)
    int ap_extent_within(uintptr_t first, const APExtent* extent, uintptr_t buffer,
                         int64_t length)
