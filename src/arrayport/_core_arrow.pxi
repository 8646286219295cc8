# Included by _core.pyx. The Arrow C data interface, consumer side: an Arrow array — through
# the PyCapsule protocol (__arrow_c_array__) or a pair of raw capsules — as a read-only View
# of its values, zero-copy (Arrow data is immutable).
#
# What maps (the schema's format; arrayport.formats owns the primitive table):
#   - a fixed-width number (c C s S i I l L e f g) -> a 1-D View, the array's offset applied;
#   - a fixed-size list "+w:N" of those, nested to any depth -> (rows, N, ...);
#   - the canonical extension arrow.fixed_shape_tensor (storage "+w:N") -> (rows, *shape),
#     its permutation read as strides.
# Refused with BufferError ("arrow: ..."): nulls (a View carries no validity mask: the
# message says how many and what to do), bit-packed booleans and every other layout
# without a strided form (formats.arrow_problem names it), dictionary-encoded arrays,
# malformed structs (negative lengths or offsets, NULL buffers or children, a child too
# short for its parent, a struct already released). The values buffer's size is not part of
# the C data interface: within the lengths given, the producer is trusted, as every Arrow
# consumer must.
#
# Ownership: the array struct is moved out of its capsule into an _ArrowArrayHolder (the
# View's owner), which calls its release callback exactly once, when the last View on it
# is gone; the schema is only read while parsing and stays in its capsule, whose destructor
# releases it. A failure after the move drops the holder: released once, all the same.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core.pyx: _adopt, _fill_c_strides
#   _core_producers.pxi: _finish_import

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

cdef extern from "arrayport/arrow_abi.h":
    ctypedef struct APArrowSchema:
        const char* format
        const char* name
        const char* metadata
        int64_t flags
        int64_t n_children
        APArrowSchema** children
        APArrowSchema* dictionary
        void (*release)(APArrowSchema*)
        void* private_data
    ctypedef struct APArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void** buffers
        APArrowArray** children
        APArrowArray* dictionary
        void (*release)(APArrowArray*)
        void* private_data

# Nesting deeper than this is refused (a View has at most MAX_NDIM dimensions anyway).
cdef int _ARROW_MAX_DEPTH = 32
cdef str _FIXED_SHAPE_TENSOR = "arrow.fixed_shape_tensor"

cdef Py_ssize_t _live_arrow_arrays = 0       # held Arrow arrays not yet released (tests)

# format -> (DLPack code, bits, bytes), read once from arrayport.formats (the one table), so
# that an import asks no Python object for its type.
cdef dict _ARROW_ITEMS = {fmt.encode(): (int(dtype.code), dtype.bits, dtype.itemsize)
                          for fmt, dtype in _formats.ARROW_PRIMITIVES.items()}


@cython.final
cdef class _ArrowArrayHolder:
    """An Arrow array moved out of its capsule; its release callback runs exactly once,
    when this holder (the owner of every View on it) goes."""

    cdef APArrowArray array

    @property
    def length(self):
        """The Arrow array's length (rows)."""
        return self.array.length

    def __dealloc__(self):
        global _live_arrow_arrays
        if self.array.release != NULL:
            self.array.release(&self.array)   # the producer's; it sets release to NULL
            self.array.release = NULL
            _live_arrow_arrays -= 1


def live_arrow_arrays():
    """How many Arrow arrays arrayport holds and has not released yet (for the tests)."""
    return _live_arrow_arrays


cdef dict _arrow_metadata(const char* metadata):
    """The schema's metadata as {key: value} (bytes): int32 count, then each key and value
    as an int32 length and its bytes (native byte order)."""
    result = {}
    if metadata == NULL:
        return result
    cdef const char* at = metadata
    cdef int32_t count, length
    memcpy(&count, at, 4)
    at += 4
    if count < 0 or count > 4096:
        raise BufferError(f"arrow: schema metadata claims {count} entries")
    for _ in range(count):
        pair = []
        for _ in range(2):
            memcpy(&length, at, 4)
            at += 4
            if length < 0 or length > (1 << 24):
                raise BufferError(f"arrow: schema metadata entry of length {length}")
            pair.append(at[:length])
            at += length
        result[pair[0]] = pair[1]
    return result


