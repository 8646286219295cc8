# Included by _core.pyx. arrayport.view(obj): one entry point for every protocol.
#
# The order (documented in docs/decisions.md), best first:
#   1. a View is returned as it is; a DLPack capsule is consumed;
#   2. DLPack: the type's C exchange API when it has one, else __dlpack__ (it carries the
#      device, read-only flag and stream semantics);
#   3. the CUDA Array Interface (device memory, before any host-only protocol);
#   4. the buffer protocol (PEP 3118);
#   5. __array_interface__;
#   6. an Arrow array (__arrow_c_device_array__, else __arrow_c_array__: read-only,
#      zero-copy; its refusal, which names the Arrow type, replaces DLPack's);
#   7. __array__ (the NumPy array it returns is kept alive);
#   8. an Arrow stream (__arrow_c_stream__), for types without an Arrow array: after
#      __array__, which is cheaper where it shares (Polars: 20x) and is the array's own
#      shape (a table's stream is its columns). When __array__ cannot share (pyarrow's
#      ChunkedArray never can; a Polars Series with nulls refuses), a column's stream
#      decides where it can: its View (one chunk), its NeedsCopy (several: joined, the
#      type kept); and a null anywhere in the column or table (_holds_nulls) is refused,
#      whatever the type, before __array__'s copy could turn it into NaN. A type the
#      stream cannot give (dictionary-encoded, booleans) leaves __array__'s copy to speak;
#      so does a table (its (rows, columns) shape): a table is read as its column only
#      from objects without __array__.
#   Lazy and labelled arrays have their rules at __array__ and are never read through
#   Arrow (xarray's stream is its table form, not its array).
# NumPy masked arrays are checked first: one with any masked element is refused (TypeError)
# rather than exported without its mask, which every one of these protocols would do.
# Which of these a type offers is worked out once per type and cached (instance-level
# __array_interface__ / __cuda_array_interface__ attributes are looked for on types whose
# instances have a __dict__). A protocol that refuses with BufferError (NumPy's DLPack
# refusing bfloat16, a View's buffer export refusing device memory…) hands over to the
# next one; if every one refuses, the first refusal is raised. Except one hand-over: an
# object whose CUDA Array Interface answered says its memory is device memory, so when that
# import refuses, its buffer protocol and __array_interface__ (which would describe the same
# pointer as host memory: hip-python's device arrays offer both) are not asked. TypeError and ValueError
# (bad arguments, malformed dicts) are raised at once. Nothing here ever copies.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_arrow.pxi: _ArrowTableDeferred, _holds_nulls, _view_from_arrow_protocol
#   _core_buffer.pxi: _view_from_buffer, _view_of_byte_string
#   _core_dlpack.pxi: _dlpack_view, _view_from_capsule
#   _core_exchange.pxi: _exchange_api_for, _view_via_exchange_api
#   _core_interface.pxi: _AI, _CAI, _view_from_ai_dict, _view_from_array_method,
#       _view_from_cai_dict
#   _core_numpy.pxi: _numpy_ndarray, _view_of_ndarray
#   _core_producers.pxi: NeedsCopy, _producer_kind, _refuse_masked
#   _core_streams.pxi: _order_after_pending
#   _core_view.pxi: View

cdef enum _Protocol:
    _P_MASK_CHECK = 0  # numpy.ma.MaskedArray: refuse if any element is masked
    _P_DLPACK = 1
    _P_CAI = 2
    _P_BUFFER = 3
    _P_AI = 4
    _P_ARRAY = 5
    _P_ARROW = 6
    _P_ARROW_STREAM = 7

cdef dict _plan_by_type = {}


cdef tuple _make_plan(object tp, object obj):
    plan = []
    masked = getattr(_sys.modules.get("numpy.ma"), "MaskedArray", None)
    if masked is not None and issubclass(tp, masked):
        plan.append(_P_MASK_CHECK)
    instance_attributes = getattr(tp, "__dictoffset__", 0) != 0
    if getattr(tp, "__dlpack__", None) is not None:
        plan.append(_P_DLPACK)
    if instance_attributes or hasattr(tp, "__cuda_array_interface__"):
        plan.append(_P_CAI)
    if PyObject_CheckBuffer(obj):
        plan.append(_P_BUFFER)
    if instance_attributes or hasattr(tp, "__array_interface__"):
        plan.append(_P_AI)
    kind = _producer_kind(tp)
    arrow = kind != _LAZY and kind != _LABELLED
    arrow_array = arrow and (getattr(tp, "__arrow_c_device_array__", None) is not None
                             or getattr(tp, "__arrow_c_array__", None) is not None)
    if arrow_array:
        plan.append(_P_ARROW)
    if getattr(tp, "__array__", None) is not None:
        plan.append(_P_ARRAY)
    if arrow and not arrow_array and getattr(tp, "__arrow_c_stream__", None) is not None:
        plan.append(_P_ARROW_STREAM)
    return tuple(plan)


