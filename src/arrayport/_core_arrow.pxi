# Included by _core.pyx. The Arrow C data and device interfaces, consumer side: an Arrow
# array — through the PyCapsule protocol (__arrow_c_array__, else or with a consumer stream
# __arrow_c_device_array__, else __arrow_c_stream__) or raw capsules — as a read-only View
# of its values, zero-copy (Arrow data is immutable).
#
# What maps (the schema's format; arrayport.formats owns the primitive table):
#   - a fixed-width number (c C s S i I l L e f g) -> a 1-D View, the array's offset applied;
#   - a fixed-size list "+w:N" of those, nested to any depth -> (rows, N, ...);
#   - the canonical extension arrow.fixed_shape_tensor (storage "+w:N") -> (rows, *shape),
#     its permutation read as strides;
#   - a struct of one column "+s" (a record batch or table of one column: what DuckDB and
#     Polars data frames give) -> that column; of several, refused (take one column).
# Refused with BufferError ("arrow: ..."): nulls (a View carries no validity mask: the
# message says how many and what to do), bit-packed booleans and every other layout
# without a strided form (formats.arrow_problem names it), dictionary-encoded arrays,
# malformed structs (negative lengths or offsets, NULL buffers or children, a child too
# short for its parent, a struct already released). The values buffer's size is not part of
# the C data interface: within the lengths given, the producer is trusted, as every Arrow
# consumer must.
#
# Devices: an ArrowDeviceArray's device type and id (DLPack's numbering) become the View's
# device; its sync event is handed to the stream-order owner (_core_streams.pxi), which makes
# the consumer's stream wait for it. Nulls in device memory cannot be counted on the host:
# a device array with an uncounted null count (-1) and a validity bitmap is refused. In
# pinned memory they are counted, once the host has waited for the sync event (the bitmap
# may still be being written). A positive null count without a bitmap is malformed (the C
# data interface allows NULL only with a null count of 0), refused on every device.
#
# Streams (__arrow_c_stream__): every array is read (get_next) and the stream released; one
# array with rows (empty ones are skipped) -> its View; none -> an empty View; several ->
# NeedsCopy, whose resolve() concatenates them into new host memory (the converters' one
# copy; arrayport.view never copies).
#
# Ownership: each array struct is moved out of its capsule (or stream) into an
# _ArrowArrayHolder (the View's owner), which calls its release callback exactly once, when
# the last View on it is gone; the schema is only read while parsing and stays in its
# capsule, whose destructor releases it (a stream's schema is released here). A failure
# after the move drops the holder: released once, all the same.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _adopt, _fill_c_strides
#   _core_dispatch.pxi: _check_host_stream
#   _core_host_copy.pxi: _copy_elements, _new_host_copy_of
#   _core_producers.pxi: _finish_import, NeedsCopy
#   _core_streams.pxi: _arrow_export_event, _arrow_sync_event, _host_wait_for_arrow_event,
#       _host_wait_for_pending, _order_arrow_device_import
#   _core_view.pxi: View

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport INT64_MAX

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
    ctypedef struct APArrowDeviceArray:
        APArrowArray array
        int64_t device_id
        int32_t device_type
        void* sync_event
    ctypedef struct APArrowArrayStream:
        int (*get_schema)(APArrowArrayStream*, APArrowSchema* out)
        int (*get_next)(APArrowArrayStream*, APArrowArray* out)
        const char* (*get_last_error)(APArrowArrayStream*)
        void (*release)(APArrowArrayStream*)
        void* private_data

# Nesting deeper than this is refused (a View has at most MAX_NDIM dimensions anyway).
cdef int _ARROW_MAX_DEPTH = 32
# Arrow's device numbers are DLPack's up to here (ARROW_DEVICE_HEXAGON); later DLPack kinds
# have no Arrow number (refused both ways).
cdef int32_t _ARROW_LAST_DEVICE_TYPE = 16
# The device id Arrow puts on devices without ids (the CPU), by convention.
cdef int64_t _ARROW_NO_DEVICE_ID = -1
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