cdef tuple _arrow_tensor_layout(dict metadata, Py_ssize_t width):
    """(shape, permutation) of an arrow.fixed_shape_tensor's cells, from its metadata."""
    import json
    try:
        described = json.loads(metadata.get(b"ARROW:extension:metadata", b"{}"))
        shape = tuple(int(n) for n in described["shape"])
        permutation = described.get("permutation")
        permutation = (tuple(range(len(shape))) if permutation is None
                       else tuple(int(p) for p in permutation))
    except (ValueError, KeyError, TypeError) as error:
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata is malformed: "
                          f"{error}") from None
    cdef Py_ssize_t cells = 1
    for n in shape:
        if n < 0:
            raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} shape {shape} is negative")
        cells *= n
    if cells != width or sorted(permutation) != list(range(len(shape))):
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} shape {shape} / permutation "
                          f"{permutation} does not fit lists of {width}")
    return shape, permutation


cdef int64_t _arrow_nulls(const APArrowArray* a, int64_t first, int64_t count) except -1:
    """Nulls among elements [first, first + count) of ``a``'s validity bitmap (offset
    applied by the caller), counting the bits when the producer did not."""
    if a.n_buffers < 1 or a.buffers[0] == NULL or count == 0:
        return 0
    if a.null_count == 0:
        return 0
    cdef const uint8_t* bits = <const uint8_t*>a.buffers[0]
    cdef int64_t nulls = 0, i
    for i in range(first, first + count):
        if not (bits[i >> 3] >> (i & 7)) & 1:
            nulls += 1
    return nulls


cdef int _check_arrow_array(const APArrowArray* a, Py_ssize_t buffers, Py_ssize_t children,
                            str what) except -1:
    if a == NULL:
        raise BufferError(f"arrow: the {what} array is NULL")
    if a.release == NULL:
        raise BufferError(f"arrow: the {what} array was already released (or moved)")
    if a.length < 0 or a.offset < 0 or a.null_count < -1:
        raise BufferError(f"arrow: the {what} array has length {a.length}, offset "
                          f"{a.offset}, null count {a.null_count}")
    if a.n_buffers != buffers or a.buffers == NULL:
        raise BufferError(f"arrow: the {what} array has {a.n_buffers} buffers, its type "
                          f"has {buffers}")
    if a.n_children != children or (children and a.children == NULL):
        raise BufferError(f"arrow: the {what} array has {a.n_children} children, its type "
                          f"has {children}")
    if a.dictionary != NULL:
        raise BufferError("arrow: dictionary-encoded arrays have no strided form")
    return 0