# One-entry cache in front of the dict: (type, plan) in one object, so that a reader on
# another thread never pairs one type with another type's plan.
cdef tuple _last_plan = (None, None)


cdef inline tuple _plan_for(object obj):
    global _last_plan
    tp = type(obj)
    cdef tuple last = _last_plan
    if last[0] is tp:
        return <tuple>last[1]
    plan = _plan_by_type.get(tp)
    if plan is None:
        plan = _make_plan(tp, obj)
        if len(_plan_by_type) >= _TYPE_CACHE_LIMIT:
            _plan_by_type.clear()
        _plan_by_type[tp] = plan
    _last_plan = (tp, plan)
    return <tuple>plan


cdef View _view_by(int protocol, object obj, object stream, bint exchange_tried,
                   bint* described_device):
    """A View of ``obj`` through one protocol; None when ``obj`` turns out not to offer
    it after all (an instance attribute that is absent). ``exchange_tried``: DLPack's C
    exchange API was already asked (its tensor was on a device, or it refused).
    ``described_device`` is set once a CUDA Array Interface dict was read: the object says
    its memory is device memory, whatever becomes of the import."""
    if protocol == _P_DLPACK:
        return _dlpack_view(obj, stream, exchange_tried)
    if protocol == _P_MASK_CHECK:
        _refuse_masked(obj)
        return None  # nothing masked: the data is the whole truth
    if protocol == _P_CAI:
        d = _interface_attribute(obj, "__cuda_array_interface__", _CAI)
        if d is None:
            return None
        described_device[0] = True
        return _view_from_cai_dict(d, obj, stream)
    if protocol == _P_BUFFER:
        _check_host_stream(stream, "buffer")
        return _view_from_buffer(obj, obj, "buffer")
    if protocol == _P_AI:
        d = _interface_attribute(obj, "__array_interface__", _AI)
        if d is None:
            return None
        _check_host_stream(stream, _AI)
        return _view_from_ai_dict(d, obj)
    if protocol == _P_ARROW or protocol == _P_ARROW_STREAM:
        # A table is read as its column only from an object without __array__, whose
        # array is otherwise what NumPy's protocol says it is.
        return _view_from_arrow_protocol(obj, stream,
                                         getattr(type(obj), "__array__", None) is None)
    _check_host_stream(stream, "array")
    return _view_from_array_method(obj)


from cpython.object cimport PyObject as _PyObject

cdef extern from "Python.h":
    _PyObject* _PyType_Lookup(PyTypeObject* tp, object name)   # borrowed, no exception


cdef object _interface_attribute(object obj, str name, str protocol):
    """``obj.<name>``, None when absent: the type's attribute (a property), else the
    instance's own, read from its ``__dict__`` — never through a ``__getattr__`` fallback,
    which some libraries make slow (4 us per missing name on a Polars Series: ap.view of
    one took 11 us, now 2.5). A property
    that fails otherwise (PyTorch's __cuda_array_interface__ raises RuntimeError for a
    sparse CSR tensor while wording its AttributeError) is the producer refusing: a
    BufferError naming it."""
    tp = type(obj)
    if _PyType_Lookup(<PyTypeObject*>tp, name) == NULL:
        # Not the type's (looked up in its MRO directly: a metaclass __getattr__, which
        # Polars has, makes getattr on the type as slow as on the instance).
        instance = getattr(obj, "__dict__", None)
        return (<dict>instance).get(name) if type(instance) is dict else None
    try:
        return getattr(obj, name, None)
    except Exception as error:
        tp = type(obj)
        raise BufferError(f"{protocol}: reading {tp.__module__}.{tp.__qualname__}.{name} "
                          f"failed: {type(error).__name__}: {error}") from error


cdef inline int _check_host_stream(object stream, str protocol) except -1:
    if stream is not None:
        raise ValueError(f"{protocol}: stream must be None for host memory (this protocol "
                         f"describes host memory only), got {stream!r}")
    return 0


def view(obj, /, *, stream=None):
    """A View of ``obj``'s memory through the best protocol it offers, never a copy.

    The protocols are tried in this order: a View (returned as it is) or a DLPack capsule;
    DLPack (the C exchange API, else ``__dlpack__``); the CUDA Array Interface; the buffer
    protocol; ``__array_interface__``; the Arrow PyCapsule protocol (``__arrow_c_array__``,
    read-only); ``__array__(copy=False)``. A protocol that refuses
    with ``BufferError`` hands over to the next.

    Parameters
    ----------
    obj : object
        Any array: a NumPy, PyTorch, JAX, CuPy, pyarrow or tvm-ffi array, ``bytes``, a
        ``memoryview``, an object with ``__array_interface__``, a DLPack capsule...
    stream : int, optional
        The CUDA/ROCm stream the caller will use the data on (DLPack stream values); the
        producer orders its pending work before it. ``None`` for host memory.

    Returns
    -------
    View
        Sharing ``obj``'s memory and keeping it alive; ``View.protocol`` names the protocol
        used.

    Raises
    ------
    BufferError
        No protocol gives a zero-copy view (``NeedsCopy``, a ``BufferError``, when only a
        copy would do), or the producer's export is malformed.
    TypeError
        ``obj`` offers no array protocol, or ``stream`` is not a stream.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> v = ap.view(a)
    >>> v.shape, v.dtype, v.protocol
    ((2, 3), DType('float32'), 'dlpack')
    >>> np.asarray(v)[0, 0] = 7
    >>> float(a[0, 0])
    7.0
    """
    return _view(obj, stream)


