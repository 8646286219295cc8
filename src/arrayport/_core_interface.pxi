# Included by _core.pyx. The two dict protocols, both ways:
# NumPy's __array_interface__ (host memory) and the CUDA Array Interface v3 (device memory);
# plus __array__ (import: call it and keep the array; export: NumPy 2 semantics).
#
# Import validates the whole dict before anything else happens (in particular before any
# CUDA driver call), so a malformed dict gets the same error with or without a GPU:
#   TypeError  - a key holds the wrong kind of value;
#   ValueError - a stream value the spec disallows (a producer's 0; a consumer's stream below
#                -1 — and, once the driver has said whose memory it is, a consumer's 0 on
#                CUDA memory, 1 or 2 on HIP memory: ROCm's libraries export this
#                interface for HIP memory too);
#   BufferError - a well-formed dict describing something DLPack cannot hold (structured or
#                 byte-swapped types, masks, an unknown version, bad layouts).
# The View keeps the object the dict came from alive (the dict itself owns nothing). When
# the array interface points into another object's buffer ("data" is a buffer, or missing),
# the View holds that buffer (a _BufferLease) and the layout is checked against its length.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_buffer.pxi: _buffer_item_type, _BufferLease, _lease_buffer
#   _core_cuda_floor.pxi: _cuda_floor_locate
#   _core_hip_floor.pxi: _hip_floor_locate
#   _core_describe.pxi: _adopt, _parse_dl_device, _plain_int, _raise_extent_problem
#   _core_dlpack.pxi: _dlpack_view
#   _core_hooks.pxi: _driver_for
#   _core_host_copy.pxi: _copy_elements
#   _core_numpy.pxi: _ndarray_over_view, _numpy_computes_on
#   _core_producers.pxi: _finish_import, NeedsCopy, _producer_kind, _refuse_lazy,
#       _refuse_lazy_labelled, _refuse_unexportable
#   _core_streams.pxi: _cai_consumer_stream, _cai_export_stream, _cai_producer_stream,
#       _cai_stream, _gpu_stream_value, _host_wait_for_pending, _order_import_after_producer
#   _core_view.pxi: View


cdef str _AI = "array_interface"
cdef str _CAI = "cuda_array_interface"
cdef object _MISSING = object()
# typestr -> (code, bits, lanes) for the common, non-"V" type strings.
cdef dict _dtype_for_typestr = {}


cdef object _required(dict d, str key, str protocol):
    value = d.get(key, _MISSING)
    if value is _MISSING:
        raise BufferError(f"{protocol}: the dict has no {key!r} entry, which is required")
    return value