def _json_object_without_repeats(pairs):
    """A JSON object whose keys are all different: readers disagree on which of two equal
    keys counts (Python's the last, Arrow C++'s the first), so such metadata is refused."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError(f"a key appears twice in {[key for key, _ in pairs]}")
    return result


cdef tuple _arrow_metadata_integers(described, str field, bint required):
    """The JSON list ``described[field]`` of an arrow.fixed_shape_tensor's metadata as a
    tuple of ints, read as Arrow's C++ reader does: integers only (no floats, booleans or
    strings), each within int64; None when absent and not ``required`` (present, it must
    be a list: ``null`` is refused)."""
    if field not in described and not required:
        return None
    value = described.get(field)
    if type(value) is not list:
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata: {field!r} must be a list "
                          f"of integers, got {type(value).__name__}")
    for n in value:
        if type(n) is not int or not 0 <= n <= INT64_MAX:
            raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata: {field!r} holds "
                              f"{n!r}, not an integer from 0 to 2**63 - 1")
    return tuple(value)


cdef tuple _arrow_tensor_layout(dict metadata, Py_ssize_t width):
    """(shape, permutation) of an arrow.fixed_shape_tensor's cells, from its metadata;
    a BufferError naming the field for anything else."""
    import json
    try:
        described = json.loads(metadata.get(b"ARROW:extension:metadata", b"{}"),
                               object_pairs_hook=_json_object_without_repeats)
    except (ValueError, RecursionError) as error:   # RecursionError: "[[[[..." nested deep
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata cannot be read as JSON: "
                          f"{type(error).__name__}: {str(error)[:200]}") from None
    if type(described) is not dict:
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata must be a JSON object, "
                          f"got {type(described).__name__}")
    shape = _arrow_metadata_integers(described, "shape", True)
    permutation = _arrow_metadata_integers(described, "permutation", False)
    names = described.get("dim_names", [""] * len(shape))
    if type(names) is not list or len(names) != len(shape) \
            or any(type(name) is not str for name in names):
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata: 'dim_names' must be a list "
                          f"of {len(shape)} strings, got {names!r:.200}")
    if permutation is None:
        permutation = tuple(range(len(shape)))
    cells, span = 1, 1               # Python ints: products past int64 are refused, not lost
    for n in shape:
        cells *= n
        span *= max(n, 1)            # the strides of the cells' row-major layout reach this
    if cells != width or sorted(permutation) != list(range(len(shape))):
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} shape {shape} / permutation "
                          f"{permutation} does not fit lists of {width}")
    if span > INT64_MAX:             # empty cells (a 0 in the shape) beside huge extents
        raise BufferError(f"arrow: {_FIXED_SHAPE_TENSOR} metadata: 'shape' {shape} spans more "
                          f"elements than 64 bits count")
    return shape, permutation


cdef inline bint _arrow_bitmap_counts(const APArrowArray* a, int64_t count) noexcept:
    """Whether ``a``'s nulls over ``count`` elements can only be known by reading its
    validity bitmap (a bitmap, a null count that is not 0, elements to cover)."""
    return a.n_buffers >= 1 and a.buffers[0] != NULL and a.null_count != 0 and count != 0


cdef Py_ssize_t _arrow_list_width(bytes fmt, str protocol) except -1:
    """The width N of the fixed-size list format "+w:N", parsed as Arrow's C readers do:
    decimal digits only (no sign, space or underscore), within int32 (Arrow's list sizes)."""
    digits = fmt[3:]
    if not digits or not digits.isdigit():          # bytes.isdigit: ASCII digits only
        raise BufferError(f"{protocol}: {fmt.decode('utf-8', 'replace')!r} is not an Arrow "
                          f"format string (a fixed-size list is '+w:' and decimal digits)")
    digits = digits.lstrip(b"0") or b"0"            # leading zeros: the number C reads
    if len(digits) > 10 or int(digits) > 0x7fffffff:
        raise BufferError(f"{protocol}: fixed-size list {fmt.decode()!r}: the width is out of "
                          f"range (Arrow's list sizes are 32-bit)")
    return int(digits)


cdef int64_t _arrow_nulls(const APArrowArray* a, int64_t first, int64_t count) except -1:
    """Nulls among elements [first, first + count) of ``a``'s validity bitmap (offset
    applied by the caller), counting the bits when the producer did not."""
    if not _arrow_bitmap_counts(a, count):
        return 0
    cdef const uint8_t* bits = <const uint8_t*>a.buffers[0]
    cdef int64_t nulls = 0, i
    for i in range(first, first + count):
        if not (bits[i >> 3] >> (i & 7)) & 1:
            nulls += 1
    return nulls


cdef int _check_arrow_struct(const APArrowArray* a, str what) except -1:
    """What every ArrowArray must be, whatever its type: there, not released, lengths,
    offsets and null count in range, its buffers and children where it counts some."""
    if a == NULL:
        raise BufferError(f"arrow: the {what} array is NULL")
    if a.release == NULL:
        raise BufferError(f"arrow: the {what} array was already released (or moved)")
    if a.length < 0 or a.offset < 0 or a.null_count < -1:
        raise BufferError(f"arrow: the {what} array has length {a.length}, offset "
                          f"{a.offset}, null count {a.null_count}")
    if a.n_buffers < 0 or (a.n_buffers and a.buffers == NULL):
        raise BufferError(f"arrow: the {what} array counts {a.n_buffers} buffers and its "
                          f"buffers are NULL" if a.n_buffers > 0 else
                          f"arrow: the {what} array counts {a.n_buffers} buffers")
    if a.n_children < 0 or (a.n_children and a.children == NULL):
        raise BufferError(f"arrow: the {what} array counts {a.n_children} children and its "
                          f"children are NULL" if a.n_children > 0 else
                          f"arrow: the {what} array counts {a.n_children} children")
    return 0


cdef int _check_arrow_array(const APArrowArray* a, Py_ssize_t buffers, Py_ssize_t children,
                            str what) except -1:
    _check_arrow_struct(a, what)
    if a.n_buffers != buffers:
        raise BufferError(f"arrow: the {what} array has {a.n_buffers} buffers, its type "
                          f"has {buffers}")
    if a.n_children != children:
        raise BufferError(f"arrow: the {what} array has {a.n_children} children, its type "
                          f"has {children}")
    if a.dictionary != NULL:
        raise BufferError("arrow: dictionary-encoded arrays have no strided form")
    return 0


class _ArrowTableDeferred(BufferError):
    """A table offered through Arrow by an object that also has __array__: not a refusal,
    arrayport.view asks __array__ instead (the dispatch does not report it)."""


@cython.final
cdef class _ArrowLayout:
    """What a schema says of the arrays it describes, parsed once: the levels above the
    values (a fixed-size list's width, or -1 for a one-column struct, which adds no
    dimension), the fixed_shape_tensor metadata (None: none), the values' type."""

    cdef list levels
    cdef object tensor
    cdef int code, bits
    cdef int64_t itemsize


cdef _ArrowLayout _arrow_layout(const APArrowSchema* schema, str protocol,
                               bint tables=True):
    """``schema`` parsed, or a BufferError saying why it has no strided form. Reads the
    schema only: a refused type leaves every capsule as it was. ``tables``: a struct of one
    column is that column (else refused: arrayport.view asks an object that also has
    __array__ for its array, whose shape a table's column is not)."""
    if schema == NULL or schema.release == NULL:
        raise BufferError(f"{protocol}: the schema is NULL or was already released")
    cdef _ArrowLayout layout = _ArrowLayout.__new__(_ArrowLayout)
    layout.levels = []
    cdef const APArrowSchema* level = schema
    cdef bytes fmt
    cdef Py_ssize_t lists = 0
    while True:
        if level == NULL or level.format == NULL:
            raise BufferError(f"{protocol}: a schema has no format")
        fmt = <bytes>level.format
        if level.dictionary != NULL:
            raise BufferError(f"{protocol}: dictionary-encoded arrays have no strided form")
        if fmt == b"+s":
            if not tables:
                raise _ArrowTableDeferred(f"{protocol}: a table (struct of "
                                          f"{level.n_children} columns) is read as its array "
                                          f"through __array__; arrayport.View.from_arrow "
                                          f"reads a one-column table's column")
            if level.n_children != 1 or level.children == NULL:
                raise BufferError(f"{protocol}: a struct (record batch) of {level.n_children} "
                                  f"columns has no strided form; take one column (pyarrow: "
                                  f"table.column(name), Polars: df[name])")
            layout.levels.append(-1)
        elif lists == 0 and layout.tensor is None and level.metadata != NULL:
            metadata = _arrow_metadata(level.metadata)
            if metadata.get(b"ARROW:extension:name") == _FIXED_SHAPE_TENSOR.encode():
                layout.tensor = metadata
        if fmt.startswith(b"+w:"):
            width = _arrow_list_width(fmt, protocol)
            if level.n_children != 1 or level.children == NULL:
                raise BufferError(f"{protocol}: fixed-size list {fmt.decode()!r} needs one "
                                  f"child")
            layout.levels.append(width)
            lists += 1
        elif fmt != b"+s":
            break
        if len(layout.levels) > _ARROW_MAX_DEPTH:
            raise BufferError(f"{protocol}: nested deeper than {_ARROW_MAX_DEPTH} levels")
        level = level.children[0]
    item = _ARROW_ITEMS.get(fmt)
    if item is None:
        raise BufferError(f"{protocol}: "
                          f"{_formats.arrow_problem(fmt.decode('utf-8', 'replace'))}")
    layout.code, layout.bits, layout.itemsize = item
    if level.n_children != 0:
        raise BufferError(f"{protocol}: primitive {fmt.decode()!r} has {level.n_children} "
                          f"children")
    if layout.tensor is not None and lists != 1:
        raise BufferError(f"{protocol}: {_FIXED_SHAPE_TENSOR} storage must be one "
                          f"fixed-size list")
    return layout


cdef int _arrow_shape(_ArrowLayout layout, int64_t rows, int64_t* shape_c,
                      int64_t* strides_c, str protocol) except -1:
    """Fill the View's shape and strides (in elements) for ``rows`` rows of ``layout``;
    return the number of dimensions."""
    cdef int ndim, i
    cdef int64_t step
    if not layout.levels:                     # a primitive array: the common case
        shape_c[0], strides_c[0] = rows, 1
        return 1
    widths = [w for w in layout.levels if w >= 0]
    if layout.tensor is not None:
        # "shape" is the physical (row-major) shape of each cell; logical dimension i is
        # physical dimension permutation[i] (the canonical extension's definition).
        physical_shape, permutation = _arrow_tensor_layout(layout.tensor, widths[0])
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
        return ndim
    ndim = 1 + len(widths)
    if ndim > AP_COPY_MAX_NDIM:
        raise BufferError(f"{protocol}: {ndim} dimensions; a View has at most {MAX_NDIM}")
    shape_c[0] = rows
    for i in range(ndim - 1):
        shape_c[i + 1] = widths[i]
    _fill_c_strides(ndim, shape_c, strides_c)
    return ndim


cdef View _arrow_layout_view(_ArrowLayout layout, const void* values, int64_t rows,
                             int32_t device_type, int64_t device_id, object owner,
                             str protocol):
    """The read-only View of ``rows`` rows of ``layout`` whose values start at ``values``,
    kept alive by ``owner``."""
    cdef int64_t shape_c[AP_COPY_MAX_NDIM]
    cdef int64_t strides_c[AP_COPY_MAX_NDIM]
    cdef APDLTensor t
    t.ndim = _arrow_shape(layout, rows, shape_c, strides_c, protocol)
    t.data = <void*>values
    t.device.device_type = device_type
    t.device.device_id = <int32_t>device_id
    t.dtype.code, t.dtype.bits, t.dtype.lanes = layout.code, layout.bits, 1
    t.shape = shape_c
    t.strides = strides_c
    t.byte_offset = 0
    cdef View v = View.__new__(View)
    _adopt(v, &t, APDL_FLAG_READ_ONLY, False, protocol)   # validated as every import is
    v._owner = owner
    v._protocol = protocol
    _finish_import(v, owner)
    return v


cdef View _view_from_arrow(_ArrowLayout layout, APArrowArray* moved_from,
                           int32_t device_type, int64_t device_id, str protocol,
                           uintptr_t sync_event=0):
    """A read-only View of the Arrow array ``moved_from`` (moved out: its release set to
    NULL) of ``layout``, in ``device_type`` memory. The array's buffers live as long as
    the array (its release callback owns them): the holder is the View's owner.
    ``sync_event`` (0: none): the producer's event, still pending perhaps — waited for on
    the host before a host-accessible validity bitmap is counted."""
    if moved_from == NULL or moved_from.release == NULL:
        raise BufferError(f"{protocol}: the array is NULL or was already released (moved)")
    if device_id == _ARROW_NO_DEVICE_ID and device_type == APDL_CPU:
        device_id = 0
    if device_id < 0 or device_id > 0x7fffffff:
        raise BufferError(f"{protocol}: device id {device_id} is out of range")
    # Take the array: from here on the holder releases it, whatever happens.
    global _live_arrow_arrays
    cdef _ArrowArrayHolder holder = _ArrowArrayHolder.__new__(_ArrowArrayHolder)
    memcpy(&holder.array, moved_from, sizeof(APArrowArray))
    moved_from.release = NULL
    _live_arrow_arrays += 1
    cdef bint on_host = _host_accessible(device_type)

    # Walk the arrays down to the values, checking each level's nulls over the rows it
    # covers: rows [first, first + count) of the level, in its own element numbering. A
    # struct's column is indexed as a list of width 1 is (the struct's offset applies).
    cdef const APArrowArray* a = &holder.array
    cdef const APArrowArray* child
    cdef int64_t first = a.offset, count = a.length, rows = a.length, width
    cdef Py_ssize_t depth, levels = len(layout.levels)
    for depth in range(levels):
        kind = "struct" if layout.levels[depth] < 0 else "fixed-size list"
        _check_arrow_array(a, 1, 1, kind)
        width = layout.levels[depth] if layout.levels[depth] >= 0 else 1
        child = a.children[0]
        _check_arrow_array(child, 2 if depth == levels - 1 else 1,
                           0 if depth == levels - 1 else 1, "child")
        # The rows must fit their child before this level's bitmap is read over them.
        if _arrow_end(first, count, width, protocol) > child.length and width:
            raise BufferError(f"{protocol}: the child array holds {child.length} elements, "
                              f"its parent's rows reach {(first + count) * width}")
        sync_event = _before_bitmap_read(a, count, on_host, device_type, device_id,
                                         sync_event)
        _refuse_arrow_nulls(a, first, count, on_host, protocol)
        _arrow_end(child.offset, first * width, 1, protocol)
        first = child.offset + first * width
        count = count * width
        a = child
    if not levels:
        _check_arrow_array(a, 2, 0, "primitive")
    _arrow_end(first, count, layout.itemsize, protocol)   # the values' bytes: no overflow
    _before_bitmap_read(a, count, on_host, device_type, device_id, sync_event)
    _refuse_arrow_nulls(a, first, count, on_host, protocol)
    if count and a.buffers[1] == NULL:
        raise BufferError(f"{protocol}: the values buffer is NULL for {count} elements")
    return _arrow_layout_view(
        layout, <const void*>(<uintptr_t>a.buffers[1] + <uintptr_t>(first * layout.itemsize)),
        rows, device_type, device_id, holder, protocol)


cdef int64_t _arrow_end(int64_t first, int64_t count, int64_t width,
                        str protocol) except -1:
    """(first + count) * width, the end of a level's rows in its child's (or bytes')
    numbering; a BufferError when it overflows (lengths and offsets no buffer can hold)."""
    if count > INT64_MAX - first or (width and first + count > INT64_MAX // width):
        raise BufferError(f"{protocol}: offset {first} and length {count} reach past any "
                          f"buffer (the sizes overflow)")
    return (first + count) * width


cdef uintptr_t _before_bitmap_read(const APArrowArray* a, int64_t count, bint on_host,
                                  int32_t device_type, int64_t device_id,
                                  uintptr_t sync_event) except? 1:
    """The host waits for the producer's ``sync_event`` before counting a validity bitmap
    in host-accessible (pinned) memory the GPU may still be writing; returns the event
    left to wait for (0 once waited: one wait per import)."""
    if sync_event == 0 or not on_host or not _arrow_bitmap_counts(a, count):
        return sync_event       # nothing to wait for, or no bitmap read
    _host_wait_for_arrow_event(device_type, <int32_t>device_id, sync_event)
    return 0


cdef object _nulls_refusal(str message):
    """The refusal of data that holds nulls, which no View can carry: a plain BufferError
    (what users catch), marked ``holds_nulls`` — the one refusal of an Arrow column's reader
    that stands over its ``__array__``'s copy (which would turn them into NaN); other
    refusals (a type with no strided form) leave that copy to speak (_core_dispatch.pxi)."""
    refusal = BufferError(message)
    refusal.holds_nulls = True
    return refusal


cdef inline bint _holds_nulls(refusal):
    return getattr(refusal, "holds_nulls", False) is True


cdef int64_t _arrow_null_count(const APArrowArray* a, int64_t first, int64_t count,
                               str protocol) except -1:
    """Nulls among elements [first, first + count) of host array ``a``, by the C data
    interface's rules: its validity bitmap, counted where the producer did not (-1); none
    without one — unless ``a`` has no buffers at all (the null type: its null count is
    every element's), while an array with buffers that claims nulls and has no bitmap is
    malformed (NULL is allowed only with a null count of 0)."""
    if a.null_count > 0 and (a.n_buffers < 1 or a.buffers[0] == NULL):
        if a.n_buffers == 0:
            return min(a.null_count, count)
        raise BufferError(f"{protocol}: the array claims {a.null_count} null"
                          f"{'s' if a.null_count != 1 else ''} and has no validity bitmap "
                          f"(NULL is allowed only with a null count of 0): malformed")
    return _arrow_nulls(a, first, count)


cdef int _refuse_arrow_nulls(const APArrowArray* a, int64_t first, int64_t count,
                             bint on_host, str protocol) except -1:
    """_nulls_refusal when elements [first, first + count) of ``a`` hold a null (the bitmap
    is read only in host memory: elsewhere an uncounted null count is refused); a
    BufferError when ``a`` is malformed (_arrow_null_count)."""
    cdef int64_t nulls
    if not on_host:
        if a.null_count > 0 and (a.n_buffers < 1 or a.buffers[0] == NULL):
            _arrow_null_count(a, first, count, protocol)        # malformed: refused
        if a.null_count != 0 and a.buffers[0] != NULL and count:
            if a.null_count > 0:
                raise _nulls_refusal(_arrow_nulls_message(a.null_count, protocol))
            raise _nulls_refusal(f"{protocol}: a device array with a validity bitmap and no "
                              f"null count; arrayport cannot count its nulls on the host")
        return 0
    nulls = _arrow_null_count(a, first, count, protocol)
    if nulls:
        raise _nulls_refusal(_arrow_nulls_message(nulls, protocol))
    return 0


cdef str _arrow_nulls_message(int64_t nulls, str protocol):
    return (f"{protocol}: the array has {nulls} null{'s' if nulls != 1 else ''}, which a "
            f"View cannot hold (it has no validity mask); fill them first (e.g. pyarrow's "
            f"pc.fill_null) or convert with a library that keeps a mask")


cdef View _view_from_arrow_capsules(object schema_capsule, object array_capsule,
                                    str protocol, bint tables=True):
    if not PyCapsule_IsValid(schema_capsule, b"arrow_schema"):
        raise BufferError(f"{protocol}: expected an 'arrow_schema' capsule, got "
                          f"{type(schema_capsule).__name__}")
    if not PyCapsule_IsValid(array_capsule, b"arrow_array"):
        raise BufferError(f"{protocol}: expected an 'arrow_array' capsule, got "
                          f"{type(array_capsule).__name__}")
    cdef const APArrowSchema* schema = <const APArrowSchema*>PyCapsule_GetPointer(
        schema_capsule, b"arrow_schema")
    cdef APArrowArray* array = <APArrowArray*>PyCapsule_GetPointer(array_capsule,
                                                                 b"arrow_array")
    try:
        layout = _arrow_layout(schema, protocol, tables)
    except _ArrowTableDeferred:
        _refuse_nulls_before_array(array, schema, protocol)   # read in place, not moved
        raise
    return _view_from_arrow(layout, array, APDL_CPU, 0, protocol)


cdef View _view_from_arrow_device_capsules(object schema_capsule, object array_capsule,
                                           object stream, str protocol, bint tables=True):
    """An "arrow_device_array" capsule's array as a View on its device; the consumer's
    ``stream`` (DLPack's values; None: the default stream) waits for its sync event."""
    if not PyCapsule_IsValid(schema_capsule, b"arrow_schema"):
        raise BufferError(f"{protocol}: expected an 'arrow_schema' capsule, got "
                          f"{type(schema_capsule).__name__}")
    if not PyCapsule_IsValid(array_capsule, b"arrow_device_array"):
        raise BufferError(f"{protocol}: expected an 'arrow_device_array' capsule, got "
                          f"{type(array_capsule).__name__}")
    cdef APArrowDeviceArray* device_array = <APArrowDeviceArray*>PyCapsule_GetPointer(
        array_capsule, b"arrow_device_array")
    cdef int32_t device_type = device_array.device_type
    if device_type < 1 or device_type > _ARROW_LAST_DEVICE_TYPE:
        raise BufferError(f"{protocol}: device type {device_type} is not one Arrow defines "
                          f"(1 to {_ARROW_LAST_DEVICE_TYPE})")
    stream = check_stream(stream, device_type)
    layout = _arrow_layout(
        <const APArrowSchema*>PyCapsule_GetPointer(schema_capsule, b"arrow_schema"), protocol,
        tables)
    cdef uintptr_t event = 0
    if device_array.array.release != NULL:     # read before the move: the producer's struct
        event = _arrow_sync_event(device_type, device_array.sync_event, protocol)
    cdef View v = _view_from_arrow(layout, &device_array.array, device_type,
                                   device_array.device_id, protocol, event)
    _order_arrow_device_import(v, event, stream)
    return v


cdef View _view_from_arrow_stream_capsule(object capsule, str protocol, bint tables=True):
    """An "arrow_array_stream" capsule's arrays as one View: the array with rows (an empty
    View when there is none), or NeedsCopy (several) whose resolve() concatenates them
    (the converters' one copy, flagged ``is_copy``)."""
    if not PyCapsule_IsValid(capsule, b"arrow_array_stream"):
        raise BufferError(f"{protocol}: expected an 'arrow_array_stream' capsule, got "
                          f"{type(capsule).__name__}")
    cdef APArrowArrayStream* source = <APArrowArrayStream*>PyCapsule_GetPointer(
        capsule, b"arrow_array_stream")
    if source.release == NULL:
        raise BufferError(f"{protocol}: the stream was already released (or moved)")
    cdef APArrowArrayStream stream
    memcpy(&stream, source, sizeof(APArrowArrayStream))
    source.release = NULL
    cdef APArrowSchema schema
    cdef APArrowArray array
    schema.release = NULL
    array.release = NULL
    chunks = []
    try:
        _arrow_stream_call(&stream, stream.get_schema(&stream, &schema), "get_schema",
                           protocol)
        try:
            layout = _arrow_layout(&schema, protocol, tables)
        except BufferError:
            # A table left to __array__, or (from arrayport.view, where the object has
            # __array__: not ``tables``) a column type with no strided form, which its
            # __array__ may still copy: not if that copy would make NaN of its nulls.
            if not tables:
                _refuse_stream_nulls(&stream, &schema, protocol)
            raise
        while True:
            array.release = NULL
            _arrow_stream_call(&stream, stream.get_next(&stream, &array), "get_next",
                               protocol)
            if array.release == NULL:
                break                                   # the end of the stream
            if array.length == 0:
                array.release(&array)                   # nothing to keep
                continue
            chunks.append(_view_from_arrow(layout, &array, APDL_CPU, 0, protocol))
    finally:
        if array.release != NULL:                       # a get_next answer not taken
            array.release(&array)
        if schema.release != NULL:
            schema.release(&schema)
        stream.release(&stream)
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return _arrow_layout_view(layout, <const void*>_ARROW_NO_VALUES, 0, APDL_CPU, 0,
                                  None, protocol)
    rows = sum(chunk.shape[0] for chunk in chunks)
    raise NeedsCopy(f"{protocol}: the stream holds {len(chunks)} arrays ({rows} rows); a "
                    f"View is one block of memory, so joining them is a copy (the "
                    f"converters make it: ap.to_numpy, ap.to(x, ...) with copy allowed)",
                    lambda: _arrow_concatenated(chunks))


cdef char _ARROW_NO_VALUES[8]          # the address of an empty stream's (empty) values


cdef int _refuse_stream_nulls(APArrowArrayStream* stream, const APArrowSchema* schema,
                              str protocol) except -1:
    """_refuse_nulls_before_array for each of the stream's arrays (each released here)."""
    cdef APArrowArray array
    array.release = NULL
    try:
        while True:
            array.release = NULL
            _arrow_stream_call(stream, stream.get_next(stream, &array), "get_next", protocol)
            if array.release == NULL:
                return 0                                # the end: no null anywhere
            _refuse_nulls_before_array(&array, schema, protocol)
            array.release(&array)
    finally:
        if array.release != NULL:
            array.release(&array)


cdef int _refuse_nulls_before_array(const APArrowArray* array, const APArrowSchema* schema,
                                    str protocol) except -1:
    """Before an Arrow object is left to its ``__array__`` — NumPy's reading, which turns a
    null into NaN and an integer column into floats, silently — _nulls_refusal naming what
    holds a null (host memory, nothing moved): a table's (a struct's) first column with one
    (a row null as a whole counts for every column), or the column ``array`` itself."""
    cdef const APArrowArray* column
    cdef int64_t i, nulls
    if schema == NULL or schema.format == NULL or <bytes>schema.format != b"+s":
        _check_arrow_struct(array, "column's")
        nulls = _arrow_column_nulls(array, schema, array.offset, array.length, protocol)
        if nulls:
            raise _nulls_refusal(_arrow_nulls_message(nulls, protocol))
        return 0
    _check_arrow_struct(array, "table's")
    if array.n_children != schema.n_children or (schema.n_children and schema.children == NULL):
        raise BufferError(f"{protocol}: the table has {array.n_children} columns, its "
                          f"schema {schema.n_children}")
    nulls = _arrow_null_count(array, array.offset, array.length, protocol)
    for i in range(array.n_children):
        column = array.children[i]
        _check_arrow_struct(column, "column's")
        if array.offset > column.length or array.length > column.length - array.offset:
            raise BufferError(f"{protocol}: column {i} of the table is shorter than the "
                              f"table")
        nulls += _arrow_column_nulls(column, schema.children[i], column.offset + array.offset,
                                     array.length, protocol)
        if nulls:
            name = schema.children[i].name if schema.children[i] != NULL \
                and schema.children[i].name != NULL else b"?"
            raise _nulls_refusal(
                f"{protocol}: column {(<bytes>name).decode('utf-8', 'replace')!r} of the "
                f"table holds {nulls} null{'s' if nulls != 1 else ''}; reading the table as "
                f"one array (its __array__, as NumPy does) would turn them into NaN and "
                f"integers into floats, so it is refused: fill them first (e.g. pyarrow's "
                f"pc.fill_null) or take the columns one by one")
    return 0


cdef int64_t _arrow_column_nulls(const APArrowArray* column, const APArrowSchema* schema,
                                 int64_t first, int64_t count, str protocol) except -1:
    """Nulls among elements [first, first + count) of a column of any type, as its values
    read: its own validity bitmap (_arrow_null_count), and, where its values live in
    another array, that array's nulls — a dictionary's (any null entry counts: an index may
    name it) and a run-end encoded column's values ("+r": its second child's)."""
    cdef int64_t nulls = _arrow_null_count(column, first, count, protocol)
    cdef const APArrowArray* values = NULL
    if column.dictionary != NULL:
        values = column.dictionary
    elif schema != NULL and schema.format != NULL and <bytes>schema.format == b"+r" \
            and column.n_children == 2:
        values = column.children[1]
    if values != NULL:
        _check_arrow_struct(values, "column's values")
        nulls += _arrow_null_count(values, values.offset, values.length, protocol)
    return nulls


cdef int _arrow_stream_call(APArrowArrayStream* stream, int status, str call,
                            str protocol) except -1:
    if status == 0:
        return 0
    cdef const char* message = stream.get_last_error(stream) \
        if stream.get_last_error != NULL else NULL
    detail = (<bytes>message).decode("utf-8", "replace") if message != NULL else \
        _os.strerror(status)
    raise BufferError(f"{protocol}: the stream's {call} failed ({status}): {detail}")


cdef View _arrow_concatenated(list chunks):
    """The stream's arrays one after another in new host memory: the one copy."""
    cdef View first = chunks[0]
    cdef int64_t rows = 0
    cdef View chunk
    for chunk in chunks:
        rows += chunk._t.shape[0]
    cdef View v = _new_host_copy_of(first, 0, rows)
    cdef char* at = <char*>v._t.data
    for chunk in chunks:
        _copy_elements(chunk, at)
        at += chunk._nbytes
    return v


cdef View _view_from_arrow_protocol(object obj, object stream, bint tables=True):
    """A View of ``obj`` through the Arrow PyCapsule protocol: its array (the C data
    interface: host memory, and the cheaper export — pyarrow's by ~200 ns) when no stream
    is named, else, or when the producer cannot export one (device data), its device array
    (DLPack's stream rules: the consumer's ``stream`` waits for the sync event); else, or
    when the producer cannot export one array (nanoarrow's Array of several chunks), its
    stream (several arrays: NeedsCopy). ``tables``: see _arrow_layout."""
    tp = type(obj)
    cdef bint device = getattr(tp, "__arrow_c_device_array__", None) is not None
    cdef bint has_stream = getattr(tp, "__arrow_c_stream__", None) is not None
    if getattr(tp, "__arrow_c_array__", None) is not None and (stream is None or not device):
        _check_host_stream(stream, "arrow")
        try:
            pair = _arrow_call(obj, "__arrow_c_array__")
        except BufferError as failure:
            if not device and not has_stream:
                raise
            if not device:               # one array it cannot make: its stream may do
                return _view_from_arrow_stream_after(obj, failure, tables)
            pair = None                  # not host data, perhaps: the device array says
        if pair is not None:
            if type(pair) is not tuple or len(<tuple>pair) != 2:
                raise BufferError("arrow: __arrow_c_array__() must return (schema capsule, "
                                  "array capsule)")
            return _view_from_arrow_capsules(pair[0], pair[1], "arrow", tables)
    if device:
        pair = _arrow_call(obj, "__arrow_c_device_array__")
        if type(pair) is not tuple or len(<tuple>pair) != 2:
            raise BufferError("arrow: __arrow_c_device_array__() must return (schema "
                              "capsule, device array capsule)")
        return _view_from_arrow_device_capsules(pair[0], pair[1], stream, "arrow", tables)
    _check_host_stream(stream, "arrow")
    return _view_from_arrow_stream_capsule(_arrow_call(obj, "__arrow_c_stream__"), "arrow",
                                           tables)


cdef View _view_from_arrow_stream_after(object obj, object failure, bint tables):
    """``obj``'s Arrow stream, read because its ``__arrow_c_array__()`` failed
    (``failure``); when the stream fails too, a BufferError with both reasons."""
    try:
        return _view_from_arrow_stream_capsule(_arrow_call(obj, "__arrow_c_stream__"),
                                               "arrow", tables)
    except (NeedsCopy, _ArrowTableDeferred):
        raise                            # the stream's answer (its arrays joined by a copy)
    except BufferError as error:
        if _holds_nulls(error):
            raise
        raise BufferError(f"{error}; before it, {failure}") from failure


cdef object _arrow_call(object obj, str method):
    """``obj.<method>()``; a producer's failure as a BufferError naming it."""
    try:
        return getattr(obj, method)()
    except BufferError:
        raise
    except Exception as error:
        tp = type(obj)
        raise BufferError(f"arrow: {tp.__module__}.{tp.__qualname__}.{method}() failed: "
                          f"{type(error).__name__}: {error}") from error


cdef View _view_from_arrow_given(tuple capsules, object stream):
    """A View from capsules as the PyCapsule protocol returns them: (schema, array),
    (schema, device array) or (stream,)."""
    if len(capsules) == 1:
        _check_host_stream(stream, "arrow")
        return _view_from_arrow_stream_capsule(capsules[0], "arrow")
    if len(capsules) != 2:
        raise TypeError(f"arrow: expected one stream capsule or (schema, array) capsules, "
                        f"got {len(capsules)}")
    if PyCapsule_IsValid(capsules[1], b"arrow_device_array"):
        return _view_from_arrow_device_capsules(capsules[0], capsules[1], stream, "arrow")
    _check_host_stream(stream, "arrow")
    return _view_from_arrow_capsules(capsules[0], capsules[1], "arrow")


def view_from_arrow(*capsules, stream=None):
    """A read-only View of an Arrow array given as capsules: ("arrow_schema",
    "arrow_array") or ("arrow_schema", "arrow_device_array") as the PyCapsule protocol
    returns them, or one "arrow_array_stream". Each array is moved out of its capsule and
    released exactly once, when the last View on it is gone."""
    return _view_from_arrow_given(capsules, stream)


# ---- producer side: a View as an Arrow array (_csrc/arrow_export.h owns the structs) ---------
# A C-contiguous View of shape (d0, ..., dn-1): a primitive array of d0 values (1-D) or
# nested fixed-size lists "+w:d1"... around d0 * ... * dn-1 values (n-D), sharing the View's
# memory; decided: plain nested lists, which every Arrow reader takes (the fixed_shape_tensor
# extension needs its reader to know it). Three forms: __arrow_c_array__ (host memory
# only, as the C data interface is), __arrow_c_device_array__ (any device Arrow numbers; a
# sync event when work is pending) and __arrow_c_stream__ (host; one array). Refused with
# BufferError, never exported wrong: 0-d Views, layouts that are not C-contiguous (copy
# first), and types with no Arrow fixed-width number (bool, complex, bfloat16, float8...).
# requested_schema is checked to be a schema capsule and otherwise ignored: the export is
# the View's one schema, as the PyCapsule interface allows (the consumer casts if it must).

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_Destructor, PyCapsule_New
from libc.stdlib cimport calloc, free, malloc

cdef extern from "_csrc/arrow_export.h":
    int ap_arrow_fill_schema(APArrowSchema* schema, const char* primitive, int lists,
                             const int64_t* widths)
    int ap_arrow_fill_array(APArrowArray* array, const void* data, int ndim,
                            const int64_t* shape, int64_t rows, PyObject* owner)
    int ap_arrow_fill_stream(APArrowArrayStream* stream, const char* primitive, int lists,
                             const int64_t* widths, const void* data, int ndim,
                             const int64_t* shape, int64_t rows, PyObject* owner)
    void ap_arrow_schema_capsule_free(object capsule)
    void ap_arrow_array_capsule_free(object capsule)
    void ap_arrow_device_array_capsule_free(object capsule)
    void ap_arrow_stream_capsule_free(object capsule)

# (code, bits) -> Arrow primitive format, from arrayport.formats (the one table).
cdef dict _ARROW_FORMAT_OF = {(int(dtype.code), dtype.bits): fmt.encode()
                              for fmt, dtype in _formats.ARROW_PRIMITIVES.items()}


cdef bytes _arrow_export_format(View v, bint device_interface):
    """The primitive format of ``v``'s Arrow export, or a BufferError saying why none."""
    if not device_interface and not _host_accessible(v._t.device.device_type):
        raise BufferError(f"arrow: the View is in {v.device} memory, and the Arrow C data "
                          f"interface describes host memory: use __arrow_c_device_array__ "
                          f"(the device interface), or copy it to the host first "
                          f"(view.copy(device='cpu'))")
    if v._t.device.device_type > _ARROW_LAST_DEVICE_TYPE:
        raise BufferError(f"arrow: Arrow has no device number for {v.device.type.label} "
                          f"memory")
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


cdef int _check_requested_schema(object requested_schema) except -1:
    if requested_schema is not None and not PyCapsule_IsValid(requested_schema,
                                                              b"arrow_schema"):
        raise TypeError("arrow: requested_schema must be an 'arrow_schema' capsule or None")
    return 0


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


cdef inline const void* _arrow_values(View v):
    return <const void*>(<char*>v._t.data + v._t.byte_offset)


cdef object _arrow_array_capsule(View v):
    cdef APArrowArray* array = <APArrowArray*>malloc(sizeof(APArrowArray))
    if array == NULL:
        raise MemoryError()
    if ap_arrow_fill_array(array, _arrow_values(v), v._t.ndim, v._t.shape, v._t.shape[0],
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


cdef object _arrow_device_array_capsule(View v):
    # The owner keeps the View and, when work is pending, the sync event (its address is
    # what the consumer reads) until the consumer's release.
    event = _arrow_export_event(v)
    owner = v if event is None else (v, event)
    cdef APArrowDeviceArray* array = <APArrowDeviceArray*>calloc(1, sizeof(APArrowDeviceArray))
    if array == NULL:
        raise MemoryError()
    if ap_arrow_fill_array(&array.array, _arrow_values(v), v._t.ndim, v._t.shape,
                           v._t.shape[0], <PyObject*>owner) != 0:
        free(array)
        raise MemoryError()
    array.device_type = v._t.device.device_type
    array.device_id = (_ARROW_NO_DEVICE_ID if v._t.device.device_type == APDL_CPU
                       else v._t.device.device_id)
    array.sync_event = NULL if event is None else <void*><uintptr_t>event.address
    try:
        return PyCapsule_New(array, b"arrow_device_array",
                             <PyCapsule_Destructor>ap_arrow_device_array_capsule_free)
    except BaseException:
        array.array.release(&array.array)
        free(array)
        raise


cdef object _view_arrow_schema(View v):
    return _arrow_schema_capsule(v, _arrow_export_format(v, True))


cdef tuple _view_arrow_array(View v, object requested_schema):
    fmt = _arrow_export_format(v, False)
    _check_requested_schema(requested_schema)
    _host_wait_for_pending(v)   # the C data interface's consumer reads it on the host
    return (_arrow_schema_capsule(v, fmt), _arrow_array_capsule(v))


cdef tuple _view_arrow_device_array(View v, object requested_schema, dict kwargs):
    # Future keywords of the interface are accepted with the value None (their default),
    # as the Arrow PyCapsule interface asks of producers.
    unknown = sorted(name for name, value in kwargs.items() if value is not None) \
        if kwargs else None
    if unknown:
        raise NotImplementedError(f"arrow: __arrow_c_device_array__ takes no keyword "
                                  f"{', '.join(unknown)} (arrayport knows none yet)")
    fmt = _arrow_export_format(v, True)
    _check_requested_schema(requested_schema)
    return (_arrow_schema_capsule(v, fmt), _arrow_device_array_capsule(v))


cdef object _view_arrow_stream(View v, object requested_schema):
    fmt = _arrow_export_format(v, False)
    _check_requested_schema(requested_schema)
    _host_wait_for_pending(v)   # the stream's consumer reads it on the host
    cdef APArrowArrayStream* stream = <APArrowArrayStream*>malloc(sizeof(APArrowArrayStream))
    if stream == NULL:
        raise MemoryError()
    if ap_arrow_fill_stream(stream, fmt, v._t.ndim - 1, v._t.shape + 1, _arrow_values(v),
                            v._t.ndim, v._t.shape, v._t.shape[0], <PyObject*>v) != 0:
        free(stream)
        raise MemoryError()
    try:
        return PyCapsule_New(stream, b"arrow_array_stream",
                             <PyCapsule_Destructor>ap_arrow_stream_capsule_free)
    except BaseException:
        stream.release(stream)
        free(stream)
        raise
