# Zero-copy layout operations on a View: basic indexing and slicing, permuting axes,
# reshaping without a copy, reinterpreting the element type. Metadata only, on any device:
# the result describes memory inside the base View's extent, so no bound is re-checked
# against the producer; it keeps the base's memory alive, its read-only flag, device and
# pending stream. NumPy's rules (ndarray.__getitem__, transpose, reshape(copy=False),
# ndarray.view(dtype)) are the oracle — tests/test_layout.py compares with them.
#
# Who owns what: a derived View holds the base View itself as its owner when the base owns
# something in C (a producer's managed tensor, a Py_buffer lease), so that the base's
# deleter runs once, after the last derived View; otherwise it holds the base's owner.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _count_elements, _data_is_address, _fill_c_strides, _plain_int
#   _core_view.pxi: View

from cpython.number cimport PyNumber_Index
from cpython.slice cimport PySlice_AdjustIndices, PySlice_Unpack
from libc.string cimport memset


cdef View _derived(View base, int ndim):
    """A View sharing ``base``'s memory, dtype, device, flags and stream, with room for
    ``ndim`` dimensions; the caller fills shape, strides, size and moves the start."""
    cdef View v = View.__new__(View)
    v._reserve_dims(ndim)
    v._t.data = base._t.data
    v._t.byte_offset = base._t.byte_offset
    v._t.device = base._t.device
    v._t.dtype = base._t.dtype
    v._t.ndim = ndim
    v._flags = base._flags
    v._stream = base._stream
    v._producer_stream = base._producer_stream
    v._protocol = base._protocol
    if base._managed != NULL or base._lease is not None:
        v._owner = base       # the base's deleter / buffer release waits for this View
    else:
        v._owner = base._owner
    return v


cdef View _same_layout(View base):
    """``_derived`` with ``base``'s own shape and strides."""
    cdef View v = _derived(base, base._t.ndim)
    memcpy(v._t.shape, base._t.shape, base._t.ndim * sizeof(int64_t))
    memcpy(v._t.strides, base._t.strides, base._t.ndim * sizeof(int64_t))
    return v


cdef int _finish_derived(View v, int64_t element_shift) except -1:
    """Move ``v``'s start by ``element_shift`` elements and set its size and byte count
    (``_count_elements``: the one checked count every View takes)."""
    _count_elements(v, "layout")
    if element_shift == 0:
        return 0
    cdef int64_t offset
    cdef int problem = ap_shifted_offset(<int64_t>v._t.byte_offset, element_shift,
                                         v._itembits(), &offset)
    if problem == AP_EXTENT_SUBBYTE_START:
        raise BufferError("layout: a packed sub-byte View can only start on a whole byte")
    if problem != AP_EXTENT_OK:
        raise BufferError(f"layout: moving the start by {element_shift} elements overflows "
                          f"int64 bytes")
    if _data_is_address(v._t.device.device_type):
        # Moved into the address, so that exports carry byte_offset 0 (consumers that
        # ignore it — PaddlePaddle, Warp — then still read the right elements).
        v._t.data = <void*>(<char*>v._t.data + offset)
        v._t.byte_offset = 0
    elif offset >= 0:
        v._t.byte_offset = <uint64_t>offset
    else:
        raise BufferError(f"layout: a {_device_type_label(v._t.device.device_type)} View's "
                          f"data is a handle, and the result would start before it")
    return 0


cdef int _check_packed_layout(View v) except -1:
    """Packed sub-byte elements have no byte address: such Views stay C-contiguous."""
    if (v._itembits() % 8 and v._size > 1
            and not ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides)):
        raise BufferError(f"layout: a View of packed {v.dtype.name} elements must stay "
                          f"C-contiguous; copy() it into a wider type first")
    return 0


cdef int64_t _index_value(obj, int axis, int64_t extent) except? -1:
    """A non-negative position from an integer index (negatives count from the end)."""
    cdef int64_t index
    value = _plain_int(obj)
    try:
        index = value
    except OverflowError:
        raise IndexError(f"index {value} is out of bounds for axis {axis} with size {extent}")
    if index < -extent or index >= extent:
        raise IndexError(f"index {index} is out of bounds for axis {axis} with size {extent}")
    return index + extent if index < 0 else index


cdef bint _is_integer_index(obj):
    """An integer index as NumPy reads one: an int, NumPy integer or 0-d integer array —
    never a boolean, which NumPy reads as a mask."""
    if type(obj) is int:
        return True
    if type(obj) is tuple or type(obj) is slice or obj is None:
        return False
    if isinstance(obj, int):
        return not isinstance(obj, bool)
    if type(obj).__name__ in ("bool_", "bool") or not hasattr(type(obj), "__index__"):
        return False
    return getattr(obj, "ndim", 0) == 0