cdef inline int64_t _as_int64(object value, str protocol, str what) except? -1:
    """An int from a dict entry (Python or NumPy integer, never bool)."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{protocol}: {what} must hold ints, got {type(value).__name__}")
        value = _plain_int(value)
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise BufferError(f"{protocol}: {what} value {value} does not fit in int64")
    return value


cdef tuple _item_type(dict d, str protocol):
    """(code, bits, lanes, padded) from typestr (and descr for raw "V" bytes)."""
    typestr = _required(d, "typestr", protocol)
    # The one cache of typestr parses (formats.py parses on a miss): plain type strings
    # under themselves (the hot path: one dict lookup); raw "V" bytes, which descr names,
    # under (typestr, descr) when descr is a plain list of (str, str) pairs.
    cdef object cache_key = None
    descr = None
    if type(typestr) is str:
        cached = _dtype_for_typestr.get(typestr)
        if cached is not None:
            return cached
        if typestr[1:2] == "V":
            descr = d.get("descr")
            cache_key = _descr_cache_key(typestr, descr)
            cached = _dtype_for_typestr.get(cache_key) if cache_key is not None else None
            if cached is not None:
                return cached
        else:
            cache_key = typestr
    dtype = _formats.dtype_from_typestr(typestr, descr, protocol)
    key = (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    if cache_key is not None and len(_dtype_for_typestr) < _TYPE_CACHE_LIMIT:
        _dtype_for_typestr[cache_key] = key
    return key


cdef object _descr_cache_key(str typestr, descr):
    if type(descr) is not list or len(<list>descr) > 4:
        return None
    for item in descr:
        if type(item) is not tuple or len(<tuple>item) != 2 or type(item[0]) is not str \
                or type(item[1]) is not str:
            return None
    return (typestr, tuple(descr))


cdef tuple _data_tuple(object data, str protocol):
    """(pointer, readonly) from a ``data`` entry that is a 2-tuple."""
    if len(<tuple>data) != 2:
        raise TypeError(f"{protocol}: data must be a (pointer, readonly) 2-tuple, got "
                        f"{len(<tuple>data)} items")
    pointer, readonly = data
    if type(pointer) is not int:
        if isinstance(pointer, bool) or not hasattr(pointer, "__index__"):
            raise TypeError(f"{protocol}: the data pointer must be an int, got "
                            f"{type(pointer).__name__}")
        pointer = _plain_int(pointer)
    if not 0 <= pointer <= <uintptr_t>-1:
        raise BufferError(f"{protocol}: data pointer {pointer} is not an address")
    if type(readonly) is not bool and not (type(readonly) is int and readonly in (0, 1)):
        raise TypeError(f"{protocol}: the data read-only flag must be a bool, got "
                        f"{readonly!r}")
    return (pointer, bool(readonly))


cdef View _view_from_layout(uintptr_t pointer, object shape, object strides, tuple item,
                            bint readonly, object owner, str protocol):
    """A host View over ``pointer`` described by a dict's shape and byte strides (None:
    C-contiguous), validated exactly like a DLPack import."""
    if not isinstance(shape, tuple):
        raise TypeError(f"{protocol}: shape must be a tuple of ints, got {type(shape).__name__}")
    cdef Py_ssize_t ndim = len(<tuple>shape)
    if ndim > AP_COPY_MAX_NDIM:
        raise BufferError(f"{protocol}: ndim {ndim} is outside the supported range 0..{MAX_NDIM}")
    cdef int64_t shape_c[AP_COPY_MAX_NDIM]
    cdef int64_t strides_c[AP_COPY_MAX_NDIM]
    cdef int64_t stride
    cdef APDLTensor t
    code, bits, lanes, padded = item
    cdef int64_t storage_bits = (8 if padded and bits < 8 else bits) * lanes
    for i in range(ndim):
        shape_c[i] = _as_int64((<tuple>shape)[i], protocol, "shape")
    if strides is not None:
        if not isinstance(strides, tuple):
            raise TypeError(f"{protocol}: strides must be None or a tuple of ints, got "
                            f"{type(strides).__name__}")
        if len(strides) != ndim:
            raise BufferError(f"{protocol}: strides has {len(strides)} entries for {ndim} "
                              f"dimensions")
        for i in range(ndim):
            stride = _as_int64(strides[i], protocol, "strides")
            if storage_bits % 8 or stride % (storage_bits // 8):
                raise BufferError(f"{protocol}: stride {stride} is not a multiple of the item "
                                  f"size ({storage_bits} bits)")
            strides_c[i] = stride // (storage_bits // 8)
    t.data = <void*>pointer
    t.device.device_type = APDL_CPU
    t.device.device_id = 0
    t.ndim = <int32_t>ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
    t.shape = shape_c
    t.strides = strides_c if strides is not None else NULL
    t.byte_offset = 0
    cdef uint64_t flags = APDL_FLAG_READ_ONLY if readonly else 0
    if padded:
        flags |= APDL_FLAG_IS_SUBBYTE_TYPE_PADDED
    cdef View v = View.__new__(View)
    _adopt(v, &t, flags, True, protocol)
    v._owner = owner
    v._protocol = protocol
    _finish_import(v, owner)
    return v


cdef int _check_within(View v, _BufferLease lease, str protocol) except -1:
    """Every byte ``v`` reaches lies inside the leased buffer (checked sums: extent.h)."""
    cdef APExtent extent
    cdef uintptr_t first = <uintptr_t>v._t.data + <uintptr_t>v._t.byte_offset
    if ap_layout_extent(v._t.ndim, v._t.shape, v._t.strides, v._itembits(),
                        <uintptr_t>v._t.data, v._t.byte_offset, &extent) != AP_EXTENT_OK \
            or not ap_extent_within(first, &extent, <uintptr_t>lease.buffer.buf,
                                    lease.buffer.len):
        start = first - <uintptr_t>lease.buffer.buf
        raise BufferError(f"{protocol}: the array reaches bytes {start + extent.low}.."
                          f"{start + extent.high} of a {lease.buffer.len}-byte data buffer")
    return 0


# Buffer formats that are plain bytes whatever the array interface calls them: ctypes
# char arrays export "<c", bytes-like objects "B" (handled by ap_simple_buffer_format).
cdef frozenset _PLAIN_BYTE_FORMATS = frozenset({b"c", b"@c", b"<c", b">c", b"=c", b"!c",
                                                b"s", b"@s", b"<s", b">s", b"=s", b"!s"})


cdef int _check_data_buffer(_BufferLease lease, str protocol) except -1:
    """A buffer behind an array interface must hold plain numbers or bytes: reinterpreting
    Python object pointers ("O"), void pointers or structs as numbers would hand out
    writable aliases of interpreter memory."""
    cdef Py_buffer* b = &lease.buffer
    cdef APDLDataType plain
    if ap_simple_buffer_format(b.format, b.itemsize, &plain):
        return 0
    if b.format != NULL and <bytes>b.format in _PLAIN_BYTE_FORMATS:
        return 0
    try:
        _buffer_item_type(b, protocol)
    except BufferError as error:
        raise BufferError(f"{protocol}: data is a buffer of items that are not plain numbers "
                          f"or bytes ({error}); refusing to reinterpret them") from None
    return 0


# ---- __array_interface__ import ------------------------------------------------------------

cdef View _view_from_ai_object(obj):
    d = getattr(obj, "__array_interface__", None)
    if d is None:
        raise TypeError(f"{_AI}: {type(obj).__module__}.{type(obj).__qualname__} has no "
                        f"__array_interface__")
    return _view_from_ai_dict(d, obj)


cdef View _view_from_ai_dict(object d, object owner):
    if type(d) is not dict:
        raise TypeError(f"{_AI}: __array_interface__ must be a dict, got {type(d).__name__}")
    cdef dict interface = <dict>d
    version = _required(interface, "version", _AI)
    if type(version) is not int:
        raise TypeError(f"{_AI}: version must be an int, got {type(version).__name__}")
    if version != 3:
        raise BufferError(f"{_AI}: version {version} is not supported; the array interface "
                          f"is version 3")
    shape = _required(interface, "shape", _AI)
    item = _item_type(interface, _AI)
    if interface.get("mask") is not None:
        raise BufferError(f"{_AI}: masked arrays are not supported (a mask marks elements "
                          f"as invalid; DLPack cannot carry one)")
    # An int when present (NumPy refuses None too: what arrayport accepts, NumPy must).
    cdef int64_t byte_offset = _as_int64(interface.get("offset", 0), _AI, "offset")
    if byte_offset < 0:
        raise BufferError(f"{_AI}: offset {byte_offset} is negative")
    strides = interface.get("strides")
    data = interface.get("data")
    cdef _BufferLease lease = None
    if type(data) is tuple:
        pointer, readonly = _data_tuple(data, _AI)
        if byte_offset != 0:
            # The array interface applies offset only to buffer data; NumPy ignores it next
            # to a pointer. Guessing either way could read the wrong bytes, so refuse.
            raise BufferError(f"{_AI}: offset {byte_offset} applies only when data is a "
                              f"buffer or absent, not to a (pointer, readonly) tuple")
    elif data is None or PyObject_CheckBuffer(data):
        # The memory is a buffer: "data" itself, or (no "data") the object's own buffer.
        source = owner if data is None else data
        if not PyObject_CheckBuffer(source):
            raise TypeError(f"{_AI}: data is missing and {type(source).__qualname__} does not "
                            f"export a buffer to take it from")
        # Contiguous bytes only: the dict's layout is laid over the buffer as one flat run.
        lease = _lease_buffer(source, _AI, PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT)
        _check_data_buffer(lease, _AI)
        if byte_offset > lease.buffer.len:
            raise BufferError(f"{_AI}: offset {byte_offset} lies beyond the end of the "
                              f"{lease.buffer.len}-byte data buffer")
        pointer, readonly = <uintptr_t>lease.buffer.buf, lease.buffer.readonly != 0
    else:
        raise TypeError(f"{_AI}: data must be a (pointer, readonly) tuple or a buffer, got "
                        f"{type(data).__name__}")
    if pointer + byte_offset > <uintptr_t>-1:
        raise BufferError(f"{_AI}: data pointer + offset wraps around the address space")
    cdef View v = _view_from_layout(pointer + byte_offset, shape, strides, item, readonly,
                                    owner, _AI)
    if lease is not None:
        _check_within(v, lease, _AI)
        v._lease = lease
    return v


# ---- __cuda_array_interface__ import --------------------------------------------------------

cdef View _view_from_cai_object(obj, stream=None):
    d = getattr(obj, "__cuda_array_interface__", None)
    if d is None:
        raise TypeError(f"{_CAI}: {type(obj).__module__}.{type(obj).__qualname__} has no "
                        f"__cuda_array_interface__")
    return _view_from_cai_dict(d, obj, stream)


cdef View _view_from_cai_dict(object d, object owner, object consumer_stream):
    """Validate a CUDA Array Interface dict entirely, then ask the driver where the
    pointer lives. Versions 0-3 are read; a newer version is refused (its synchronization
    rules may differ, and guessing would race)."""
    if type(d) is not dict:
        raise TypeError(f"{_CAI}: __cuda_array_interface__ must be a dict, got "
                        f"{type(d).__name__}")
    cdef dict interface = <dict>d
    version = _required(interface, "version", _CAI)
    if type(version) is not int:
        raise TypeError(f"{_CAI}: version must be an int, got {type(version).__name__}")
    if not 0 <= version <= 3:
        raise BufferError(f"{_CAI}: version {version} is not supported; arrayport reads "
                          f"versions 0 to 3 (a newer version may change synchronization "
                          f"rules, so it is refused rather than guessed)")
    shape = _required(interface, "shape", _CAI)
    item = _item_type(interface, _CAI)
    data = _required(interface, "data", _CAI)
    if type(data) is not tuple:
        raise TypeError(f"{_CAI}: data must be a (pointer, readonly) tuple, got "
                        f"{type(data).__name__}")
    pointer, readonly = _data_tuple(data, _CAI)
    if interface.get("mask") is not None:
        raise BufferError(f"{_CAI}: masked arrays are not supported (a mask marks elements "
                          f"as invalid; DLPack cannot carry one)")
    producer_stream = _cai_stream(interface)
    consumer_stream = _gpu_stream_value(consumer_stream)   # the vendor's rules once located
    cdef View v = _view_from_layout(pointer, shape, interface.get("strides"), item, readonly,
                                    owner, _CAI)
    # Everything is validated; only now touch the driver: the floor, from C, where it serves.
    cdef int32_t device_type = 0, device_id = 0
    cdef int located = _cuda_floor_locate(pointer, &device_type, &device_id)
    if located == 2 or (located == 0 and not ap_cuda_floor_ready()):
        # not CUDA's memory, or no CUDA floor at all (no CUDA driver opened): HIP's floor;
        # where it has no answer either, every driver from Python (CUDA's first)
        located = _hip_floor_locate(pointer, &device_type, &device_id)
    if located == 1:
        v._t.device.device_type, v._t.device.device_id = device_type, device_id
    else:
        v._t.device.device_type, v._t.device.device_id = _locate_interface_pointer(pointer)
    device_type = v._t.device.device_type
    consumer_stream = _cai_consumer_stream(consumer_stream, device_type)
    _order_import_after_producer(v, _cai_producer_stream(producer_stream, device_type),
                                 consumer_stream)
    return v


cdef tuple _locate_interface_pointer(uintptr_t pointer):
    """(device type, device id) of a CUDA Array Interface's memory, asked of the drivers.
    The interface is CUDA's, and ROCm's libraries (hip-python, CuPy's ROCm build) export it
    for HIP memory too: CUDA's driver is asked first; where none loads, or it knows no such
    memory, HIP's runtime, if one loads. CUDA's refusal stands where HIP has no answer. A
    NULL pointer (size 0: no memory to ask about) is the calling thread's current device's."""
    try:
        return _located_by(_driver_for(APDL_CUDA), APDL_CUDA, pointer)
    except BufferError as cuda_refusal:
        try:
            return _located_by(_driver_for(APDL_ROCM), APDL_ROCM, pointer)
        except BufferError:
            raise cuda_refusal from None


cdef tuple _located_by(driver, int32_t device_type, uintptr_t pointer):
    if pointer == 0:
        return device_type, driver.current_device()
    return tuple(driver.locate_pointer(pointer))


# ---- exports ----------------------------------------------------------------------------------

cdef dict _interface_of(View v, str attr):
    spelled = _formats.typestr_for(v.dtype)
    if spelled is None:
        raise AttributeError(f"{attr}: packed {v.dtype.name} elements have no byte address, "
                             f"so no type string can describe them; use DLPack")
    typestr, descr = spelled
    cdef bint c_contiguous = ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides) != 0
    return {
        "version": 3,
        "shape": v.shape,
        "typestr": typestr,
        "descr": list(descr),
        "data": (v.ptr, v.readonly),
        "strides": None if c_contiguous else v.strides,
    }


cdef dict _array_interface_of(View v):
    if not _host_accessible(v._t.device.device_type):
        raise AttributeError(f"__array_interface__: the View's memory is on {v.device}; the "
                             f"array interface describes host memory only")
    if not _numpy_reads(v._t.dtype):
        # bfloat16, float8/6/4, complex32, opaque handles: the dict could only say "|V2"
        # bytes, and NumPy (which reads this dict before __array__) would build a structured
        # void array. Without the attribute NumPy asks __array__, which gives ml_dtypes.
        raise AttributeError(f"__array_interface__: NumPy has no native type for "
                             f"{v.dtype.name}; use __array__ / arrayport.to_numpy (ml_dtypes) "
                             f"or DLPack")
    _host_wait_for_pending(v)   # its reader reads host memory through the pointer
    return _interface_of(v, "__array_interface__")


cdef dict _cuda_array_interface_of(View v):
    cdef int32_t kind = v._t.device.device_type
    if not (_cuda_kind(kind) or kind == APDL_CUDA_HOST or _rocm_kind(kind)):
        # HIP memory is described too: ROCm's libraries (hip-python, CuPy's ROCm build) read
        # this interface for it
        raise AttributeError(f"__cuda_array_interface__: the View's memory is on {v.device}; "
                             f"the CUDA Array Interface describes CUDA-accessible memory only "
                             f"(and HIP memory, which ROCm's libraries read through it)")
    d = _interface_of(v, "__cuda_array_interface__")
    if v._size == 0:
        d["data"] = (0, v.readonly)  # the spec's rule for zero-size arrays
    d["stream"] = _cai_export_stream(v)
    return d


# ---- __array__ ---------------------------------------------------------------------------------

cdef tuple _KW_COPY = ("copy",)


cdef View _view_from_array_method(obj):
    """A View of the ndarray ``obj.__array__(copy=False)`` returns (NumPy 2 semantics: the
    producer shares its memory or refuses). A producer that can only copy, or whose
    ``__array__`` takes no ``copy`` keyword (and so may copy silently), is refused with
    NeedsCopy: ``view`` never copies, the converters resolve it (``__array__(copy=True)``,
    or the bare call). Whatever else the producer raises becomes a BufferError naming it,
    so ``view`` can report its refusals in order."""
    if getattr(type(obj), "__array__", None) is None:
        raise TypeError(f"array: {type(obj).__module__}.{type(obj).__qualname__} has no "
                        f"__array__ method")
    cdef int kind = _producer_kind(type(obj))
    if kind == _LAZY:
        _refuse_lazy(obj, obj)  # before __array__, which would compute it
    elif kind == _LABELLED:
        _refuse_lazy_labelled(obj)
    elif kind == _PADDLE:
        _refuse_unexportable(obj, kind)  # its __array__ segfaults on sparse tensors too
    name = f"{type(obj).__name__}.__array__"
    try:
        try:
            result = obj.__array__(copy=False)
        except TypeError as error:
            if not rejects_keywords(error, _KW_COPY):
                raise
            raise NeedsCopy(f"array: {name} takes no copy= keyword (NumPy 1 style), so it "
                            f"may copy silently; arrayport.view never copies "
                            f"(arrayport.to_numpy and arrayport.to may)",
                            obj.__array__, False) from None
        except ValueError as error:  # NumPy 2: "a copy is needed", refused under copy=False
            raise NeedsCopy(f"array: {name}(copy=False) refused: {error}; sharing is "
                            f"impossible and arrayport.view never copies (arrayport.to_numpy "
                            f"and arrayport.to may)",
                            lambda: obj.__array__(copy=True)) from None
    except BufferError:
        raise
    except Exception as error:
        raise BufferError(f"array: {name} failed: {type(error).__name__}: {error}") from error
    numpy = _sys.modules.get("numpy")
    if numpy is None or not isinstance(result, numpy.ndarray):
        raise TypeError(f"array: {name}() returned {type(result).__name__}, not a "
                        f"numpy.ndarray")
    cdef View v = _dlpack_view(result, None)
    v._protocol = "array"
    return v


cdef object _ndarray_of(View v, dtype, copy):
    if copy is not None and type(copy) is not bool:
        raise TypeError(f"__array__: copy must be True, False or None, got {copy!r}")
    if not _host_accessible(v._t.device.device_type):
        raise BufferError(f"__array__: the View's memory is on {v.device}; NumPy reads host "
                          f"memory only (copy it to the CPU explicitly)")
    if _numpy_computes_on(v):
        array = _ndarray_over_view(v)
    else:
        array = to_numpy(v)
    if dtype is not None and array.dtype != dtype:
        if copy is False:
            raise ValueError(f"__array__: converting {array.dtype} to "
                             f"{_sys.modules['numpy'].dtype(dtype)} needs a copy, but copy=False")
        return array.astype(dtype)
    return array.copy() if copy else array


# ---- a received byte buffer, laid out (unpickling, shared memory) ---------------------------

def view_over_buffer(buffer, tuple item, tuple shape, strides, bint readonly, str protocol):
    """A host View of the bytes ``buffer`` exports (one contiguous run, held until the View
    dies), laid out as ``shape`` / byte ``strides`` (None: C-contiguous) of ``item`` =
    (code, bits, lanes, padded) from its first byte — zero-copy. BufferError when the layout
    reaches outside the buffer (a tampered pickle, a handle of the wrong size). Read-only
    when asked, or when the buffer is."""
    cdef _BufferLease lease = _lease_buffer(buffer, protocol, PyBUF_ANY_CONTIGUOUS)
    cdef View v = _view_from_layout(<uintptr_t>lease.buffer.buf, shape, strides, item,
                                    readonly or lease.buffer.readonly != 0, buffer, protocol)
    _check_within(v, lease, protocol)
    v._lease = lease
    return v


def layout_nbytes(tuple shape, tuple item, str protocol):
    """The bytes a C-contiguous layout of ``shape`` and ``item`` = (code, bits, lanes,
    padded) holds, counted by the rules every View's counts go through (extent.h):
    BufferError ("<protocol>: …") where an extent or the total does not fit in int64 — for
    a caller that must know before it makes the memory (empty_shared)."""
    cdef Py_ssize_t ndim = len(shape)
    if ndim > AP_COPY_MAX_NDIM:
        raise BufferError(f"{protocol}: ndim {ndim} is outside the supported range 0..{MAX_NDIM}")
    cdef int64_t shape_c[AP_COPY_MAX_NDIM]
    for i in range(ndim):
        shape_c[i] = _as_int64(shape[i], protocol, "shape")
    code, bits, lanes, padded = item
    cdef int64_t storage_bits = (8 if padded and bits < 8 else bits) * lanes
    cdef int64_t size = 0, nbytes = 0
    cdef int problem = ap_element_count(<int>ndim, shape_c, storage_bits, &size)
    if problem == AP_EXTENT_OK:
        problem = ap_nbytes_of(size, storage_bits, &nbytes)
    if problem != AP_EXTENT_OK:
        _raise_extent_problem(problem, protocol, <int>ndim, shape_c, NULL, storage_bits, 0)
    return nbytes


def copy_into_buffer(View v, buffer):
    """Copy ``v``'s elements (host-readable memory) in C order into the first ``v.nbytes``
    bytes of the writable, contiguous ``buffer`` — one pass of the host copy kernel."""
    if not _host_accessible(v._t.device.device_type):
        raise BufferError(f"copy: cannot read {v.device} memory from the host")
    cdef _BufferLease lease = _lease_buffer(buffer, "copy", PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE)
    if lease.buffer.len < v._nbytes:
        raise BufferError(f"copy: the buffer holds {lease.buffer.len} bytes, the View "
                          f"{v._nbytes}")
    _copy_elements(v, <char*>lease.buffer.buf)


def view_from_pointer(uintptr_t ptr, shape, strides, dtype, *, bint readonly, owner,
                      device=(APDL_CPU, 0), str protocol):
    """A View over raw memory described by ``shape`` and byte ``strides`` (None means
    C-contiguous), validated like a DLPack import. ``owner`` keeps the memory alive."""
    dtype = DType(dtype)
    device_type, device_id = _parse_dl_device(tuple(device))
    cdef View v = _view_from_layout(ptr, shape, strides,
                                    (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded),
                                    readonly, owner, protocol)
    v._t.device.device_type, v._t.device.device_id = device_type, device_id
    return v
