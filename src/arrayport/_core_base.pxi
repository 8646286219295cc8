# Included first by _core.pyx: everything the core's parts share — cimports, the C
# declarations of _csrc/core_support.h, the facts every part tests against (device kinds,
# the type tables), caches' size limit and module constants. A part uses names from
# another part only through this file, or by calling that part's functions (listed in each
# part's header). docs/architecture.md has the map.

cimport cython
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid,
    PyCapsule_SetName,
)
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF, Py_REFCNT
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from arrayport._extent cimport *

from arrayport._dlpack_abi cimport *

cdef extern from "_csrc/core_support.h":
    long ap_live_exported
    long ap_live_imported
    long ap_live_host_buffers
    long ap_live_buffer_leases
    void ap_counter_add(long* counter, long delta) nogil
    long ap_counter_get(long* counter) nogil
    void* ap_host_alloc(size_t nbytes) nogil
    size_t ap_huge_pages_from() nogil
    void ap_read_host_settings() nogil

    APDLManagedTensorVersioned* ap_alloc_exported_versioned(int32_t ndim) except NULL
    APDLManagedTensor* ap_alloc_exported_legacy(int32_t ndim) except NULL
    object ap_capsule_for_export(void* managed, int versioned)
    void ap_call_deleter(void* managed, int versioned)
    object ap_call_method_one_kw(object obj, object name, object kwnames, object value)
    void ap_seal_constructor(PyTypeObject* type)

    enum:
        AP_COPY_MAX_NDIM
    int ap_is_c_contiguous(int ndim, const int64_t* shape, const int64_t* strides) nogil
    int ap_is_f_contiguous(int ndim, const int64_t* shape, const int64_t* strides) nogil
    int ap_dtype_is_valid(int code, int bits, int lanes) nogil
    int ap_device_type_is_known(int32_t device_type) nogil
    void ap_copy_strided_to_contiguous(char* dst, const char* src, int ndim,
                                       const int64_t* shape, const int64_t* byte_strides,
                                       int64_t itemsize) nogil
    ctypedef struct ap_copy_config_t:
        int best
        int path
        int64_t line, l1d, l2, llc, l2_ways
        int64_t band_lines
        int64_t streaming_bytes
        int64_t threads, thread_bytes
    ap_copy_config_t ap_copy_config
    const char* const* ap_copy_path_names
    void ap_copy_configure() nogil
    int ap_copy_force_path(int path) nogil
    void ap_copy_set_threads(int64_t threads, int64_t thread_bytes) nogil
    int64_t ap_copy_set_streaming(int64_t bytes) nogil

import os as _os
import sys as _sys
from types import GenericAlias as _GenericAlias   # View[Float32], Spec[Float32] (typing)

from arrayport import formats as _formats
from arrayport.devices import Device, DeviceType
from arrayport.dtypes import DType, dtype_problem
from arrayport import dtypes as _dtypes

# The most dimensions a View may have (NumPy's limit; the copy kernel's stack arrays).
MAX_NDIM = AP_COPY_MAX_NDIM
# Views with at most this many dimensions keep shape and strides inside the object.
DEF INLINE_NDIM = 8

DLPACK_VERSION = (APDL_MAJOR_VERSION, APDL_MINOR_VERSION)
FLAG_READ_ONLY = APDL_FLAG_READ_ONLY
FLAG_IS_COPIED = APDL_FLAG_IS_COPIED
FLAG_IS_SUBBYTE_TYPE_PADDED = APDL_FLAG_IS_SUBBYTE_TYPE_PADDED

cdef str _DLPACK_METHOD = "__dlpack__"
cdef tuple _KW_MAX_VERSION = ("max_version",)
cdef tuple _OUR_MAX_VERSION = DLPACK_VERSION
cdef list _DEVICE_TYPES = [None] * (max(DeviceType) + 1)   # DeviceType by number
for _t in DeviceType:
    _DEVICE_TYPES[_t] = _t
del _t


cdef str _device_type_label(int64_t device_type):
    """A device type's name for messages; range-checked, so any value from user code is
    safe to pass."""
    if 0 <= device_type < len(_DEVICE_TYPES) and _DEVICE_TYPES[device_type] is not None:
        return (<object>_DEVICE_TYPES[device_type]).label
    return f"device type {device_type}"
cdef dict _device_cache = {}
cdef dict _dtype_cache = {}