cdef View _getitem(View base, key):
    """``base[key]`` for basic indexes: integers, slices, ``...`` and ``None``."""
    if type(key) is not tuple:
        key = (key,)
    cdef int consumed = 0      # base axes the key names (integers and slices)
    cdef int integers = 0      # of which integers, which drop their axis
    cdef int added = 0         # None entries, new axes of extent 1
    cdef int ellipses = 0
    for item in key:
        if item is None:
            added += 1
        elif item is Ellipsis:
            ellipses += 1
        elif isinstance(item, slice):
            consumed += 1
        elif _is_integer_index(item):
            consumed += 1
            integers += 1
        else:
            raise IndexError(
                f"View: only integers, slices (`:`), ellipsis (`...`) and None are valid "
                f"indices (a zero-copy view), got {type(item).__name__}; index "
                f"numpy.asarray(view) for advanced indexing, which copies")
    if ellipses > 1:
        raise IndexError("View: an index can only have a single ellipsis ('...')")
    cdef int ndim = base._t.ndim
    if consumed > ndim:
        raise IndexError(f"View: too many indices: the View is {ndim}-dimensional, but "
                         f"{consumed} were indexed")
    cdef int out_ndim = ndim - integers + added
    if out_ndim > AP_COPY_MAX_NDIM:
        raise IndexError(f"View: the result would have {out_ndim} dimensions, more than "
                         f"{MAX_NDIM}")
    cdef View v = _derived(base, out_ndim)
    cdef int axis = 0          # next axis of the base
    cdef int out = 0           # next axis of the result
    cdef int64_t shift = 0     # elements from the base's start to the result's
    cdef Py_ssize_t start, stop, step, count
    for item in key:
        if item is None:
            v._t.shape[out] = 1
            v._t.strides[out] = 0
            out += 1
        elif item is Ellipsis:
            for _ in range(ndim - consumed):
                v._t.shape[out] = base._t.shape[axis]
                v._t.strides[out] = base._t.strides[axis]
                out += 1
                axis += 1
        elif isinstance(item, slice):
            PySlice_Unpack(item, &start, &stop, &step)   # ValueError for step 0
            count = PySlice_AdjustIndices(<Py_ssize_t>base._t.shape[axis], &start, &stop, step)
            if count == 0:     # as NumPy: an empty slice starts at 0 with step 1
                start, step = 0, 1
            v._t.shape[out] = count
            # A step past the extent takes one element: the base's stride then (never
            # stepped along), not a product that could overflow.
            v._t.strides[out] = base._t.strides[axis] * step if count > 1 else base._t.strides[axis]
            shift += start * base._t.strides[axis]
            out += 1
            axis += 1
        else:
            shift += _index_value(item, axis, base._t.shape[axis]) * base._t.strides[axis]
            axis += 1
    while axis < ndim:         # axes the key did not name are kept whole
        v._t.shape[out] = base._t.shape[axis]
        v._t.strides[out] = base._t.strides[axis]
        out += 1
        axis += 1
    _finish_derived(v, shift)
    _check_packed_layout(v)
    return v


cdef View _permuted(View base, axes):
    """``base`` with its axes in the order ``axes`` (a permutation; negatives allowed)."""
    cdef int ndim = base._t.ndim
    if len(axes) != ndim:
        raise ValueError(f"View.permute: axes {tuple(axes)} do not match a {ndim}-dimensional "
                         f"View (one entry per axis)")
    cdef int order[AP_COPY_MAX_NDIM]
    cdef bint seen[AP_COPY_MAX_NDIM]
    cdef int64_t source
    memset(order, 0, sizeof(order))
    for i in range(ndim):
        seen[i] = False
    for i in range(ndim):
        item = axes[i]
        if not _is_integer_index(item):
            raise TypeError(f"View.permute: axes must be integers, got "
                            f"{type(item).__name__}")
        source = _plain_int(item)
        if source < -ndim or source >= ndim:
            raise ValueError(f"View.permute: axis {source} is out of bounds for a "
                             f"{ndim}-dimensional View")
        if source < 0:
            source += ndim
        if seen[source]:
            raise ValueError(f"View.permute: axis {source} repeated in {tuple(axes)}")
        seen[source] = True
        order[i] = <int>source
    return _with_axes(base, order)