cdef View _view(obj, stream):
    if type(obj) is View:
        if stream is not None:
            _order_after_pending(<View>obj,
                                 check_stream(stream, (<View>obj)._t.device.device_type))
        return obj
    if PyCapsule_CheckExact(obj):
        if stream is not None:
            raise ValueError("view: a DLPack capsule was already produced; a stream cannot "
                             "apply to it")
        return _view_from_capsule(obj, obj)
    cdef View result
    cdef uintptr_t api
    cdef bint exchange_tried = False
    first_refusal = None
    if stream is None and type(obj) is _numpy_ndarray:
        result = _view_of_ndarray(obj)
        if result is not None:
            return result
    if stream is None and (type(obj) is bytes or type(obj) is bytearray):
        # Their one protocol is the buffer, with a layout known in advance: built directly
        # (tests/test_buffer_protocol.py holds them to View.from_buffer).
        return _view_of_byte_string(obj, type(obj) is bytes)
    if stream is None and type(obj) is memoryview:
        # Its one protocol is the buffer (what its plan says, without the two cache lookups
        # and the walk).
        return _view_from_buffer(obj, obj, "buffer")
    # The fastest protocol first, before the plan: a type's C exchange API, streams and all
    # (the table names the producer's stream: _core_exchange.pxi). Asked once: the plan's
    # DLPack step then goes straight to __dlpack__.
    api = _exchange_api_for(type(obj))
    if api != 0:
        exchange_tried = True
        try:
            result = _view_via_exchange_api(obj, api, stream)
        except NeedsCopy:
            raise  # the memory does not hold the values: no protocol can share them
        except BufferError as refusal:
            first_refusal = refusal
            result = None
        if result is not None:
            return result
    cdef tuple plan = _plan_for(obj)
    cdef bint on_a_device = False    # its CUDA Array Interface answered (and refused)
    array_copies = None           # __array__'s NeedsCopy, while a stream may still share
    for protocol in plan:
        if on_a_device and (protocol == _P_BUFFER or protocol == _P_AI):
            continue            # they would read device memory as host memory
        try:
            result = _view_by(protocol, obj, stream, exchange_tried, &on_a_device)
        except NeedsCopy as needs:
            # __array__ could only copy: when DLPack already refused, its refusal stands
            # (a converter resolving through __array__ would copy what DLPack would not
            # export, e.g. densify a sparse tensor); a producer's lazy bits stand anyway.
            if protocol == _P_ARRAY and first_refusal is not None:
                raise first_refusal
            if protocol == _P_ARRAY and plan[len(plan) - 1] == _P_ARROW_STREAM:
                array_copies = needs
                continue
            raise
        except _ArrowTableDeferred:
            continue            # a table with __array__: its array was asked there
        except BufferError as refusal:
            if _holds_nulls(refusal):
                raise           # nulls: any copy through __array__ would make NaN of them
            if protocol == _P_ARROW_STREAM and array_copies is not None:
                continue        # a type the stream cannot give: __array__'s copy may
            if first_refusal is None or protocol == _P_ARROW:
                # Of an Arrow object, Arrow's refusal names the type and what to do
                # (nulls, strings), where its DLPack export's only says "not supported".
                first_refusal = refusal
            continue
        if result is not None:
            return result
    if array_copies is not None:
        raise array_copies
    if first_refusal is not None:
        raise first_refusal
    tp = type(obj)
    raise TypeError(f"view: {tp.__module__}.{tp.__qualname__} offers no array protocol "
                    f"(__dlpack__, __cuda_array_interface__, the buffer protocol, "
                    f"__array_interface__, __array__ or Arrow's __arrow_c_array__ / "
                    f"__arrow_c_stream__)")


def protocol_plan(tp):
    """The protocols ``view`` tries for instances of type ``tp``, in order (as cached)."""
    names = {_P_MASK_CHECK: "mask_check", _P_DLPACK: "dlpack", _P_CAI: "cuda_array_interface", _P_BUFFER: "buffer",
             _P_AI: "array_interface", _P_ARRAY: "array", _P_ARROW: "arrow",
             _P_ARROW_STREAM: "arrow_stream"}
    plan = _plan_by_type.get(tp)
    return None if plan is None else tuple(names[p] for p in plan)
