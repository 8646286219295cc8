# Included by _core.pyx. The buffer protocol (PEP 3118), both ways.
#
# Import: arrayport asks the exporter for a Py_buffer (strides and format, read-only allowed)
# and keeps it in a _BufferLease that the View holds; the lease releases the Py_buffer exactly
# once, when the last View reading it dies. While it is held the exporter keeps its memory
# where it is (a bytearray cannot resize, an mmap cannot close).
#
# Export: View.__getbuffer__ (in _core_view.pxi) fills a Py_buffer for host-readable memory. The
# shape and byte strides (Py_ssize_t, as PEP 3118 wants them) are worked out at the View's
# first export into one block the View owns (View._buffer_dims, freed with the View) and
# shared by every later export: Py_buffer.obj holds the View, so the block outlives every
# export, and the View never changes. No allocation per export and no release function, as
# NumPy caches its arrays' buffer info.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _adopt, _count_elements
#   _core_producers.pxi: _finish_import
#   _core_streams.pxi: _host_wait_for_pending
#   _core_view.pxi: View

from cpython.buffer cimport (
    PyBUF_ANY_CONTIGUOUS, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND,
    PyBUF_RECORDS_RO, PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_Release,
    PyObject_CheckBuffer, PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


# (format bytes, itemsize) -> (code, bits, lanes) for the uncommon import formats (the
# common ones, and every export format, are handled in C: core_support.h).
cdef dict _dtype_for_format = {}
cdef const char* _BYTE_FORMAT = "B"


@cython.final
@cython.freelist(64)   # one per buffer import: reused, not allocated (as View's)
cdef class _BufferLease:
    """One Py_buffer arrayport holds on another object's memory; released exactly once."""

    cdef Py_buffer buffer
    cdef bint held

    def __dealloc__(self):
        if self.held:
            self.held = False
            PyBuffer_Release(&self.buffer)
            ap_counter_add(&ap_live_buffer_leases, -1)

    @property
    def obj(self):
        return self.buffer.obj if self.held else None


cdef _BufferLease _lease_buffer(obj, str protocol, int flags=PyBUF_RECORDS_RO):
    """Hold ``obj``'s Py_buffer, asked for with ``flags``. Whatever the exporter raises for
    a buffer it cannot give (NumPy: ValueError for datetime64 or a non-contiguous array
    asked to be contiguous) becomes a BufferError naming the protocol, so the caller can
    try its next protocol."""
    if not PyObject_CheckBuffer(obj):
        raise TypeError(f"{protocol}: {type(obj).__module__}.{type(obj).__qualname__} does not "
                        f"support the buffer protocol")
    cdef _BufferLease lease = _BufferLease.__new__(_BufferLease)
    try:
        PyObject_GetBuffer(obj, &lease.buffer, flags)
    except (BufferError, ValueError) as error:
        raise BufferError(f"{protocol}: {type(obj).__qualname__} refused to export its "
                          f"buffer: {error}") from None
    lease.held = True
    ap_counter_add(&ap_live_buffer_leases, 1)
    return lease


cdef extern from "_csrc/core_support.h":
    int ap_simple_buffer_format(const char* format, Py_ssize_t itemsize, APDLDataType* out)
    const char* ap_buffer_format_for(uint8_t code, uint8_t bits, uint16_t lanes)


cdef tuple _buffer_item_type(Py_buffer* b, str protocol):
    """(code, bits, lanes) of the buffer's items, from its format and itemsize (the
    uncommon formats; ap_simple_buffer_format handles the common ones in C)."""
    fmt = b"B" if b.format == NULL else <bytes>b.format
    key = (fmt, b.itemsize)
    cached = _dtype_for_format.get(key)
    if cached is None:
        dtype = _formats.dtype_from_buffer_format(fmt.decode("ascii", "replace"), b.itemsize,
                                                  protocol)
        cached = (int(dtype.code), dtype.bits, dtype.lanes)
        if len(_dtype_for_format) < _TYPE_CACHE_LIMIT:  # exporters' formats: a bounded few
            _dtype_for_format[key] = cached
    return cached


cdef View _view_from_buffer(obj, owner, str protocol):
    """A View reading ``obj``'s buffer, kept alive by ``owner`` and the lease."""
    cdef _BufferLease lease = _lease_buffer(obj, protocol)
    cdef Py_buffer* b = &lease.buffer
    cdef int ndim = b.ndim
    if ndim < 0 or ndim > AP_COPY_MAX_NDIM:
        raise BufferError(f"{protocol}: ndim {ndim} is outside the supported range 0..{MAX_NDIM}")
    if b.suboffsets != NULL:
        for i in range(ndim):
            if b.suboffsets[i] >= 0:
                raise BufferError(f"{protocol}: the buffer uses suboffsets (PIL-style "
                                  f"indirect arrays), which DLPack cannot describe")
    if b.itemsize <= 0:
        raise BufferError(f"{protocol}: itemsize {b.itemsize} is not positive")
    cdef int64_t shape_c[AP_COPY_MAX_NDIM]
    cdef int64_t strides_c[AP_COPY_MAX_NDIM]
    cdef APDLTensor t
    if not ap_simple_buffer_format(b.format, b.itemsize, &t.dtype):
        t.dtype.code, t.dtype.bits, t.dtype.lanes = _buffer_item_type(b, protocol)
    if b.shape == NULL and ndim == 0:  # a scalar
        pass
    elif b.shape == NULL:  # a flat run of bytes
        ndim = 1
        shape_c[0] = b.len // b.itemsize
        strides_c[0] = 1
    else:
        for i in range(ndim):
            shape_c[i] = b.shape[i]
            if b.strides == NULL:
                continue
            if b.strides[i] % b.itemsize:
                raise BufferError(f"{protocol}: stride {b.strides[i]} is not a multiple of "
                                  f"the item size {b.itemsize}")
            strides_c[i] = b.strides[i] // b.itemsize
    t.data = b.buf
    t.device.device_type = APDL_CPU
    t.device.device_id = 0
    t.ndim = ndim
    t.shape = shape_c
    t.strides = strides_c if (b.strides != NULL or (b.shape == NULL and ndim > 0)) else NULL
    t.byte_offset = 0
    cdef View v = View.__new__(View)
    _adopt(v, &t, APDL_FLAG_READ_ONLY if b.readonly else 0, True, protocol)
    if t.strides == NULL and v._nbytes > b.len:
        # A contiguous buffer's len is its byte count (PEP 3118); one whose shape claims
        # more would have us read past its end. (A strided buffer's len counts elements,
        # not the span its strides reach, so it cannot be checked this way.)
        raise BufferError(f"{protocol}: the buffer's shape needs {v._nbytes} bytes but its "
                          f"len is {b.len}")
    v._owner = owner
    v._lease = lease
    v._protocol = protocol
    _finish_import(v, owner)
    return v


cdef View _view_of_byte_string(obj, bint immutable):
    """``bytes`` (``immutable``) or ``bytearray``: what _view_from_buffer gives — a 1-D
    uint8 View of the whole storage, owned by ``obj`` — built directly: their format, shape
    and strides are known, so there is nothing to parse or validate. bytes cannot change
    while referenced, so it needs no Py_buffer; a bytearray's is held (it cannot be resized
    while viewed). tests/test_buffer_protocol.py holds this to View.from_buffer."""
    cdef View v = View.__new__(View)
    cdef _BufferLease lease
    cdef Py_ssize_t n
    if immutable:
        v._t.data = <void*>PyBytes_AS_STRING(obj)
        n = PyBytes_GET_SIZE(obj)
        v._flags = APDL_FLAG_READ_ONLY
    else:
        lease = _lease_buffer(obj, "buffer", PyBUF_SIMPLE)
        v._t.data = lease.buffer.buf
        n = lease.buffer.len
        v._flags = 0
        v._lease = lease
    v._reserve_dims(1)
    v._t.shape[0] = n
    v._t.strides[0] = 1
    v._t.ndim = 1
    v._t.device.device_type = APDL_CPU
    v._t.device.device_id = 0
    v._t.dtype.code = APDL_UINT
    v._t.dtype.bits = 8
    v._t.dtype.lanes = 1
    v._t.byte_offset = 0
    _count_elements(v, "buffer")
    v._owner = obj
    v._protocol = "buffer"
    return v


cdef int _fill_buffer(View v, Py_buffer* buffer, int flags) except -1:
    """Fill ``buffer`` for a PEP 3118 consumer asking with ``flags``."""
    if not _host_accessible(v._t.device.device_type):
        raise BufferError(f"buffer: the View's memory is on {v.device}, which the buffer "
                          f"protocol (host memory only) cannot export")
    if (flags & PyBUF_WRITABLE) and (v._flags & APDL_FLAG_READ_ONLY):
        raise BufferError("buffer: the View is read-only but a writable buffer was requested")
    cdef const char* fmt = ap_buffer_format_for(v._t.dtype.code, v._t.dtype.bits,
                                                 v._t.dtype.lanes)
    if fmt == NULL:
        raise BufferError(f"buffer: {v.dtype.name} has no PEP 3118 format; use DLPack "
                          f"(arrayport.to_numpy, numpy.from_dlpack) for this View")
    cdef int ndim = v._t.ndim
    cdef bint c_contiguous = ap_is_c_contiguous(ndim, v._t.shape, v._t.strides) != 0
    if (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS and not c_contiguous:
        raise BufferError("buffer: a C-contiguous buffer was requested; the View is not")
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS
            and not ap_is_f_contiguous(ndim, v._t.shape, v._t.strides)):
        raise BufferError("buffer: a Fortran-contiguous buffer was requested; the View is not")
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS and not c_contiguous
            and not ap_is_f_contiguous(ndim, v._t.shape, v._t.strides)):
        raise BufferError("buffer: a contiguous buffer was requested; the View is strided")
    cdef bint want_strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES
    if not want_strides and not c_contiguous:
        raise BufferError("buffer: the View is strided but the consumer did not ask for strides")

    cdef Py_ssize_t itemsize = v._itembits() // 8
    cdef Py_ssize_t* dims = v._buffer_dims
    if dims == NULL:
        dims = <Py_ssize_t*>malloc(<size_t>(2 * ndim + 1) * sizeof(Py_ssize_t))
        if dims == NULL:
            raise MemoryError()
        for i in range(ndim):
            dims[i] = v._t.shape[i]
            dims[ndim + i] = v._t.strides[i] * itemsize
        v._buffer_dims = dims
    _host_wait_for_pending(v)   # the host reads it from here on
    buffer.buf = <char*>v._t.data + v._t.byte_offset
    buffer.len = v._nbytes  # checked when the View was made (extent.h)
    buffer.readonly = (v._flags & APDL_FLAG_READ_ONLY) != 0
    buffer.internal = NULL
    buffer.suboffsets = NULL
    if (flags & PyBUF_ND) == PyBUF_ND:
        buffer.ndim = ndim
        buffer.itemsize = itemsize
        buffer.format = <char*>fmt if flags & PyBUF_FORMAT else NULL
        buffer.shape = dims
        buffer.strides = dims + ndim if want_strides else NULL
    else:  # a plain run of bytes (contiguous, checked above)
        buffer.ndim = 1
        buffer.itemsize = 1
        buffer.format = <char*>_BYTE_FORMAT if flags & PyBUF_FORMAT else NULL
        buffer.shape = NULL
        buffer.strides = NULL
    return 0