# Device types whose memory the CPU can read: CPU and the pinned-host kinds.
cdef inline bint _host_accessible(int32_t device_type) noexcept nogil:
    return (device_type == APDL_CPU or device_type == APDL_CUDA_HOST
            or device_type == APDL_ROCM_HOST or device_type == APDL_TPU_HOST)


# Device types whose memory is ordered by streams (DLPack's stream argument applies).
cdef inline bint _cuda_kind(int32_t device_type) noexcept nogil:
    return device_type == APDL_CUDA or device_type == APDL_CUDA_MANAGED


cdef inline bint _rocm_kind(int32_t device_type) noexcept nogil:
    return device_type == APDL_ROCM or device_type == APDL_ROCM_HOST


cdef inline bint _stream_ordered(int32_t device_type) noexcept nogil:
    return _cuda_kind(device_type) or device_type == APDL_ROCM


def dtype_is_valid(int code, int bits, int lanes):
    """Whether the core's C table (core_support.h ap_dtype_is_valid) takes this DLPack type,
    for the test that holds it equal to arrayport.dtypes (the Python statement)."""
    if not (0 <= code < 256 and 0 <= bits < 256 and 0 <= lanes < 65536):
        return False
    return bool(ap_dtype_is_valid(code, bits, lanes))


def device_type_is_known(int32_t device_type):
    """Whether the core's C table (ap_device_type_is_known) names this device type."""
    return bool(ap_device_type_is_known(device_type))


def device_type_facts(int32_t device_type):
    """(host-accessible, stream-ordered, CUDA kind) as the core's predicates above say, for
    the test that holds them equal to arrayport.devices.DeviceType."""
    return (_host_accessible(device_type), _stream_ordered(device_type),
            _cuda_kind(device_type))



# Per-type caches (producer kinds, exchange tables, protocol plans, parsed type strings)
# are cleared or stop growing at this many entries: a stream of new types cannot grow them
# without bound.
cdef Py_ssize_t _TYPE_CACHE_LIMIT = 4096


# ---- type tables: what NumPy and PyTorch hold (used by the converters, the buffer and
# interface exports and NumPy dispatch) -------------------------------------------------------

cdef inline bint _torch_holds(APDLDataType d) noexcept:
    """PyTorch 2.13 has this DLPack type (one lane): the one statement of this fact
    (``torch_holds`` gives it to the converters)."""
    if d.lanes != 1:
        return False
    if d.code == APDL_INT or d.code == APDL_UINT:
        return d.bits == 8 or d.bits == 16 or d.bits == 32 or d.bits == 64
    if d.code == APDL_FLOAT:
        return d.bits == 16 or d.bits == 32 or d.bits == 64
    if d.code == APDL_COMPLEX:
        return d.bits == 32 or d.bits == 64 or d.bits == 128
    if d.code == APDL_BFLOAT:
        return d.bits == 16
    if d.code == APDL_BOOL:
        return d.bits == 8
    return APDL_FLOAT8_E4M3FN <= d.code <= APDL_FLOAT8_E8M0FNU and d.bits == 8


def torch_holds(dtype):
    """Whether PyTorch (2.13) has a type for ``dtype`` (an arrayport DType)."""
    cdef APDLDataType d
    d.code, d.bits, d.lanes = int(dtype.code), dtype.bits, dtype.lanes
    return _torch_holds(d)


cdef inline bint _numpy_reads(APDLDataType d) noexcept:
    """NumPy holds this DLPack type natively: C mirror of ``DType.numpy_native`` for the
    hot paths (tests/test_architecture.py holds the two equal over every DLPack type)."""
    if d.lanes != 1:
        return False
    if d.code == APDL_INT or d.code == APDL_UINT:
        return d.bits == 8 or d.bits == 16 or d.bits == 32 or d.bits == 64
    if d.code == APDL_FLOAT:
        return d.bits == 16 or d.bits == 32 or d.bits == 64
    if d.code == APDL_COMPLEX:
        return d.bits == 64 or d.bits == 128
    return d.code == APDL_BOOL and d.bits == 8


def numpy_reads(dtype):
    """The core's answer to ``dtype.numpy_native`` (for the test that holds them equal)."""
    cdef APDLDataType d
    d.code, d.bits, d.lanes = int(dtype.code), dtype.bits, dtype.lanes
    return _numpy_reads(d)


