# Contracts for library authors: ``Spec`` (what a function accepts) and ``require`` (a View
# of any array that meets a Spec). The core holds the checks — they run on every call of a
# decorated function, so they are C comparisons over a Spec normalised once — and the
# fast path: a View that meets the Spec comes back with no Python-level work. Everything
# else (copying to another device or order, casting, the error texts) is policy, reached
# through the require_fix hook (arrayport/contracts.py).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _plain_int
#   _core_dispatch.pxi: _view
#   _core_hooks.pxi: _hook, _require_fix_hook
#   _core_layout.pxi: _as_readonly, _is_integer_index
#   _core_producers.pxi: NeedsCopy, _PYTHON_VALUES, _view_of_python_values, _view_or_copy
#   _core_view.pxi: View

# What a View can fail, in the order require checks (and fixes) them. contracts.py names
# them: keep CONSTRAINTS in step.
cdef enum _Failure:
    _MEETS = 0
    _FAILS_DEVICE = 1
    _FAILS_DTYPE = 2
    _FAILS_NDIM = 3
    _FAILS_SHAPE = 4
    _FAILS_ORDER = 5
    _FAILS_WRITABLE = 6
    _FAILS_ALIGN = 7

CONSTRAINTS = (None, "device", "dtype", "ndim", "shape", "order", "writable", "align")

# Spec._writable beyond -1 (any) and 0 (hand over read-only).
cdef enum _Writable:
    _WRITABLE_OWN = 1     # writable=True: the caller's own memory, never a copy
    _WRITABLE_COPY = 2    # writable="copy": writable, read-only memory met by a copy

cdef enum _Order:
    _ANY_ORDER = 0
    _C_ORDER = 1
    _F_ORDER = 2
    _C_OR_F_ORDER = 3
    _LAST_AXIS_CONTIGUOUS = 4

cdef dict _ORDERS = {None: _ANY_ORDER, "C": _C_ORDER, "F": _F_ORDER, "A": _C_OR_F_ORDER,
                     "contiguous-last-axis": _LAST_AXIS_CONTIGUOUS}
ORDERS = tuple(name for name in _ORDERS if name is not None)


cdef inline uint64_t _dtype_key(int code, int bits, int lanes, bint padded) noexcept:
    return <uint64_t>code | (<uint64_t>bits << 8) | (<uint64_t>lanes << 16) \
        | (<uint64_t>padded << 32)


cdef tuple _as_choices(value, str what):
    """A constraint given as one value or a collection of choices, as a tuple."""
    if isinstance(value, (set, frozenset, list, tuple)) and what != "shape":
        if not value:
            raise ValueError(f"Spec: {what} must name at least one choice, got {value!r}")
        return tuple(value)
    return (value,)