cdef View _reversed_axes(View base, bint last_two_only):
    """``base.T`` (every axis reversed) or ``base.mT`` (the last two swapped)."""
    cdef int ndim = base._t.ndim
    cdef int order[AP_COPY_MAX_NDIM]
    for i in range(ndim):
        order[i] = i if last_two_only else ndim - 1 - i
    if last_two_only:
        order[ndim - 2], order[ndim - 1] = ndim - 1, ndim - 2
    return _with_axes(base, order)


cdef View _with_axes(View base, const int* order):
    """``base`` with axis ``i`` of the result taken from axis ``order[i]`` (a validated
    permutation)."""
    cdef View v = _derived(base, base._t.ndim)
    for i in range(base._t.ndim):
        v._t.shape[i] = base._t.shape[order[i]]
        v._t.strides[i] = base._t.strides[order[i]]
    _finish_derived(v, 0)
    _check_packed_layout(v)
    return v


cdef int _reshape_target(View base, shape, int64_t* extents) except -1:
    """Fill ``extents`` with the requested shape, one -1 inferred (NumPy's rules); returns
    its number of dimensions. Sizes are checked like an import's (extent.h)."""
    if type(shape) is tuple:
        pass
    elif _is_integer_index(shape):
        shape = (shape,)
    else:
        try:
            shape = tuple(shape)
        except TypeError:
            raise TypeError(f"View.reshape: shape must be an int or a sequence of ints, got "
                            f"{shape!r}") from None
    cdef Py_ssize_t ndim = len(<tuple>shape)
    if ndim > AP_COPY_MAX_NDIM:
        raise ValueError(f"View.reshape: {ndim} dimensions, more than {MAX_NDIM}")
    cdef int unknown = -1
    for i in range(ndim):
        item = (<tuple>shape)[i]
        if type(item) is int:
            value = item
        elif _is_integer_index(item):
            value = _plain_int(item)
        else:
            raise TypeError(f"View.reshape: shape must be an int or a sequence of ints, got "
                            f"{shape!r}")
        if value == -1:
            if unknown >= 0:
                raise ValueError("View.reshape: can only specify one unknown dimension (-1)")
            unknown, extents[i] = i, 1
        elif value < 0:
            raise ValueError(f"View.reshape: negative extent {value} in {shape}")
        elif value > 0x7FFFFFFFFFFFFFFF:
            raise ValueError(f"View.reshape: shape {shape} is too big")
        else:
            extents[i] = value
    cdef int64_t known
    if ap_element_count(<int>ndim, extents, base._itembits(), &known) != AP_EXTENT_OK:
        raise ValueError(f"View.reshape: shape {shape} is too big (its non-zero extents times "
                         f"the item size exceed 2**63 - 1 bytes)")
    if unknown >= 0:
        if known == 0 or base._size % known:
            raise ValueError(f"View.reshape: cannot reshape a View of size {base._size} into "
                             f"shape {shape}")
        extents[unknown] = base._size // known
    elif known != base._size:
        raise ValueError(f"View.reshape: cannot reshape a View of size {base._size} into "
                         f"shape {shape}")
    return <int>ndim


cdef View _reshaped(View base, shape):
    """``base`` seen with shape ``shape`` (C order) when its strides allow it without a
    copy; ValueError naming ``copy()`` when they do not."""
    cdef int64_t extents[AP_COPY_MAX_NDIM]
    cdef int new_ndim = _reshape_target(base, shape, extents)
    cdef View v = _derived(base, new_ndim)
    memcpy(v._t.shape, extents, new_ndim * sizeof(int64_t))
    if base._size == 0 or ap_is_c_contiguous(base._t.ndim, base._t.shape, base._t.strides):
        _fill_c_strides(new_ndim, v._t.shape, v._t.strides)
    elif not _strides_without_copy(base, v):
        raise ValueError(f"View.reshape: a View with shape {base.shape} and strides "
                         f"{base.strides} cannot be seen as shape {v.shape} without copying "
                         f"its elements; reshape view.copy() instead")
    _finish_derived(v, 0)
    return v