cdef View _view_from_arrow(const APArrowSchema* schema, APArrowArray* moved_from,
                           str protocol):
    """A read-only View of the Arrow array ``moved_from`` (moved out: its release set to
    NULL) described by ``schema``. The array's buffers live as long as the array (its
    release callback owns them): the holder is the View's owner."""
    if schema == NULL or schema.release == NULL:
        raise BufferError(f"{protocol}: the schema is NULL or was already released")
    if moved_from == NULL or moved_from.release == NULL:
        raise BufferError(f"{protocol}: the array is NULL or was already released (moved)")
    # Parse the type before taking anything: a refused type leaves the capsule as it was.
    cdef const APArrowSchema* level = schema
    cdef list widths = []
    tensor = None
    cdef bytes fmt
    while True:
        if level == NULL or level.format == NULL:
            raise BufferError(f"{protocol}: a schema has no format")
        fmt = <bytes>level.format
        if level.dictionary != NULL:
            raise BufferError(f"{protocol}: dictionary-encoded arrays have no strided form")
        if level is schema and level.metadata != NULL:
            metadata = _arrow_metadata(level.metadata)
            if metadata.get(b"ARROW:extension:name") == _FIXED_SHAPE_TENSOR.encode():
                tensor = metadata
        if not fmt.startswith(b"+w:"):
            break
        try:
            width = int(fmt[3:])
        except ValueError:
            raise BufferError(f"{protocol}: {fmt.decode('utf-8', 'replace')!r} is not an "
                              f"Arrow format string") from None
        if width < 0 or level.n_children != 1 or level.children == NULL:
            raise BufferError(f"{protocol}: fixed-size list {fmt.decode()!r} needs one child "
                              f"and a width >= 0")
        widths.append(width)
        if len(widths) > _ARROW_MAX_DEPTH:
            raise BufferError(f"{protocol}: fixed-size lists nested deeper than "
                              f"{_ARROW_MAX_DEPTH}")
        level = level.children[0]
    item = _ARROW_ITEMS.get(fmt)
    if item is None:
        raise BufferError(f"{protocol}: "
                          f"{_formats.arrow_problem(fmt.decode('utf-8', 'replace'))}")
    cdef int code = item[0], bits = item[1]
    cdef int64_t itemsize = item[2]
    if level.n_children != 0:
        raise BufferError(f"{protocol}: primitive {fmt.decode()!r} has {level.n_children} "
                          f"children")
    if tensor is not None and len(widths) != 1:
        raise BufferError(f"{protocol}: {_FIXED_SHAPE_TENSOR} storage must be one "
                          f"fixed-size list")

    # Take the array: from here on the holder releases it, whatever happens.
    global _live_arrow_arrays
    cdef _ArrowArrayHolder holder = _ArrowArrayHolder.__new__(_ArrowArrayHolder)
    memcpy(&holder.array, moved_from, sizeof(APArrowArray))
    moved_from.release = NULL
    _live_arrow_arrays += 1

    # Walk the arrays down to the values, checking each level's nulls over the rows it
    # covers: rows [first, first + count) of the level, in its own element numbering.
    cdef const APArrowArray* a = &holder.array
    cdef int64_t first = a.offset, count = a.length, nulls, rows = a.length
    cdef Py_ssize_t depth
    for depth in range(len(widths)):
        _check_arrow_array(a, 1, 1, "fixed-size list")
        nulls = _arrow_nulls(a, first, count)
        if nulls:
            raise BufferError(_arrow_nulls_message(nulls, protocol))
        width = widths[depth]
        child = a.children[0]
        _check_arrow_array(child, 2 if depth == len(widths) - 1 else 1,
                           0 if depth == len(widths) - 1 else 1, "child")
        if width and (first + count) * width > child.length:
            raise BufferError(f"{protocol}: the child array holds {child.length} elements, "
                              f"its parent's rows reach {(first + count) * width}")
        first = child.offset + first * width
        count = count * width
        a = child
    if not widths:
        _check_arrow_array(a, 2, 0, "primitive")
    nulls = _arrow_nulls(a, first, count)
    if nulls:
        raise BufferError(_arrow_nulls_message(nulls, protocol))
    if count and a.buffers[1] == NULL:
        raise BufferError(f"{protocol}: the values buffer is NULL for {count} elements")

    cdef int64_t shape_c[AP_COPY_MAX_NDIM]
    cdef int64_t strides_c[AP_COPY_MAX_NDIM]      # in elements, as DLPack counts them
    cdef int ndim, i
    cdef int64_t step
    if tensor is not None:
        # "shape" is the physical (row-major) shape of each cell; logical dimension i is
        # physical dimension permutation[i] (the canonical extension's definition).
        physical_shape, permutation = _arrow_tensor_layout(tensor, widths[0])
        ndim = 1 + len(physical_shape)
        if ndim > AP_COPY_MAX_NDIM:
            raise BufferError(f"{protocol}: {ndim} dimensions; a View has at most {MAX_NDIM}")
        physical_strides = [0] * len(physical_shape)
        step = 1
        for i in reversed(range(len(physical_shape))):
            physical_strides[i] = step
            step *= max(physical_shape[i], 1)
        shape_c[0], strides_c[0] = rows, widths[0]
        for i in range(ndim - 1):
            shape_c[i + 1] = physical_shape[permutation[i]]
            strides_c[i + 1] = physical_strides[permutation[i]]
    else:
        ndim = 1 + len(widths)
        if ndim > AP_COPY_MAX_NDIM:
            raise BufferError(f"{protocol}: {ndim} dimensions; a View has at most {MAX_NDIM}")
        shape_c[0] = rows
        for i in range(ndim - 1):
            shape_c[i + 1] = widths[i]
        _fill_c_strides(ndim, shape_c, strides_c)
    cdef APDLTensor t
    t.data = <void*>(<uintptr_t>a.buffers[1] + <uintptr_t>(first * itemsize))
    t.device.device_type = APDL_CPU
    t.device.device_id = 0
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = shape_c
    t.strides = strides_c
    t.byte_offset = 0
    cdef View v = View.__new__(View)
    _adopt(v, &t, APDL_FLAG_READ_ONLY, False, protocol)   # validated as every import is
    v._owner = holder
    v._protocol = protocol
    _finish_import(v, holder)
    return v


