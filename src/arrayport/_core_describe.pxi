# Included by _core.pyx. How a View's description is filled and checked — the low floor
# every other part builds on, using no part but the shared declarations: a DLTensor
# validated and adopted (_adopt, the validation every importer shares), a View's counts
# from the one checked place (_count_elements, through extent.h), C-order strides, a
# View made like another, user integers taken as plain ints once (_plain_int), DLPack's
# dl_device argument, and which device kinds' data is an address.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_view.pxi: View

cdef object _checked_int(obj, str what):
    """``obj`` as a plain int (an int subclass's own comparisons are not asked); TypeError
    for anything else, bool included."""
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise TypeError(f"dlpack: {what} must hold ints, got {type(obj).__name__}")
    return _plain_int(obj)


cdef tuple _parse_dl_device(dl_device):
    if not isinstance(dl_device, tuple) or len(dl_device) != 2:
        raise TypeError(f"dlpack: dl_device must be a (device_type, device_id) tuple, "
                        f"got {dl_device!r}")
    device_type = _checked_int(dl_device[0], "dl_device")
    device_id = _checked_int(dl_device[1], "dl_device")
    # Range checks on the Python ints, before any conversion to C (no OverflowError).
    if not (0 < device_type < 2**31 and ap_device_type_is_known(<int32_t>device_type)):
        raise BufferError(f"dlpack: dl_device type {device_type} is not a DLPack device type")
    if not 0 <= device_id < 2**31:
        raise BufferError(f"dlpack: dl_device id {device_id} is out of range")
    return (<int32_t>device_type, <int32_t>device_id)




cdef object _plain_int(obj):
    """``obj`` as a plain ``int`` (``operator.index``), taken once. Every integer a user
    hands the core becomes one before it is checked or stored: an integer-like's own
    comparisons, or a second ``__index__`` that answers differently, never decide what is
    written into a C array."""
    return PyNumber_Index(obj)



# Device types whose DLTensor.data is an address (pointer arithmetic allowed); for the
# others (OpenCL, Vulkan, Metal handles…) only byte_offset may move.
cdef inline bint _data_is_address(int32_t device_type) noexcept:
    return (device_type == APDL_CPU or device_type == APDL_CUDA
            or device_type == APDL_CUDA_HOST or device_type == APDL_CUDA_MANAGED
            or device_type == APDL_ROCM or device_type == APDL_ROCM_HOST
            or device_type == APDL_TPU_HOST)


cdef inline int _count_elements(View v, str protocol) except -1:
    """Set ``v._size`` and ``v._nbytes`` from its shape and type, through extent.h's checked
    routines: the one place every View, however made (imports, layout operations, copies,
    fast paths), takes its counts from — but _adopt's, which takes those ap_layout_extent
    made with the same routines. BufferError ("<protocol>: …") when they do not fit."""
    cdef int64_t bits = v._itembits()
    cdef int problem = ap_element_count(v._t.ndim, v._t.shape, bits, &v._size)
    if problem == AP_EXTENT_OK:
        problem = ap_nbytes_of(v._size, bits, &v._nbytes)
    if problem != AP_EXTENT_OK:
        v._size = v._nbytes = 0
        _raise_extent_problem(problem, protocol, v._t.ndim, v._t.shape, v._t.strides, bits,
                              v._t.byte_offset)
    return 0


cdef inline void _fill_c_strides(int ndim, const int64_t* shape, int64_t* strides) noexcept:
    cdef int64_t step = 1
    for i in range(ndim - 1, -1, -1):
        strides[i] = step
        step *= shape[i] if shape[i] > 1 else 1


cdef View _new_view_like(View base, owner, str protocol):
    """A View of the same memory and layout as ``base``, kept alive by ``owner``."""
    cdef View v = View.__new__(View)
    v._reserve_dims(base._t.ndim)
    v._t = base._t
    v._t.shape = v._dims
    v._t.strides = v._dims + base._t.ndim
    memcpy(v._dims, base._t.shape, base._t.ndim * sizeof(int64_t))
    memcpy(v._dims + base._t.ndim, base._t.strides, base._t.ndim * sizeof(int64_t))
    v._flags = base._flags
    _count_elements(v, protocol)
    v._owner = owner
    v._protocol = protocol
    return v