cdef bint _strides_without_copy(View base, View v):
    """Fill ``v``'s strides for its shape over ``base``'s elements in C order, merging or
    splitting runs of the base's axes that are evenly strided; False when some run is not.
    (The algorithm NumPy uses for reshape without a copy.)"""
    cdef int64_t old_shape[AP_COPY_MAX_NDIM]
    cdef int64_t old_strides[AP_COPY_MAX_NDIM]
    cdef int old_ndim = 0
    for i in range(base._t.ndim):       # axes of extent 1 take no part
        if base._t.shape[i] != 1:
            old_shape[old_ndim] = base._t.shape[i]
            old_strides[old_ndim] = base._t.strides[i]
            old_ndim += 1
    cdef int new_ndim = v._t.ndim
    cdef int64_t* new_shape = v._t.shape
    cdef int64_t* new_strides = v._t.strides
    cdef int oi = 0, oj = 1, ni = 0, nj = 1
    cdef int64_t new_run, old_run
    while ni < new_ndim and oi < old_ndim:
        new_run = new_shape[ni]
        old_run = old_shape[oi]
        while new_run != old_run:
            if new_run < old_run:
                new_run *= new_shape[nj]
                nj += 1
            else:
                old_run *= old_shape[oj]
                oj += 1
        for k in range(oi, oj - 1):     # the old run must be one evenly strided block
            if old_strides[k] != old_shape[k + 1] * old_strides[k + 1]:
                return False
        new_strides[nj - 1] = old_strides[oj - 1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * new_shape[k]
        ni = nj
        nj += 1
        oi = oj
        oj += 1
    cdef int64_t last = new_strides[ni - 1] if ni >= 1 else 1
    for k in range(ni, new_ndim):       # trailing extents of 1
        new_strides[k] = last
    return True


cdef View _reinterpreted(View base, dtype):
    """``base``'s bytes read as ``dtype`` (NumPy's ndarray.view(dtype) rules): the same
    layout when the sizes match, else the last axis (contiguous) rescaled."""
    cdef object target = dtype if isinstance(dtype, DType) else DType(dtype)
    cdef int64_t old_bits = base._itembits()
    cdef int64_t new_bits = target.bits * target.lanes
    if target.padded or old_bits % 8 or new_bits % 8:
        if new_bits != old_bits or target.padded != (
                (base._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0):
            raise ValueError(f"View.view_as: packed sub-byte types reinterpret only as types "
                             f"of the same width ({base.dtype.name} -> {target.name})")
    cdef int ndim = base._t.ndim
    cdef View v = _same_layout(base)
    v._t.dtype.code = target.code
    v._t.dtype.bits = target.bits
    v._t.dtype.lanes = target.lanes
    if new_bits == old_bits:
        _finish_derived(v, 0)
        return v
    cdef int64_t old_size = old_bits // 8, new_size = new_bits // 8
    if ndim == 0:
        raise ValueError(f"View.view_as: a 0-d View of {old_size}-byte {base.dtype.name} cannot "
                         f"be read as {new_size}-byte {target.name}")
    cdef int last = ndim - 1
    if base._size == 0:        # nothing to read: only the shape's arithmetic matters
        if (base._t.shape[last] * old_size) % new_size:
            raise ValueError(f"View.view_as: the last axis holds "
                             f"{base._t.shape[last] * old_size} bytes, not a multiple of "
                             f"{target.name}'s {new_size}")
        v._t.shape[last] = base._t.shape[last] * old_size // new_size
        _fill_c_strides(ndim, v._t.shape, v._t.strides)
        _finish_derived(v, 0)
        return v
    if base._t.shape[last] != 1 and base._t.strides[last] != 1:
        raise ValueError(f"View.view_as: to read {base.dtype.name} as {target.name} (another "
                         f"size) the last axis must be contiguous; its stride is "
                         f"{base.strides[last]} bytes")
    cdef int64_t row_bytes = base._t.shape[last] * old_size
    if row_bytes % new_size:
        raise ValueError(f"View.view_as: the last axis holds {row_bytes} bytes, not a "
                         f"multiple of {target.name}'s {new_size}")
    # Strides are counted in elements: re-express every axis's stride in new elements.
    for i in range(last):
        if base._t.shape[i] == 1:   # an axis of extent 1 is never stepped along
            v._t.strides[i] = base._t.strides[i] * old_size // new_size
            continue
        if (base._t.strides[i] * old_size) % new_size:
            raise ValueError(f"View.view_as: axis {i}'s stride of "
                             f"{base._t.strides[i] * old_size} bytes is not a multiple of "
                             f"{target.name}'s {new_size}")
        v._t.strides[i] = base._t.strides[i] * old_size // new_size
    v._t.shape[last] = row_bytes // new_size
    v._t.strides[last] = 1
    _finish_derived(v, 0)
    return v


cdef View _as_readonly(View base):
    """The same memory, flagged read-only (every export of it says so)."""
    if base._flags & APDL_FLAG_READ_ONLY:
        return base
    cdef View v = _same_layout(base)
    v._flags |= APDL_FLAG_READ_ONLY
    _finish_derived(v, 0)
    return v