cdef str _arrow_nulls_message(int64_t nulls, str protocol):
    return (f"{protocol}: the array has {nulls} null{'s' if nulls != 1 else ''}, which a "
            f"View cannot hold (it has no validity mask); fill them first (e.g. pyarrow's "
            f"pc.fill_null) or convert with a library that keeps a mask")


cdef View _view_from_arrow_capsules(object schema_capsule, object array_capsule,
                                    str protocol):
    if not PyCapsule_IsValid(schema_capsule, b"arrow_schema"):
        raise BufferError(f"{protocol}: expected an 'arrow_schema' capsule, got "
                          f"{type(schema_capsule).__name__}")
    if not PyCapsule_IsValid(array_capsule, b"arrow_array"):
        raise BufferError(f"{protocol}: expected an 'arrow_array' capsule, got "
                          f"{type(array_capsule).__name__}")
    return _view_from_arrow(
        <const APArrowSchema*>PyCapsule_GetPointer(schema_capsule, b"arrow_schema"),
        <APArrowArray*>PyCapsule_GetPointer(array_capsule, b"arrow_array"), protocol)


cdef View _view_from_arrow_protocol(object obj):
    """``obj.__arrow_c_array__()``'s array as a View (the Arrow PyCapsule protocol)."""
    try:
        pair = obj.__arrow_c_array__()
    except BufferError:
        raise
    except Exception as error:
        tp = type(obj)
        raise BufferError(f"arrow: {tp.__module__}.{tp.__qualname__}.__arrow_c_array__() "
                          f"failed: {type(error).__name__}: {error}") from error
    if type(pair) is not tuple or len(<tuple>pair) != 2:
        raise BufferError("arrow: __arrow_c_array__() must return (schema capsule, array "
                          "capsule)")
    return _view_from_arrow_capsules(pair[0], pair[1], "arrow")


def view_from_arrow(schema, array, /):
    """A read-only View of an Arrow array given as its two capsules ("arrow_schema",
    "arrow_array", as ``__arrow_c_array__()`` returns them). The array is moved out of its
    capsule and released exactly once, when the last View on it is gone."""
    return _view_from_arrow_capsules(schema, array, "arrow")


# ---- producer side: a View as an Arrow array (_csrc/arrow_export.h owns the structs) ---------
# A C-contiguous host View of shape (d0, ..., dn-1): a primitive array of d0 values (1-D) or
# nested fixed-size lists "+w:d1"... around d0 * ... * dn-1 values (n-D), sharing the View's
# memory; decided: plain nested lists, which every Arrow reader takes (the fixed_shape_tensor
# extension needs its reader to know it). Refused with BufferError, never exported wrong:
# device memory, 0-d Views, layouts that are not C-contiguous (copy first), and types with
# no Arrow fixed-width number (bool, complex, bfloat16, float8...). requested_schema is
# honoured when it is the schema arrayport exports, and otherwise ignored, as the PyCapsule
# interface allows (the consumer casts if it must).

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_Destructor, PyCapsule_New
from libc.stdlib cimport free, malloc