@cython.final
cdef class Spec:
    """Spec(*, dtype=None, ndim=None, shape=None, order=None, device=None, writable=None, align=None, cast=False, copy=None)
--

What a function accepts, made once and checked in C on every call.

    Every constraint is optional. Immutable and hashable.

    Parameters
    ----------
    dtype, ndim, device : optional
        One value or a set/list of choices; a device type without an id (``"cuda"``) matches
        every device of that type.
    shape : tuple, optional
        An extent, or ``None`` for any, per axis.
    order : {"C", "F", "A", "contiguous-last-axis"}, optional
        ``"A"``: C or F.
    writable : bool or "copy", optional
        ``True``: the caller's own writable memory (an output argument: the function's
        writes must reach the caller), never a copy — read-only memory, and anything only a
        copy could meet, is refused; ``"copy"``: writable memory, a private copy of
        read-only memory allowed; ``False``: a read-only View handed over (the function
        promises not to write).
    align : int, optional
        The data address must be a multiple of these bytes.
    copy : bool, optional
        The default copy policy of ``require`` with this spec.
    cast : bool
        Let ``require`` convert another dtype (on the host, through NumPy).

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> ROWS = ap.Spec(dtype=["float32", "float64"], shape=(None, 3), order="C")
    >>> ap.require(np.zeros((5, 3)), spec=ROWS).shape
    (5, 3)
    """

    cdef tuple _given_dtypes       # DType choices, or () for any
    cdef tuple _given_ndims        # int choices, or () for any
    cdef object _given_shape       # tuple of int/None, or None for any
    cdef object _given_order       # one of ORDERS, or None
    cdef tuple _given_devices      # Device choices (id -1: any id of that type), or ()
    cdef object _given_writable    # True, False, "copy" or None
    cdef object _given_align       # int bytes, or None
    cdef bint _given_cast
    cdef object _given_copy        # True, False or None
    cdef frozenset _dtype_keys
    cdef uint64_t _one_dtype_key
    cdef int _dtype_count
    cdef bint _ndim_ok[AP_COPY_MAX_NDIM + 1]
    cdef bint _any_ndim
    cdef int _shape_len              # -1: no shape constraint
    cdef int64_t _shape[AP_COPY_MAX_NDIM]   # -1: any extent
    cdef int _order
    cdef tuple _device_pairs         # ((type, id or -1), ...)
    cdef int32_t _one_device_type
    cdef int32_t _one_device_id      # -1: any
    cdef int _device_count
    cdef uintptr_t _align
    cdef int _writable               # -1 any, 0 hand over read-only, _WRITABLE_OWN: the
                                     # caller's own writable memory (an output argument,
                                     # never a copy), _WRITABLE_COPY: writable, a copy allowed

    def __class_getitem__(cls, item):
        """``Spec[Float32]`` in annotations (arrayport.typing)."""
        return _GenericAlias(cls, item)

    def __init__(self, *, dtype=None, ndim=None, shape=None, order=None, device=None,
                 writable=None, align=None, cast=False, copy=None):
        self._set_dtypes(dtype)
        self._set_ndims(ndim, shape)
        self._set_order(order)
        self._set_devices(device)
        if writable is not None and type(writable) is not bool and not (
                type(writable) is str and writable == "copy"):
            raise TypeError(f"Spec: writable must be True, False, 'copy' or None, got "
                            f"{writable!r}")
        self._given_writable = writable
        self._writable = (-1 if writable is None else _WRITABLE_COPY if writable == "copy"
                          else _WRITABLE_OWN if writable else 0)
        if align is not None:
            given = align
            align = _plain_int(align) if _is_integer_index(align) else None
            if align is None or align <= 0 or (align & (align - 1)) or align > <uintptr_t>-1:
                raise ValueError(f"Spec: align must be a power of two (bytes), got {given!r}")
        self._given_align = align
        self._align = 0 if align is None else align
        if type(cast) is not bool:
            raise TypeError(f"Spec: cast must be True or False, got {cast!r}")
        self._given_cast = cast
        if copy is not None and type(copy) is not bool:
            raise TypeError(f"Spec: copy must be True, False or None, got {copy!r}")
        if copy is True and writable is True:
            raise ValueError("Spec: writable=True asks for the caller's own memory (an output "
                             "argument), copy=True for a new copy: use writable='copy'")
        self._given_copy = copy

    cdef _set_dtypes(self, dtype):
        self._given_dtypes = ()
        self._dtype_count = 0
        if dtype is None:
            return
        chosen = []
        for item in _as_choices(dtype, "dtype"):
            chosen.append(item if isinstance(item, DType) else DType(item))
        self._given_dtypes = tuple(chosen)
        keys = [_dtype_key(d.code, d.bits, d.lanes, d.padded) for d in self._given_dtypes]
        self._dtype_keys = frozenset(keys)
        self._one_dtype_key = keys[0]
        self._dtype_count = len(self._dtype_keys)

    cdef _set_ndims(self, ndim, shape):
        self._any_ndim = ndim is None and shape is None
        for i in range(AP_COPY_MAX_NDIM + 1):
            self._ndim_ok[i] = self._any_ndim
        self._shape_len = -1
        self._given_shape = None
        self._given_ndims = ()
        chosen = set()
        if ndim is not None:
            for item in _as_choices(ndim, "ndim"):
                value = _plain_int(item) if _is_integer_index(item) else None
                if value is None or not 0 <= value <= MAX_NDIM:
                    raise ValueError(f"Spec: ndim must be an int in 0..{MAX_NDIM} (or a set of "
                                     f"them), got {item!r}")
                chosen.add(value)
        if shape is not None:
            if _is_integer_index(shape):
                shape = (shape,)
            if not isinstance(shape, (tuple, list)):
                raise TypeError(f"Spec: shape must be a tuple of extents or None (any), got "
                                f"{shape!r}")
            shape = tuple(shape)        # taken once: a subclass's len and iter may disagree
            if len(shape) > MAX_NDIM:
                raise TypeError(f"Spec: shape must be a tuple of at most {MAX_NDIM} extents "
                                f"or None (any), got {len(shape)}")
            extents = []
            for extent in shape:
                value = _plain_int(extent) if _is_integer_index(extent) else None
                if extent is not None and (value is None or not 0 <= value <= 0x7FFFFFFFFFFFFFFF):
                    raise ValueError(f"Spec: shape entries must be extents >= 0 or None, got "
                                     f"{extent!r} in {tuple(shape)!r}")
                extents.append(value)
            if chosen and len(extents) not in chosen:
                raise ValueError(f"Spec: shape {tuple(extents)} has {len(extents)} dimensions, "
                                 f"but ndim says {sorted(chosen)}")
            self._given_shape = tuple(extents)
            self._shape_len = len(extents)
            for i, extent in enumerate(extents):
                self._shape[i] = -1 if extent is None else extent
            chosen = {len(extents)}
        self._given_ndims = tuple(sorted(chosen))
        for n in chosen:
            self._ndim_ok[n] = True

    cdef _set_order(self, order):
        if order not in _ORDERS:
            raise ValueError(f"Spec: order must be one of {', '.join(ORDERS)} or None, got "
                             f"{order!r}")
        self._given_order = order
        self._order = _ORDERS[order]

    cdef _set_devices(self, device):
        self._given_devices = ()
        self._device_pairs = ()
        self._device_count = 0
        if device is None:
            return
        devices, pairs = [], []
        for item in _as_choices(device, "device"):
            text = item if isinstance(item, str) else None
            parsed = Device(item)
            any_id = text is not None and ":" not in text
            devices.append(parsed)
            pairs.append((int(parsed.type), -1 if any_id else parsed.id))
        self._given_devices = tuple(devices)
        self._device_pairs = tuple(pairs)
        self._one_device_type, self._one_device_id = pairs[0]
        self._device_count = len(pairs)

    cdef int _first_failure(self, View v):
        """Which constraint ``v`` fails first (a _Failure; _MEETS when none)."""
        cdef int32_t device_type, device_id
        if self._device_count:
            device_type = v._t.device.device_type
            device_id = v._t.device.device_id
            if self._device_count == 1:
                if device_type != self._one_device_type or (
                        self._one_device_id != -1 and device_id != self._one_device_id):
                    return _FAILS_DEVICE
            elif not self._any_device_matches(device_type, device_id):
                return _FAILS_DEVICE
        cdef uint64_t key
        if self._dtype_count:
            key = _dtype_key(v._t.dtype.code, v._t.dtype.bits, v._t.dtype.lanes,
                             v._t.dtype.bits < 8
                             and (v._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0)
            if key != self._one_dtype_key and (self._dtype_count == 1
                                               or key not in self._dtype_keys):
                return _FAILS_DTYPE
        cdef int ndim = v._t.ndim
        if not self._ndim_ok[ndim]:
            return _FAILS_NDIM
        if self._shape_len >= 0:
            for i in range(ndim):
                if self._shape[i] != -1 and self._shape[i] != v._t.shape[i]:
                    return _FAILS_SHAPE
        if self._order != _ANY_ORDER and not self._order_met(v):
            return _FAILS_ORDER
        if self._writable >= _WRITABLE_OWN and (v._flags & APDL_FLAG_READ_ONLY):
            return _FAILS_WRITABLE
        if self._align and (<uintptr_t>v._t.data + <uintptr_t>v._t.byte_offset) % self._align:
            return _FAILS_ALIGN
        return _MEETS

    cdef bint _any_device_matches(self, int32_t device_type, int32_t device_id):
        for wanted_type, wanted_id in self._device_pairs:
            if wanted_type == device_type and (wanted_id == -1 or wanted_id == device_id):
                return True
        return False

    cdef bint _order_met(self, View v):
        cdef int ndim = v._t.ndim
        if self._order == _C_ORDER:
            return ap_is_c_contiguous(ndim, v._t.shape, v._t.strides) != 0
        if self._order == _F_ORDER:
            return ap_is_f_contiguous(ndim, v._t.shape, v._t.strides) != 0
        if self._order == _C_OR_F_ORDER:
            return (ap_is_c_contiguous(ndim, v._t.shape, v._t.strides) != 0
                    or ap_is_f_contiguous(ndim, v._t.shape, v._t.strides) != 0)
        # contiguous-last-axis: unit element stride on the last axis (any stride there
        # when it has at most one element)
        return ndim == 0 or v._t.shape[ndim - 1] <= 1 or v._t.strides[ndim - 1] == 1

    def first_failure(self, View v):
        """The first constraint a View fails.

        Parameters
        ----------
        v : View

        Returns
        -------
        str or None
            ``"device"``, ``"dtype"``, ``"ndim"``, ``"shape"``, ``"order"``, ``"writable"``
            or ``"align"``; ``None`` when ``v`` meets them all.

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> ap.Spec(ndim=2).first_failure(ap.view(np.zeros(3)))
        'ndim'
        """
        return CONSTRAINTS[self._first_failure(v)]

    def __repr__(self):
        parts = []
        if self._given_dtypes:
            names = [d.name for d in self._given_dtypes]
            parts.append(f"dtype={names[0]!r}" if len(names) == 1 else f"dtype={names!r}")
        if self._given_ndims and self._given_shape is None:
            parts.append(f"ndim={self._given_ndims[0]!r}" if len(self._given_ndims) == 1
                         else f"ndim={list(self._given_ndims)!r}")
        if self._given_shape is not None:
            parts.append(f"shape={self._given_shape!r}")
        for name in ("order", "writable", "align", "copy"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        if self._given_devices:
            labels = self.device_labels
            parts.append(f"device={labels[0]!r}" if len(labels) == 1
                         else f"device={list(labels)!r}")
        if self._given_cast:
            parts.append("cast=True")
        return f"Spec({', '.join(parts)})"

    def _key(self):
        return (self._dtype_keys if self._dtype_count else None, self._given_ndims,
                self._given_shape, self._given_order, self._device_pairs, self._given_writable,
                self._given_align, self._given_cast, self._given_copy)

    def __eq__(self, other):
        if not isinstance(other, Spec):
            return NotImplemented
        return self._key() == (<Spec>other)._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def dtypes(self):
        """The allowed element types (DType), or () for any."""
        return self._given_dtypes

    @property
    def ndims(self):
        """The allowed numbers of dimensions, or () for any."""
        return self._given_ndims

    @property
    def shape(self):
        """The required extents (None: any extent), or None for any shape."""
        return self._given_shape

    @property
    def order(self):
        """The required layout: "C", "F", "A", "contiguous-last-axis", or None for any."""
        return self._given_order

    @property
    def devices(self):
        """The allowed devices (Device), or () for any (``device_labels``: as written)."""
        return self._given_devices

    @property
    def writable(self):
        """True: the caller's own writable memory (never a copy); "copy": writable, a
        private copy allowed; False: a read-only View handed over; None: either."""
        return self._given_writable

    @property
    def align(self):
        """The required alignment of the data address in bytes, or None."""
        return self._given_align

    @property
    def cast(self):
        """Whether require may convert another dtype (on the host, through NumPy)."""
        return self._given_cast

    @property
    def copy(self):
        """The default copy policy of require with this Spec (True, False or None)."""
        return self._given_copy

    @property
    def device_labels(self):
        """The device choices as written: "cuda" (any id), "cuda:1", "cpu"."""
        return tuple([str(d) if pair[1] != -1 else d.type.label
                      for d, pair in zip(self._given_devices, self._device_pairs)])

    def __reduce__(self):
        return (_spec_from_fields, (
            self._given_dtypes or None, self._given_ndims or None, self._given_shape,
            self._given_order, list(self.device_labels) or None, self._given_writable,
            self._given_align, self._given_cast, self._given_copy))


def _spec_from_fields(dtype, ndim, shape, order, device, writable, align, cast, copy):
    return Spec(dtype=list(dtype) if dtype else None, ndim=list(ndim) if ndim else None,
                shape=shape, order=order, device=device, writable=writable, align=align,
                cast=cast, copy=copy)


# Specs made by require()'s keyword arguments, reused while the arguments are hashable.
cdef dict _spec_cache = {}


def require(x, /, *, dtype=None, ndim=None, shape=None, order=None, device=None,
            writable=None, align=None, copy=None, stream=None, cast=False, spec=None):
    """A View of ``x`` that meets every constraint, zero-copy when ``x`` already does.

    Parameters
    ----------
    x : object
        Any array ``arrayport.view`` accepts; or, where a copy is allowed, a Python list,
        tuple or number, taken as ``numpy.asarray`` takes it (of the Spec's dtype when it
        names exactly one).
    dtype, ndim, device : optional
        One value or a list/set of choices (``"cuda"`` matches every CUDA device).
    shape : tuple, optional
        An extent, or ``None`` for any, per axis.
    order : {"C", "F", "A", "contiguous-last-axis"}, optional
    writable : bool or "copy", optional
        ``True``: the caller's own writable memory, never a copy (an output argument);
        ``"copy"``: writable, a private copy allowed; ``False`` hands over a read-only View
        (the caller promises not to write).
    align : int, optional
        The data address must be a multiple of these bytes.
    copy : bool, optional
        ``None`` (default): one copy where a copy can meet the constraints (device, order,
        writable, align); ``False``: never a copy; ``True``: always a new copy.
    stream : int, optional
        The CUDA/ROCm stream the caller uses the data on; imports and copies are ordered
        for it.
    cast : bool
        Let a different dtype be converted (on the host, through NumPy).
    spec : Spec, optional
        The constraints made in advance, instead of the keywords.

    Returns
    -------
    View

    Raises
    ------
    RequirementError
        A constraint is not met and a copy cannot (or may not) meet it: a ``ValueError``
        whose message and ``constraint`` name it.
    TypeError
        An argument has the wrong type, or both ``spec`` and keywords were given.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> a = np.ones((3, 4), np.float32)
    >>> ap.require(a, dtype="float32", ndim=2, order="C").is_copy
    False
    >>> ap.require(a.T, order="C").is_copy               # a copy can fix the order
    True
    >>> ap.require(a, dtype="float64")
    Traceback (most recent call last):
        ...
    arrayport.errors.RequirementError: require: expected dtype float64, got float32; a copy ...
    """
    cdef Spec chosen
    if spec is not None:
        if not isinstance(spec, Spec):
            raise TypeError(f"require: spec must be an arrayport.Spec, got "
                            f"{type(spec).__name__}")
        if (dtype is not None or ndim is not None or shape is not None or order is not None
                or device is not None or writable is not None or align is not None or cast):
            raise TypeError("require: give constraints either as spec= or as keywords, "
                            "not both")
        chosen = <Spec>spec
    else:
        chosen = _spec_for(dtype, ndim, shape, order, device, writable, align, cast)
    return _require(chosen, x, chosen.copy if copy is None else copy, stream, None)


# The Spec of the last call, found again by the arguments' identity (the common case: the
# same literals at the same call site) before the dict is asked.
cdef tuple _last_arguments = None
cdef Spec _last_spec = None


cdef Spec _spec_for(dtype, ndim, shape, order, device, writable, align, cast):
    global _last_arguments, _last_spec
    cdef tuple last = _last_arguments
    if (last is not None and dtype is last[0] and ndim is last[1] and shape is last[2]
            and order is last[3] and device is last[4] and writable is last[5]
            and align is last[6] and cast is last[7]):
        return _last_spec
    arguments = (dtype, ndim, shape, order, device, writable, align, cast)
    # The flags' types in the key: 1 == True and hash alike, and Spec refuses 1.
    key = arguments + (type(writable), type(cast))
    try:
        found = _spec_cache.get(key)
    except TypeError:          # unhashable choices (a set, a list): no cache
        return Spec(dtype=dtype, ndim=ndim, shape=shape, order=order, device=device,
                    writable=writable, align=align, cast=cast)
    if found is None:
        found = Spec(dtype=dtype, ndim=ndim, shape=shape, order=order, device=device,
                     writable=writable, align=align, cast=cast)
        if len(_spec_cache) >= _TYPE_CACHE_LIMIT:
            _spec_cache.clear()
        _spec_cache[key] = found
    # Held only while its arguments are immutable (a list could change under the identity).
    _last_arguments, _last_spec = arguments, <Spec>found
    return <Spec>found


def require_with(Spec spec, x, copy, stream, name):
    """``require`` for ``@accepts``: ``spec`` made once, the argument's ``name`` in
    errors, ``copy`` already resolved against the Spec's default."""
    return _require(spec, x, copy, stream, name)


cdef object _require(Spec spec, x, copy, stream, name):
    if copy is not None and type(copy) is not bool:
        raise TypeError(f"require: copy must be True, False or None, got {copy!r}")
    cdef View v
    import_stream = _import_stream(x, stream)
    if spec._writable == _WRITABLE_OWN:
        return _require_output(spec, x, copy, stream, import_stream, name)
    if type(x) is View and import_stream is None:
        v = <View>x
    elif type(x) in _PYTHON_VALUES:
        v = _from_python_values(x, spec, copy, name)
    elif copy is False:
        v = _view(x, import_stream)
    else:
        v = _view_or_copy(x, import_stream, copy is True)
    cdef int failure = spec._first_failure(v)
    if failure == _MEETS and copy is not True:
        return _as_readonly(v) if spec._writable == 0 else v
    return _hook(_require_fix_hook, "require_fix")(v, spec, CONSTRAINTS[failure], copy, stream,
                                                   name, None)


cdef object _require_output(Spec spec, x, copy, stream, import_stream, name):
    """``require`` of an output argument (``writable=True``): the caller's own memory or
    a RequirementError (contracts.require_fix words it) — never a copy, whose writes would
    be lost to the caller: not of read-only memory, not of a layout, device or alignment
    only a copy could meet, not of a producer whose memory does not hold its values as they
    are, not of Python values."""
    cdef View v
    fix = _hook(_require_fix_hook, "require_fix")
    if copy is True:
        raise ValueError("require: writable=True asks for the caller's own memory (an output "
                         "argument), copy=True for a new copy: pass writable='copy' for a "
                         "private writable copy")
    if type(x) is View and import_stream is None:
        v = <View>x
    elif type(x) in _PYTHON_VALUES:
        return fix(None, spec, "writable", copy, stream, name,
                   f"a Python {type(x).__name__} holds no array memory to write into")
    else:
        try:
            v = _view(x, import_stream)
        except NeedsCopy as refusal:
            return fix(None, spec, "writable", copy, stream, name, str(refusal))
        if v._protocol == "array" and _only_arrayport_holds(v._owner):
            return fix(None, spec, "writable", copy, stream, name,
                       f"its {type(x).__name__}.__array__ returned a new array nobody else "
                       f"holds (a copy, whatever copy=False asked)")
    cdef int failure = spec._first_failure(v)
    if failure == _MEETS:
        return v
    return fix(v, spec, CONSTRAINTS[failure], copy, stream, name, None)


cdef bint _only_arrayport_holds(owner):
    """Whether ``owner`` — the ndarray a producer's ``__array__`` returned — is memory of
    its own that nothing but the View holds: a copy (an ``__array__`` that ignores
    ``copy=False``), which the producer never sees again."""
    numpy = _sys.modules.get("numpy")
    return (numpy is not None and type(owner) is numpy.ndarray and owner.base is None
            and Py_REFCNT(owner) <= 2)   # the View's reference, and ``owner`` here


cdef View _from_python_values(x, Spec spec, copy, name):
    """A Python list, tuple or number as the converters take it (_view_of_python_values),
    of the Spec's dtype when it names exactly one NumPy can hold (the values are
    converted, as numpy.asarray(x, dtype) does, so no cast=True is needed), else of the
    dtype NumPy infers."""
    dtype = None
    if copy is not False and len(spec._given_dtypes) == 1:
        try:
            dtype = (<object>spec._given_dtypes[0]).to_numpy()
        except TypeError:   # a type NumPy cannot hold: NumPy infers one, the check judges
            dtype = None
    return _view_of_python_values(x, dtype, copy, "require", name or "the argument")


cdef object _import_stream(x, stream):
    """The stream to import ``x`` with: the caller's, when ``x``'s memory is of a kind
    streams order (CUDA kinds, ROCm); None for memory no stream orders (host memory going
    to the caller's device is copied there on the caller's stream instead)."""
    if stream is None:
        return None
    cdef int64_t device_type
    if type(x) is View:
        device_type = (<View>x)._t.device.device_type
    else:
        method = getattr(type(x), "__dlpack_device__", None)
        if method is None:
            return stream if hasattr(x, "__cuda_array_interface__") else None
        try:
            device_type = method(x)[0]
        except Exception:
            return stream          # the import itself reports a broken producer
    if not 0 <= device_type <= 0x7FFFFFFF:
        return stream             # not a device type: the import refuses it
    return stream if _stream_ordered(<int32_t>device_type) else None