cdef int _adopt(View v, APDLTensor* t, uint64_t flags, bint strides_may_be_null,
                str protocol) except -1:
    """Validate the DLTensor ``t`` and copy its description into ``v``. Raises BufferError
    ("<protocol>: …") and leaves ``v`` owning nothing if anything is wrong."""
    cdef int32_t ndim = t.ndim
    if ndim < 0 or ndim > AP_COPY_MAX_NDIM:
        raise BufferError(f"{protocol}: ndim {ndim} is outside the supported range 0..{MAX_NDIM}")
    if ndim > 0 and t.shape == NULL:
        raise BufferError(f"{protocol}: shape is NULL for a tensor with ndim {ndim}")
    if not ap_dtype_is_valid(t.dtype.code, t.dtype.bits, t.dtype.lanes):
        raise BufferError(f"{protocol}: {dtype_problem(t.dtype.code, t.dtype.bits, t.dtype.lanes)}")
    if not ap_device_type_is_known(t.device.device_type):
        raise BufferError(f"{protocol}: device type {t.device.device_type} is not a DLPack "
                          f"device type")
    if t.device.device_id < 0:
        raise BufferError(f"{protocol}: device id {t.device.device_id} is negative")
    if flags & ~APDL_FLAGS_KNOWN:
        raise BufferError(f"{protocol}: unknown flag bits {flags & ~APDL_FLAGS_KNOWN:#x}")
    v._reserve_dims(ndim)
    cdef int64_t* shape = v._t.shape
    cdef int64_t* strides = v._t.strides
    for i in range(ndim):
        shape[i] = t.shape[i]
        if shape[i] < 0:
            raise BufferError(f"{protocol}: shape[{i}] is negative ({shape[i]})")
    if ndim > 0 and t.strides == NULL:
        if not strides_may_be_null:
            raise BufferError(f"{protocol}: strides is NULL for a tensor with ndim > 0, which "
                              "DLPack 1.2 and later forbid")
        _fill_c_strides(ndim, shape, strides)
    elif ndim > 0:
        memcpy(strides, t.strides, ndim * sizeof(int64_t))

    cdef int64_t bits = t.dtype.bits
    cdef bint padded = (flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0
    if bits < 8 and padded:
        bits = 8
    bits *= t.dtype.lanes
    cdef APExtent extent
    cdef int problem = ap_layout_extent(ndim, shape, strides, bits, <uintptr_t>t.data,
                                        t.byte_offset, &extent)
    if problem != AP_EXTENT_OK:
        _raise_extent_problem(problem, protocol, ndim, shape, strides, bits, t.byte_offset)
    cdef int64_t size = extent.size
    if t.data == NULL and size != 0:
        raise BufferError(f"{protocol}: data is NULL for a tensor with {size} elements")
    if bits % 8 and size > 1 and not ap_is_c_contiguous(ndim, shape, strides):
        raise BufferError(f"{protocol}: packed sub-byte tensors must be C-contiguous")

    v._t.device = t.device
    v._t.ndim = ndim
    v._t.dtype = t.dtype
    if t.data != NULL and _data_is_address(t.device.device_type):
        # Folded into the address: PaddlePaddle 3.3 and Warp 1.19 ignore byte_offset on
        # import, so every export of an address carries it as 0 (MLX's slices use it).
        v._t.data = <void*>(<char*>t.data + t.byte_offset)
        v._t.byte_offset = 0
    else:
        v._t.data = t.data
        v._t.byte_offset = t.byte_offset
    v._flags = flags
    # The counts ap_layout_extent made with _count_elements' own routines (extent.h), on
    # the element bits v._itembits() gives (the same rule, above): taken, not made twice.
    v._size, v._nbytes = extent.size, extent.nbytes
    return 0


cdef int _raise_extent_problem(int problem, str protocol, int ndim, const int64_t* shape,
                               const int64_t* strides, int64_t bits,
                               uint64_t byte_offset) except -1:
    """The BufferError for a layout ap_layout_extent refused (extent.h)."""
    shape_list = [shape[i] for i in range(ndim)]
    if problem == AP_EXTENT_NEGATIVE_SHAPE:
        raise BufferError(f"{protocol}: shape {shape_list} has a negative entry")
    if problem == AP_EXTENT_SIZE_OVERFLOW:
        raise BufferError(f"{protocol}: shape {shape_list} has more elements than fit in "
                          f"int64")
    if problem == AP_EXTENT_NBYTES_OVERFLOW:
        raise BufferError(f"{protocol}: shape {shape_list} of {bits}-bit elements holds more "
                          f"bytes than fit in int64 (NumPy's limit too); a broadcast this "
                          f"large cannot be counted, copied or exported")
    if problem == AP_EXTENT_SPAN_OVERFLOW:
        raise BufferError(f"{protocol}: strides {[strides[i] for i in range(ndim)]} over shape "
                          f"{shape_list} address memory outside the address space (the span "
                          f"does not fit in int64)")
    raise BufferError(f"{protocol}: data + byte_offset ({byte_offset}) and the strides address "
                      f"memory outside the address space")