cdef extern from "_csrc/arrow_export.h":
    int ap_arrow_fill_schema(APArrowSchema* schema, const char* primitive, int lists,
                             const int64_t* widths)
    int ap_arrow_fill_array(APArrowArray* array, const void* data, int ndim,
                            const int64_t* shape, int64_t rows, PyObject* owner)
    void ap_arrow_schema_capsule_free(object capsule)
    void ap_arrow_array_capsule_free(object capsule)

# (code, bits) -> Arrow primitive format, from arrayport.formats (the one table).
cdef dict _ARROW_FORMAT_OF = {(int(dtype.code), dtype.bits): fmt.encode()
                              for fmt, dtype in _formats.ARROW_PRIMITIVES.items()}


cdef bytes _arrow_export_format(View v):
    """The primitive format of ``v``'s Arrow export, or a BufferError saying why none."""
    if not _host_accessible(v._t.device.device_type):
        raise BufferError(f"arrow: the View is in {v.device} memory; arrayport does not "
                          f"export the Arrow C device interface yet: copy it to the host "
                          f"first (view.copy(device='cpu'))")
    if v._t.ndim == 0:
        raise BufferError("arrow: a 0-d View has no Arrow form (an Arrow array is a "
                          "column); reshape it to (1,)")
    fmt = _ARROW_FORMAT_OF.get((v._t.dtype.code, v._t.dtype.bits)) \
        if v._t.dtype.lanes == 1 else None
    if fmt is None:
        raise BufferError(f"arrow: Arrow has no fixed-width number type for "
                          f"{v.dtype.name}")
    if not ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides):
        raise BufferError("arrow: an Arrow array is C-contiguous and this View is not; "
                          "export a copy (view.copy())")
    return fmt


cdef object _arrow_schema_capsule(View v, bytes fmt):
    cdef APArrowSchema* schema = <APArrowSchema*>malloc(sizeof(APArrowSchema))
    if schema == NULL:
        raise MemoryError()
    if ap_arrow_fill_schema(schema, fmt, v._t.ndim - 1, v._t.shape + 1) != 0:
        free(schema)
        raise MemoryError()
    try:
        return PyCapsule_New(schema, b"arrow_schema",
                             <PyCapsule_Destructor>ap_arrow_schema_capsule_free)
    except BaseException:
        schema.release(schema)
        free(schema)
        raise


cdef object _arrow_array_capsule(View v):
    cdef APArrowArray* array = <APArrowArray*>malloc(sizeof(APArrowArray))
    if array == NULL:
        raise MemoryError()
    cdef const void* data = <const void*>(<char*>v._t.data + v._t.byte_offset)
    if ap_arrow_fill_array(array, data, v._t.ndim, v._t.shape, v._t.shape[0],
                           <PyObject*>v) != 0:
        free(array)
        raise MemoryError()
    try:
        return PyCapsule_New(array, b"arrow_array",
                             <PyCapsule_Destructor>ap_arrow_array_capsule_free)
    except BaseException:
        array.release(array)
        free(array)
        raise


cdef object _view_arrow_schema(View v):
    return _arrow_schema_capsule(v, _arrow_export_format(v))


cdef tuple _view_arrow_array(View v, object requested_schema):
    fmt = _arrow_export_format(v)
    # arrayport exports one schema per View; a requested one is checked to be a schema and
    # then, matching or not, answered with that one (the interface allows it).
    if requested_schema is not None and not PyCapsule_IsValid(requested_schema,
                                                              b"arrow_schema"):
        raise TypeError("arrow: requested_schema must be an 'arrow_schema' capsule or None")
    return (_arrow_schema_capsule(v, fmt), _arrow_array_capsule(v))
