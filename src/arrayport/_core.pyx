# cython: language_level=3
# Cython's checks stay on (boundscheck, wraparound, Python division): indexing and dividing
# Python objects that user code handed in must raise, never read past a tuple's end.
# C arrays and pointers are never checked by Cython; every one of their indexes is bounded
# by a validated ndim (<= MAX_NDIM) — see the "who checks what" list in docs/reliability.md.
"""arrayport._core — the one compiled module that owns all of arrayport's C state.

It holds:
- ``View``: an immutable description of strided memory (a DLTensor plus flags) and the
  reference that keeps that memory alive;
- DLPack import (capsule → View) with full validation, and export (View → capsule);
- host copies into memory arrayport allocates;
- the private live counters the lifetime tests read.

Who owns what:
- A View imported from a DLPack capsule owns the producer's managed tensor: the View's
  deallocation calls the producer's deleter exactly once. ``View.owner`` is the object the
  data came from (the producer array, or the capsule itself).
- A View made from a raw pointer (array interface, buffer…) owns nothing in C; it holds a
  strong reference to the object that keeps the memory alive.
- A capsule exported from a View holds a strong reference to that View; the deleter we
  hand out (core_support.h) drops it, from any thread.
"""

# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_arrow.pxi: _view_arrow_array, _view_arrow_device_array, _view_arrow_schema,
#       _view_arrow_stream, _view_from_arrow_given, _view_from_arrow_protocol
#   _core_buffer.pxi: _fill_buffer, _view_from_buffer
#   _core_capi.pxi: _exchange_api_capsule
#   _core_exchange.pxi: _exchange_api_for, _view_via_exchange_api
#   _core_hooks.pxi: _array_function_hook, _array_ufunc_hook, _copy_view_hook,
#       _from_dlpack_options_hook, _from_shared_hook, _hook, _ndarray_fallback_hook,
#       _reduce_view_hook, _share_hook
#   _core_layout.pxi: _as_readonly, _data_is_address, _getitem, _is_integer_index, _permuted,
#       _plain_int, _reinterpreted, _reshaped, _reversed_axes
#   _core_interface.pxi: _array_interface_of, _cuda_array_interface_of, _ndarray_of,
#       _view_from_ai_object, _view_from_array_method, _view_from_cai_object,
#       _view_from_layout
#   _core_numpy.pxi: _NOT_FAST, _array_function_fast, _check_ufunc_call, _is_ndarray_type,
#       _load_numpy, _numpy_ndarray, _ufunc_fast, _view_of_ndarray, _wrap_result
#   _core_producers.pxi: NeedsCopy, _finish_import, _producer_failure,
#       _paddle_tracks_grad, _producer_kind, _producer_refusal, _refuse_masked,
#       _refuse_unexportable, _resolved_view, _torch_before_export
#   _core_streams.pxi: _dlpack_import_needs_streams, _host_wait_for_pending,
#       _note_dlpack_import, _order_after_pending, _stream_argument, _stream_to_ask_producer
include "_core_base.pxi"


def live_counts():
    """Private lifetime counters: exported managed tensors not yet deleted, imported
    managed tensors still held, host copy buffers still allocated, Py_buffer exports of
    other objects still held, tensors made by the exchange-API allocator not yet deleted."""
    return {
        "exported": ap_counter_get(&ap_live_exported),
        "imported": ap_counter_get(&ap_live_imported),
        "host_buffers": ap_counter_get(&ap_live_host_buffers),
        "buffer_leases": ap_counter_get(&ap_live_buffer_leases),
        "allocated": ap_counter_get(&ap_live_allocated),
    }


@cython.final
@cython.no_gc_clear
cdef class HostBuffer:
    """Host memory arrayport allocated (64-byte aligned) to hold a copy. Freed with the
    last View on it."""

    cdef void* ptr
    cdef readonly Py_ssize_t nbytes

    def __cinit__(self, Py_ssize_t nbytes):
        if nbytes < 0:
            raise ValueError("HostBuffer: nbytes must be >= 0")
        self.ptr = ap_host_alloc(<size_t>nbytes)
        if self.ptr == NULL:
            raise MemoryError(f"arrayport: cannot allocate {nbytes} bytes of host memory")
        self.nbytes = nbytes
        ap_counter_add(&ap_live_host_buffers, 1)

    def __dealloc__(self):
        if self.ptr != NULL:
            free(self.ptr)
            self.ptr = NULL
            ap_counter_add(&ap_live_host_buffers, -1)

    @property
    def address(self):
        return <uintptr_t>self.ptr

    def __repr__(self):
        return f"<arrayport.HostBuffer {self.nbytes} bytes at {<uintptr_t>self.ptr:#x}>"


@cython.final
@cython.freelist(64)
cdef class View:
    """An immutable view of strided memory on any DLPack device.

    Make one with ``arrayport.view(obj)``, ``arrayport.from_dlpack(obj)`` or a
    ``View.from_*`` constructor; it keeps the memory alive (``owner``) and exports it again
    through every protocol its memory allows: ``__dlpack__``, ``__cuda_array_interface__``,
    ``__array_interface__``, the buffer protocol and ``__array__``. Strides are in bytes
    (NumPy's convention); ``element_strides`` gives DLPack's.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> v = ap.view(np.zeros((2, 3), np.int16))
    >>> v.shape, v.strides, v.itemsize, str(v.device)
    ((2, 3), (6, 2), 2, 'cpu')
    >>> v.T.shape, v[1:, ::2].shape
    ((3, 2), (1, 2))
    >>> bytes(memoryview(v)) == bytes(12)
    True
    """

    cdef APDLTensor _t          # shape/strides point into _dims
    cdef int64_t* _dims         # shape[ndim] then strides[ndim] (elements)
    cdef int64_t _inline_dims[2 * INLINE_NDIM]
    cdef int64_t _size
    cdef int64_t _nbytes        # from extent.h: the only byte count copies and exports use
    cdef uint64_t _flags        # READ_ONLY | IS_COPIED | IS_SUBBYTE_TYPE_PADDED
    cdef object _owner          # what keeps the memory alive (reported as .owner)
    cdef void* _managed         # imported managed tensor we must delete, or NULL
    cdef bint _managed_versioned
    cdef str _protocol
    cdef object _lease          # a _BufferLease whose Py_buffer this View reads, or None
    cdef object _stream         # CUDA stream with pending work on the data (CAI), or None
    cdef object _producer_stream  # the CAI producer's own stream, when the data was handed
                                # over to another (_stream): it must not write again
                                # before work arrayport enqueues on the data is done
    cdef Py_ssize_t* _buffer_dims  # shape, byte strides for buffer exports (lazy; owned)
    cdef object __weakref__

    # The DLPack 1.3 C exchange API (_core_capi.pxi): looked up on the type by consumers.
    __dlpack_c_exchange_api__ = _exchange_api_capsule()

    def __cinit__(self):
        self._dims = self._inline_dims
        self._managed = NULL
        self._buffer_dims = NULL

    def __init__(self, *args, **kwargs):
        raise TypeError("arrayport.View cannot be constructed directly; use "
                        "arrayport.from_dlpack(obj) or View.from_dlpack(obj)")

    def __dealloc__(self):
        if self._managed != NULL:
            ap_call_deleter(self._managed, self._managed_versioned)
            self._managed = NULL
            ap_counter_add(&ap_live_imported, -1)
        if self._dims != self._inline_dims:
            free(self._dims)
            self._dims = self._inline_dims
        free(self._buffer_dims)
        self._buffer_dims = NULL

    cdef int _reserve_dims(self, int ndim) except -1:
        if ndim > INLINE_NDIM:
            self._dims = <int64_t*>malloc(2 * ndim * sizeof(int64_t))
            if self._dims == NULL:
                self._dims = self._inline_dims
                raise MemoryError()
        self._t.shape = self._dims
        self._t.strides = self._dims + ndim
        return 0

    def __class_getitem__(cls, item):
        """``View[Float32]`` in annotations (arrayport.typing): the element type, for type
        checkers; at run time the class itself."""
        return _GenericAlias(cls, item)

    # ---- named constructors ----------------------------------------------------------------

    @staticmethod
    def from_dlpack(obj, /, *, device=None, copy=None, stream=None):
        """A View from any object with ``__dlpack__`` or from a DLPack capsule.

        The same as ``arrayport.from_dlpack``, which says more.

        Parameters
        ----------
        obj : object
            An object with ``__dlpack__``, or a DLPack capsule.
        device : Device, str or tuple, optional
            Where the data should be; a copy when it lives elsewhere.
        copy : bool, optional
            ``True`` always copies, ``False`` never does.
        stream : int, optional
            The CUDA/ROCm stream the caller will use the data on.

        Returns
        -------
        View
        """
        return from_dlpack(obj, device=device, copy=copy, stream=stream)

    @staticmethod
    def from_cuda_array_interface(obj, /):
        """A View of ``obj.__cuda_array_interface__`` (versions 0–3), which keeps ``obj`` alive.

        Its device comes from the driver: which GPU, or pinned or managed memory.

        Parameters
        ----------
        obj : object

        Returns
        -------
        View

        Raises
        ------
        BufferError
            ``obj`` does not offer the protocol, or what it offers is malformed.
        """
        return _view_from_cai_object(obj)

    @staticmethod
    def from_array_interface(obj, /):
        """A View of ``obj.__array_interface__`` (version 3), which keeps ``obj`` alive.

        Parameters
        ----------
        obj : object

        Returns
        -------
        View

        Raises
        ------
        BufferError
            ``obj`` does not offer the protocol, or what it offers is malformed.
        """
        return _view_from_ai_object(obj)

    @staticmethod
    def from_arrow(obj, /, *, stream=None):
        """A read-only View of an Arrow array, through the Arrow PyCapsule protocol
        (``obj.__arrow_c_array__()``; ``__arrow_c_device_array__()`` when a ``stream`` is
        named or the data is not on the host; else ``__arrow_c_stream__()``) or given as
        its capsules: a (schema, array) or (schema, device array) pair, or a stream capsule.

        Fixed-width numbers give a 1-D View (the array's offset applied), fixed-size lists
        of them an n-D one, and the ``arrow.fixed_shape_tensor`` extension its cells'
        shape and permutation; a one-column struct (record batch) gives its column. A
        device array is a View on its device. Each Arrow array is released exactly once,
        when the last View on it is gone.

        Parameters
        ----------
        obj : object
        stream : int or None
            For device arrays, the consumer's stream (DLPack's values; None: the default
            stream), which waits for the array's sync event.

        Returns
        -------
        View

        Raises
        ------
        NeedsCopy
            A stream of several arrays (joining them is a copy; the converters make it).
        BufferError
            Nulls (a View has no validity mask), a type with no strided form (booleans,
            strings, lists of variable size...), or a malformed or released struct.
        """
        if type(obj) is tuple and len(<tuple>obj) == 2:
            return _view_from_arrow_given(<tuple>obj, stream)
        if PyCapsule_IsValid(obj, b"arrow_array_stream"):
            return _view_from_arrow_given((obj,), stream)
        tp = type(obj)
        if (getattr(tp, "__arrow_c_device_array__", None) is None
                and getattr(tp, "__arrow_c_array__", None) is None
                and getattr(tp, "__arrow_c_stream__", None) is None):
            raise BufferError(f"arrow: {tp.__name__} offers no Arrow PyCapsule protocol "
                              f"(__arrow_c_device_array__, __arrow_c_array__, "
                              f"__arrow_c_stream__)")
        return _view_from_arrow_protocol(obj, stream)

    @staticmethod
    def from_buffer(obj, /):
        """A View of ``obj``'s buffer (PEP 3118), which keeps ``obj`` alive.

        The ``Py_buffer`` is held until the last View on it dies.

        Parameters
        ----------
        obj : object

        Returns
        -------
        View

        Raises
        ------
        BufferError
            ``obj`` does not offer the protocol, or what it offers is malformed.
        """
        return _view_from_buffer(obj, obj, "buffer")

    @staticmethod
    def from_array(obj, /):
        """A View of the NumPy array ``obj.__array__()`` returns, kept alive by the View.

        Whether it shares ``obj``'s memory is up to ``obj``.

        Parameters
        ----------
        obj : object

        Returns
        -------
        View

        Raises
        ------
        BufferError
            ``obj`` does not offer the protocol, or what it offers is malformed.
        """
        return _view_from_array_method(obj)

    # ---- metadata ---------------------------------------------------------------------------

    @property
    def ndim(self):
        """Number of dimensions."""
        return self._t.ndim

    @property
    def shape(self):
        """Extents, one per dimension (a tuple of ints)."""
        return tuple([self._t.shape[i] for i in range(self._t.ndim)])

    @property
    def element_strides(self):
        """Strides in elements, as DLPack counts them."""
        return tuple([self._t.strides[i] for i in range(self._t.ndim)])

    @property
    def strides(self):
        """Strides in bytes (NumPy's convention). ``None`` for packed sub-byte types, whose
        elements have no byte address; such views are always C-contiguous."""
        cdef int64_t itemsize = self._itembits()
        if itemsize % 8:
            return None
        itemsize //= 8
        return tuple([self._t.strides[i] * itemsize for i in range(self._t.ndim)])

    @property
    def size(self):
        """Number of elements (the product of the shape)."""
        return self._size

    @property
    def itemsize(self):
        """Bytes per element; ``None`` for packed sub-byte types (see ``dtype.bits``)."""
        cdef int64_t bits = self._itembits()
        return None if bits % 8 else bits // 8

    @property
    def nbytes(self):
        """Bytes the elements occupy (packed sub-byte types round up to whole bytes)."""
        return self._nbytes

    @property
    def dtype(self):
        """The element type, a DType (every DLPack 1.3 type)."""
        cdef APDLDataType d = self._t.dtype
        cdef bint padded = (self._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED) != 0 and d.bits < 8
        key = (d.code, d.bits, d.lanes, padded)
        dtype = _dtype_cache.get(key)
        if dtype is None:
            dtype = _dtypes._make(d.code, d.bits, d.lanes, padded)
            _dtype_cache[key] = dtype
        return dtype

    @property
    def device(self):
        """Where the memory is: a Device, e.g. Device("cuda:1")."""
        key = (self._t.device.device_type, self._t.device.device_id)
        device = _device_cache.get(key)
        if device is None:
            device = _device_cache[key] = Device(*key)
        return device

    @property
    def ptr(self):
        """Address of the first element: data pointer plus byte_offset."""
        return <uintptr_t>self._t.data + <uintptr_t>self._t.byte_offset

    @property
    def readonly(self):
        """Whether the memory may not be written through this View (exports say so too)."""
        return (self._flags & APDL_FLAG_READ_ONLY) != 0

    @property
    def is_copy(self):
        """True when this memory is a copy made for this View (by arrayport or the producer)."""
        return (self._flags & APDL_FLAG_IS_COPIED) != 0

    @property
    def is_c_contiguous(self):
        """Whether the elements lie in C (row-major) order without gaps."""
        return ap_is_c_contiguous(self._t.ndim, self._t.shape, self._t.strides) != 0

    @property
    def is_f_contiguous(self):
        """Whether the elements lie in Fortran (column-major) order without gaps."""
        return ap_is_f_contiguous(self._t.ndim, self._t.shape, self._t.strides) != 0

    @property
    def owner(self):
        """The object that keeps this memory alive; None when it is a managed tensor handed
        over through C (the exchange API or arrayport's C API), which the View deletes."""
        return self._owner

    @property
    def protocol(self):
        """How the View was made: "dlpack", "cuda_array_interface", "buffer",
        "array_interface", "array" (``__array__``) or "copy"."""
        return self._protocol

    def __repr__(self):
        flags = " readonly" if self.readonly else ""
        if self.is_copy:
            flags += " copy"
        owner = type(self._owner)
        owner_name = ("a C managed tensor" if self._owner is None
                      else f"{owner.__module__}.{owner.__qualname__}")
        return (f"<arrayport.View {self.dtype.name}{list(self.shape)} on {self.device}"
                f" strides={self.strides} ptr={self.ptr:#x}{flags}"
                f" via {self._protocol} owner={owner_name}>")

    cdef inline int64_t _itembits(self) noexcept:
        cdef int64_t bits = self._t.dtype.bits
        if bits < 8 and (self._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED):
            bits = 8
        return bits * self._t.dtype.lanes

    # ---- DLPack export ----------------------------------------------------------------------

    def __dlpack_device__(self):
        return (_DEVICE_TYPES[self._t.device.device_type], self._t.device.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (array API standard semantics).

        ``max_version`` ≥ (1, 0) gives a versioned 1.3 capsule ("dltensor_versioned");
        ``None`` or (0, x) a legacy capsule ("dltensor"), refused for read-only views since
        a legacy capsule cannot say "read-only". ``dl_device``/``copy`` follow the standard;
        a copy sets IS_COPIED.
        """
        cdef View source = self
        cdef bint versioned
        if max_version is None:
            versioned = False
        elif type(max_version) is tuple and len(<tuple>max_version) == 2:
            # Compared as Python ints: a consumer may name any version, however large.
            versioned = _checked_int(max_version[0], "max_version") >= 1
            _checked_int(max_version[1], "max_version")
        else:
            raise TypeError(f"dlpack: max_version must be a (major, minor) tuple of ints, "
                            f"got {max_version!r}")
        if (stream is not None or dl_device is not None or copy is not None
                or self._stream is not None):
            source = self._export_source(stream, dl_device, copy)
        if versioned:
            return source._export_versioned(copy is True)
        return source._export_legacy()

    cdef View _export_source(self, stream, dl_device, copy):
        """The View to export once stream, dl_device and copy are honoured."""
        if copy is not None and type(copy) is not bool:
            raise TypeError(f"dlpack: copy must be True, False or None, got {copy!r}")
        cdef int32_t target_type = self._t.device.device_type
        cdef int32_t target_id = self._t.device.device_id
        if dl_device is not None:
            target_type, target_id = _parse_dl_device(dl_device)
        stream = check_stream(stream, target_type)
        same_device = (target_type == self._t.device.device_type
                       and target_id == self._t.device.device_id)
        if not same_device:
            if target_type == APDL_CPU and _host_accessible(self._t.device.device_type) and not copy:
                # Pinned host memory is CPU memory too: relabel without copying, once the
                # GPU work pending on it is done (the spec's rule for kDLCPU exports).
                _host_wait_for_pending(self)
                return self._relabelled_as_cpu()
            if copy is False:
                raise ValueError(f"dlpack: exporting {self.device} memory to "
                                 f"{Device(target_type, target_id)} needs a copy, but "
                                 f"copy=False")
            return self._copy_for_export(Device(target_type, target_id), stream)
        if copy:
            return self._copy_for_export(None, stream)
        _order_after_pending(self, stream)
        return self

    cdef View _copy_for_export(self, target, stream):
        """A copy for a consumer: on ``target`` (None: here), on the consumer's stream."""
        return _hook(_copy_view_hook, "copy_view")(
            self, target, None if stream == -1 else stream, "dlpack")

    cdef View _relabelled_as_cpu(self):
        cdef View v = _new_view_like(self, self, "dlpack")
        v._t.device.device_type = APDL_CPU
        v._t.device.device_id = 0
        return v

    cdef APDLManagedTensorVersioned* _export_managed(self, bint copied) except NULL:
        """An owning versioned managed tensor of this View (for a capsule, the exchange
        API or the C API). It holds a reference to the View until its deleter runs."""
        cdef APDLManagedTensorVersioned* m = ap_alloc_exported_versioned(self._t.ndim)
        self._fill_exported(&m.dl_tensor)
        m.flags = self._flags & (APDL_FLAG_READ_ONLY | APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
        if copied:
            m.flags |= APDL_FLAG_IS_COPIED
        Py_INCREF(self)  # the export's reference, dropped by its deleter
        m.manager_ctx = <void*>self
        return m

    cdef object _export_versioned(self, bint copied):
        return ap_capsule_for_export(self._export_managed(copied), True)

    cdef object _export_legacy(self):
        if self._flags & APDL_FLAG_READ_ONLY:
            # The consumer's own importer asked for the old capsule (jax.dlpack.from_dlpack,
            # tf.experimental.dlpack, ...); its user cannot change what it asks for, so the
            # message names arrayport's route, which gives each library what it can hold.
            raise BufferError("dlpack: a read-only View cannot be exported as a legacy "
                              "(unversioned) capsule, which has no read-only flag, and this "
                              "consumer asked for one (no max_version); convert with "
                              "arrayport.to(x, \"jax\") (or \"tensorflow\", \"torch\", ...): "
                              "it shares where the library keeps the data read-only and "
                              "copies where it would not. Library authors: pass "
                              "max_version=(1, 0) to __dlpack__")
        return self._export_legacy_writable_or_immutable()

    cdef object _export_legacy_writable_or_immutable(self):
        """A legacy capsule, for a writable View or a consumer that never writes."""
        if self._t.dtype.bits < 8 and (self._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED):
            raise BufferError("dlpack: a padded sub-byte View cannot be exported as a legacy "
                              "capsule, which cannot say it is padded")
        cdef APDLManagedTensor* m = ap_alloc_exported_legacy(self._t.ndim)
        self._fill_exported(&m.dl_tensor)
        Py_INCREF(self)  # the export's reference, dropped by its deleter
        m.manager_ctx = <void*>self
        return ap_capsule_for_export(m, False)

    cdef inline void _fill_exported(self, APDLTensor* out) noexcept:
        cdef int64_t* shape = out.shape
        cdef int64_t* strides = out.strides
        out[0] = self._t
        out.shape = shape
        out.strides = strides
        memcpy(shape, self._t.shape, self._t.ndim * sizeof(int64_t))
        memcpy(strides, self._t.strides, self._t.ndim * sizeof(int64_t))

    # ---- host and CUDA protocol exports (_core_interface.pxi, _core_buffer.pxi) ------------

    # ---- the Arrow C data interface (_core_arrow.pxi) -------------------------------------

    def __arrow_c_schema__(self):
        """The Arrow schema of this View's Arrow export, as an "arrow_schema" capsule: a
        fixed-width number for a 1-D View, nested fixed-size lists for an n-D one."""
        return _view_arrow_schema(self)

    def __arrow_c_array__(self, requested_schema=None):
        """This View as an Arrow array, zero-copy: ("arrow_schema", "arrow_array")
        capsules (the Arrow PyCapsule protocol; ``pa.array(view)`` reads it). C-contiguous
        host memory of a fixed-width number type only (BufferError otherwise); the View
        stays alive until the consumer releases the array. ``requested_schema`` is checked
        to be a schema capsule and otherwise ignored (the export is this View's schema)."""
        return _view_arrow_array(self, requested_schema)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        """This View as an Arrow device array, zero-copy: ("arrow_schema",
        "arrow_device_array") capsules with the View's device and, when work is pending on
        it, a sync event the consumer waits on (kept until its release). Keywords the
        interface may define later are accepted with the value None."""
        return _view_arrow_device_array(self, requested_schema, kwargs)

    def __arrow_c_stream__(self, requested_schema=None):
        """This View as an Arrow stream of one array (an "arrow_array_stream" capsule),
        zero-copy: what readers of tables and streams (DuckDB, ``pa.table``) take. Host
        memory only, as ``__arrow_c_array__``."""
        return _view_arrow_stream(self, requested_schema)

    @property
    def __array_interface__(self):
        """NumPy array interface, version 3 — host-readable memory only (AttributeError
        otherwise, so ``hasattr`` tells the truth)."""
        return _array_interface_of(self)

    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface, version 3 — CUDA, CUDA-managed and pinned host memory only
        (AttributeError otherwise). ``stream`` is the stream with pending work, or None."""
        return _cuda_array_interface_of(self)

    def __array__(self, dtype=None, copy=None):
        """A NumPy array of this View (NumPy 2 semantics): shared memory unless ``dtype``
        needs a conversion or ``copy=True``; ``copy=False`` raises ValueError when a copy is
        needed. bfloat16/float8/… become ml_dtypes arrays."""
        return _ndarray_of(self, dtype, copy)

    # ---- NumPy's dispatch protocols (_core_numpy.pxi, arrayport/numpy_dispatch.py) ---------
    # NumPy functions run on the library that owns the View's device (NumPy for host memory,
    # CuPy for CUDA memory) over zero-copy arrays of the inputs; array results come back as
    # Views, scalars as scalars. What cannot run where the data is gives NotImplemented, so
    # NumPy raises its TypeError: never a silent copy between devices.

    # Above ndarray (0.0) and numpy.matrix (10.0): where NumPy picks the input whose
    # __array_wrap__ shapes a result, a View's wins over an ndarray's.
    __array_priority__ = 20.0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _check_ufunc_call(ufunc, method, inputs, kwargs)
        result = _ufunc_fast(ufunc, method, inputs, kwargs)
        if result is _NOT_FAST:
            return _hook(_array_ufunc_hook, "array_ufunc")(ufunc, method, inputs, kwargs)
        return result

    def __array_function__(self, func, types, args, kwargs):
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise TypeError(f"__array_function__: args must be a tuple and kwargs a dict (as "
                            f"NumPy passes them), got {type(args).__name__} and "
                            f"{type(kwargs).__name__}")
        if not callable(func):
            raise TypeError(f"__array_function__: func must be callable, got "
                            f"{type(func).__name__}")
        result = _array_function_fast(func, tuple(types), args, kwargs)
        if result is _NOT_FAST:
            return _hook(_array_function_hook, "array_function")(func, types, args, kwargs)
        return result

    def __array_wrap__(self, array, context=None, return_scalar=False):
        """NumPy's result ``array`` of a computation on this View, as a View (a 0-d result
        as a scalar when NumPy asks for one)."""
        _load_numpy()
        if not isinstance(array, _numpy_ndarray):
            raise TypeError(f"__array_wrap__: expected the numpy.ndarray NumPy computed, got "
                            f"{type(array).__name__}")
        if return_scalar:
            return array[()]
        return _wrap_result(array)

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        _fill_buffer(self, buffer, flags)
        buffer.obj = self


    # ---- zero-copy layout operations (_core_layout.pxi) -----------------------------------
    # Metadata only, on any device; the result keeps this View's memory alive, its
    # read-only flag, device and pending stream. NumPy's indexing rules apply.

    def __getitem__(self, key):
        """Basic indexing: integers, slices (negative steps too), ``...`` and ``None``;
        always a View (an integer per axis gives a 0-d View). IndexError out of range;
        advanced (array, boolean) indexes are refused: they would copy."""
        return _getitem(self, key)

    @property
    def T(self):
        """The axes reversed (NumPy's ``.T``)."""
        return _reversed_axes(self, False)

    @property
    def mT(self):
        """The last two axes swapped (the array API's matrix transpose)."""
        if self._t.ndim < 2:
            raise ValueError(f"View.mT: needs at least 2 dimensions, the View has "
                             f"{self._t.ndim}")
        return _reversed_axes(self, True)

    def permute(self, *axes):
        """The same memory with its axes in the order given (metadata only).

        Parameters
        ----------
        *axes : int or tuple of int
            ``v.permute(2, 0, 1)`` or ``v.permute((2, 0, 1))``; negatives count from the end.
            None given reverses the axes, as ``T``.

        Returns
        -------
        View

        Raises
        ------
        ValueError
            The axes are not a permutation of the View's.

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> ap.view(np.zeros((2, 3, 4))).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        if len(axes) == 1 and not _is_integer_index(axes[0]):
            axes = tuple(axes[0])
        if not axes:
            return self.T
        return _permuted(self, axes)

    def reshape(self, *shape):
        """The same elements, in C order, seen with another shape — never a copy.

        Parameters
        ----------
        *shape : int or tuple of int
            ``v.reshape(2, 3)`` or ``v.reshape((2, 3))``; one extent may be -1.

        Returns
        -------
        View

        Raises
        ------
        ValueError
            The sizes differ, or the strides need a copy for this shape (the message names
            ``copy()``).

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> ap.view(np.arange(6)).reshape(2, -1).shape
        (2, 3)
        """
        if len(shape) == 1 and not _is_integer_index(shape[0]):
            shape = shape[0]
        return _reshaped(self, shape)

    def view_as(self, dtype):
        """The same bytes read as another type (``ndarray.view(dtype)``'s rules).

        Parameters
        ----------
        dtype : DType, str or numpy.dtype
            A type of the same size keeps the layout; another size rescales the contiguous last
            axis.

        Returns
        -------
        View

        Raises
        ------
        ValueError
            The last axis is not contiguous, or its bytes do not divide into the new type.

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> ap.view(np.zeros(2, np.float32)).view_as("uint8").shape
        (8,)
        """
        return _reinterpreted(self, dtype)

    def as_readonly(self):
        """The same memory, flagged read-only.

        Writes through it and through every export of it are refused.

        Returns
        -------
        View
            This View itself when it is read-only already.

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> r = ap.view(np.zeros(2)).as_readonly()
        >>> r.readonly, np.asarray(r).flags.writeable
        (True, False)
        """
        return _as_readonly(self)

    # ---- pickling and copy.copy (arrayport/pickling.py) ------------------------------------

    def __reduce_ex__(self, protocol):
        """Pickle protocol 5 sends the bytes out of band (a PickleBuffer, zero-copy where
        the engine keeps buffers apart); protocols 2–4 in band. Device memory is refused
        unless arrayport.device_pickling("host") allows a copy to the host."""
        return _hook(_reduce_view_hook, "reduce_view")(self, protocol)

    def share(self, readonly=None):
        """Copy this View's host data once into POSIX shared memory.

        Parameters
        ----------
        readonly : bool, optional
            Whether Views of the segment are read-only; ``None``: as this View is.

        Returns
        -------
        SharedHandle
            Picklable (a few hundred bytes); ``View.from_shared(handle)`` maps the segment in any
            process on the machine. This process owns the name (``handle.unlink()``).

        Raises
        ------
        BufferError
            Memory the host cannot read.
        """
        return _hook(_share_hook, "share")(self, readonly)

    @staticmethod
    def from_shared(handle):
        """A zero-copy View of the shared-memory segment ``handle`` names.

        Parameters
        ----------
        handle : SharedHandle
            From ``View.share()``, in this process or another on the same machine.

        Returns
        -------
        View

        Raises
        ------
        TypeError
            ``handle`` is not a SharedHandle.
        FileNotFoundError
            The segment's name has been removed.
        """
        return _hook(_from_shared_hook, "from_shared")(handle)

    def __copy__(self):
        return self          # immutable: a shallow copy is the View itself

    def __deepcopy__(self, memo):
        return self.copy()   # new memory with the same values, on the same device

    # ---- copies ---------------------------------------------------------------------------

    def copy(self, device=None, stream=None):
        """A C-contiguous, writable copy (``is_copy``), on any device arrayport drives.

        Parameters
        ----------
        device : Device, str or tuple, optional
            Where the copy goes (host, CUDA, ROCm, pinned host memory); ``None``: where the data
            is.
        stream : int, optional
            The CUDA/ROCm stream the transfer is enqueued on (DLPack values); ``None``: the
            default stream.

        Returns
        -------
        View

        Raises
        ------
        BufferError
            A device arrayport has no driver for.

        Examples
        --------
        >>> import numpy as np, arrayport as ap
        >>> c = ap.view(np.arange(6).reshape(2, 3)).T.copy()
        >>> c.is_c_contiguous, c.is_copy
        (True, True)
        """
        return _hook(_copy_view_hook, "copy_view")(self, device, stream)

    def host_copy(self):
        """A C-contiguous, writable copy in new host memory (``is_copy``).

        Returns
        -------
        View

        Raises
        ------
        BufferError
            Memory the CPU cannot read (the message names the device).
        """
        if not _host_accessible(self._t.device.device_type):
            raise BufferError(f"dlpack: cannot read {self.device} memory from the host: "
                              f"arrayport has no driver for {self.device.type.label} devices")
        cdef View v = _new_host_copy_of(self, self._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
        _copy_elements(self, <char*>v._t.data)
        return v


cdef View _new_host_copy_of(View source, uint64_t padded_flag, int64_t rows=-1):
    """A writable, C-contiguous View of new host memory with ``source``'s shape (``rows``
    rows when >= 0) and type (padded when ``padded_flag`` says so), flagged ``is_copy``;
    the caller fills it."""
    cdef int ndim = source._t.ndim
    cdef View v = View.__new__(View)
    v._reserve_dims(ndim)
    v._t = source._t
    v._t.shape = v._dims
    v._t.strides = v._dims + ndim
    v._t.byte_offset = 0
    v._t.device.device_type = APDL_CPU
    v._t.device.device_id = 0
    v._flags = padded_flag | APDL_FLAG_IS_COPIED
    v._protocol = "copy"
    memcpy(v._t.shape, source._t.shape, ndim * sizeof(int64_t))
    if rows >= 0:
        v._t.shape[0] = rows
    _fill_c_strides(ndim, v._t.shape, v._t.strides)
    _count_elements(v, "copy")
    cdef HostBuffer buffer = HostBuffer(v._nbytes)
    v._t.data = buffer.ptr
    v._owner = buffer
    return v


def copy_kernel():
    """What the host copy kernel (``_csrc/strided_copy.h``) chose on this machine.

    Returns
    -------
    dict
        ``path`` (the vector path in use: "portable", "sse2", "ssse3", "avx2" or "avx512"
        on x86-64, "portable" or "neon" on ARM64), ``paths`` (every
        path this CPU runs, for tests to force), the cache sizes it was sized from
        (``line``, ``l1d``, ``l2``, ``llc`` in bytes, ``l2_ways``; 0 when not reported),
        ``band_lines`` (source lines a band of blocks keeps open at most: half the L1; fewer
        for strides that reach few L2 sets), ``streaming_bytes`` (results this large are
        written with non-temporal stores: half the last level), ``threads`` (at most this
        many threads share a copy: the CPUs this process may use, capped by
        ``ARRAYPORT_NUM_THREADS``) and ``thread_bytes`` (each thread gets at least this
        many bytes).
    """
    ap_copy_configure()
    return {"path": ap_copy_path_names[ap_copy_config.path].decode(),
            "paths": [ap_copy_path_names[p].decode() for p in range(ap_copy_config.best + 1)],
            "line": ap_copy_config.line, "l1d": ap_copy_config.l1d, "l2": ap_copy_config.l2,
            "llc": ap_copy_config.llc, "l2_ways": ap_copy_config.l2_ways,
            "band_lines": ap_copy_config.band_lines,
            "streaming_bytes": ap_copy_config.streaming_bytes,
            "threads": ap_copy_config.threads, "thread_bytes": ap_copy_config.thread_bytes}


def set_copy_threads(threads, thread_bytes):
    """Let host copies use up to ``threads`` threads once each gets ``thread_bytes`` bytes,
    process-wide (tests split every copy; ``ARRAYPORT_NUM_THREADS`` and
    ``ARRAYPORT_COPY_THREAD_BYTES`` do the same at start-up).

    Returns
    -------
    tuple
        The previous ``(threads, thread_bytes)``.
    """
    info = copy_kernel()
    ap_copy_set_threads(threads, thread_bytes)
    return info["threads"], info["thread_bytes"]


def force_copy_path(name):
    """Make the host copy kernel use ``name`` (one of ``copy_kernel()["paths"]``), process-
    wide — for tests and benchmarks that hold every path to the same results. Returns the
    previous path's name. ``ARRAYPORT_COPY_PATH`` does the same at start-up.

    Raises
    ------
    ValueError
        A path this CPU cannot run.
    """
    info = copy_kernel()
    if name not in info["paths"]:
        raise ValueError(f"copy kernel: path {name!r} is not one this CPU runs "
                         f"({', '.join(info['paths'])})")
    ap_copy_force_path(info["paths"].index(name))
    return info["path"]


def unpacked_copy(View v):
    """``v``'s packed sub-byte elements (float4/float6: several to a byte, little
    bit-endian, DLPack's packing) one per byte in new host memory — the same values in the
    padded layout (``IS_SUBBYTE_TYPE_PADDED``), flagged ``is_copy``. For targets that hold
    only whole-byte elements (NumPy through ml_dtypes)."""
    cdef int64_t bits = v._itembits()
    if bits % 8 == 0:
        raise ValueError(f"unpacked_copy: {v.dtype.name} elements are whole bytes already")
    if v._t.dtype.lanes != 1:
        raise BufferError(f"copy: packed {v.dtype.name} vectors of {v._t.dtype.lanes} lanes "
                          f"have no one-per-byte layout")
    if not _host_accessible(v._t.device.device_type):
        raise BufferError(f"copy: cannot read {v.device} memory from the host to unpack it")
    _host_wait_for_pending(v)
    cdef View w = _new_host_copy_of(v, APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
    # Packed Views are C-contiguous (every constructor enforces it), so element i starts
    # at bit i * bits of the first byte; it spans at most two bytes (bits <= 8).
    cdef const uint8_t* src = <const uint8_t*>v._t.data + v._t.byte_offset
    cdef uint8_t* dst = <uint8_t*>w._t.data
    cdef unsigned int mask = (<unsigned int>1 << bits) - 1, value
    cdef int64_t bit, i, size = w._size
    with nogil:
        for i in range(size):
            bit = i * bits
            value = src[bit >> 3] >> (bit & 7)
            if (bit & 7) + bits > 8:
                value |= <unsigned int>src[(bit >> 3) + 1] << (8 - (bit & 7))
            dst[i] = <uint8_t>(value & mask)
    return w


cdef int _copy_elements(View v, char* dst) except -1:
    """``v``'s elements (host-readable memory), in C order, into ``dst`` (``v._nbytes``
    bytes): one memcpy when ``v`` is C-contiguous, else the strided copy kernel."""
    cdef int64_t itembits = v._itembits()
    cdef int64_t byte_strides[AP_COPY_MAX_NDIM]
    cdef const char* src = <const char*>v._t.data + v._t.byte_offset
    cdef int64_t nbytes = v._nbytes
    if v._size == 0:
        return 0
    _host_wait_for_pending(v)
    if itembits % 8 or ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides):
        # Packed sub-byte views are always C-contiguous (validated on import).
        with nogil:
            memcpy(dst, src, nbytes)
        return 0
    for i in range(v._t.ndim):
        byte_strides[i] = v._t.strides[i] * (itembits // 8)
    with nogil:
        ap_copy_strided_to_contiguous(dst, src, v._t.ndim, v._t.shape, byte_strides,
                                      itembits // 8)
    return 0


# ---- helpers shared by import and export ----------------------------------------------------

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


# ---- streams: _core_streams.pxi owns every rule; these read and set a View's stream facts ----

def pending_stream(View v):
    """The stream with work pending on ``v``'s data (CUDA/ROCm), or None."""
    return v._stream


def producer_stream(View v):
    """The stream a CUDA Array Interface producer wrote ``v``'s data on, when its import
    moved the data into a consumer's stream order (``pending_stream``); else None."""
    return v._producer_stream


def set_pending_stream(View v, stream):
    """Record that work on ``v``'s data is pending on ``stream`` (None: none)."""
    v._stream = stream


def mark_copied(View v, stream):
    """Flag ``v`` as a copy (IS_COPIED) whose data is still being written on ``stream``."""
    v._flags |= APDL_FLAG_IS_COPIED
    v._stream = stream
    return v


cdef inline int _count_elements(View v, str protocol) except -1:
    """Set ``v._size`` and ``v._nbytes`` from its shape and type, through extent.h's checked
    routines: the one place every View, however made (imports, layout operations, copies,
    fast paths), takes its counts from. BufferError ("<protocol>: …") when they do not fit."""
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


# ---- DLPack import ---------------------------------------------------------------------------

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
    _count_elements(v, protocol)  # the same routines ap_layout_extent counted with
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


cdef View _view_from_capsule(object capsule, object owner):
    """Consume a DLPack capsule into a View. On any failure the capsule is left unconsumed,
    so its own destructor frees the tensor exactly once — except for an unreadable major
    version, whose deleter is called here (the capsule is then marked used)."""
    cdef APDLManagedTensorVersioned* mv
    cdef APDLManagedTensor* ml
    cdef View v
    if PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED):
        mv = <APDLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED)
        if mv.version.major != APDL_MAJOR_VERSION:
            PyCapsule_SetName(capsule, APDL_CAPSULE_VERSIONED_USED)
            _refuse_foreign_major(mv, "capsule")
        v = View.__new__(View)
        _adopt(v, &mv.dl_tensor, mv.flags, mv.version.minor < 2, "dlpack")
        PyCapsule_SetName(capsule, APDL_CAPSULE_VERSIONED_USED)
        v._managed = mv
        v._managed_versioned = True
    elif PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY):
        ml = <APDLManagedTensor*>PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY)
        v = View.__new__(View)
        # A legacy capsule has no flags: it is writable, as its producer offered it for
        # writing (NumPy refuses to export read-only arrays this way).
        _adopt(v, &ml.dl_tensor, 0, True, "dlpack")
        PyCapsule_SetName(capsule, APDL_CAPSULE_LEGACY_USED)
        v._managed = ml
        v._managed_versioned = False
    else:
        _raise_bad_capsule(capsule)
    ap_counter_add(&ap_live_imported, 1)
    v._owner = owner
    v._protocol = "dlpack"
    _finish_import(v, owner)
    return v


cdef int _refuse_foreign_major(APDLManagedTensorVersioned* m, str what) except -1:
    """A tensor of another DLPack major version: call its deleter, read nothing else, and
    raise. The caller has already given up ownership (a capsule is marked used first)."""
    major, minor = m.version.major, m.version.minor
    if m.deleter != NULL:
        m.deleter(m)
    raise BufferError(f"dlpack: {what} has DLPack version {major}.{minor}; arrayport reads "
                      f"major version {APDL_MAJOR_VERSION} only")


cdef int _raise_bad_capsule(object capsule) except -1:
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"dlpack: expected a PyCapsule, got {type(capsule).__name__}")
    cdef const char* raw_name = PyCapsule_GetName(capsule)
    name = None if raw_name == NULL else raw_name.decode("utf-8", "replace")
    if name in ("used_dltensor", "used_dltensor_versioned"):
        raise BufferError(f"dlpack: capsule {name!r} was already consumed")
    hint = ("; it is an Arrow capsule: read it with arrayport.View.from_arrow"
            if name is not None and name.startswith("arrow_") else "")
    raise BufferError(f"dlpack: capsule named {name!r} is not a DLPack capsule (expected "
                      f"'dltensor_versioned' or 'dltensor'){hint}")




cdef object _request_capsule(x, stream):
    """x.__dlpack__(stream=..., max_version=(1, 3)), falling back to the legacy call only
    for a producer that rejects the max_version keyword. TypeError when ``x`` has no
    __dlpack__; whatever else the producer raises for an array it cannot export (pyarrow's
    ArrowTypeError for nulls, JAX's RuntimeError for a deleted array…) becomes a
    BufferError naming it — arrayport's own argument errors were raised before the call."""
    try:
        try:
            if stream is None:
                return ap_call_method_one_kw(x, _DLPACK_METHOD, _KW_MAX_VERSION,
                                             _OUR_MAX_VERSION)
            return x.__dlpack__(stream=stream, max_version=_OUR_MAX_VERSION)
        except TypeError as error:
            if not rejects_keywords(error, _KW_MAX_VERSION):
                raise
        return x.__dlpack__() if stream is None else x.__dlpack__(stream=stream)
    except BufferError as error:
        raise _producer_refusal(x, error)
    except AttributeError as error:
        if not hasattr(type(x), "__dlpack__"):
            raise TypeError(f"dlpack: {type(x).__module__}.{type(x).__qualname__} has no "
                            f"__dlpack__ method and is not a DLPack capsule") from None
        raise _producer_failure(x, "__dlpack__", error)
    except Exception as error:
        raise _producer_failure(x, "__dlpack__", error)


cdef View _dlpack_view(x, stream, bint exchange_tried=False):
    """A View of ``x`` through DLPack (the type's C exchange API when it has one and no
    stream is involved, else __dlpack__), zero-copy, with the producer's quirks put back
    (_core_producers.pxi). ``stream``: the consumer's stream. ``exchange_tried``: the
    caller has already been through the exchange API (the data is on a device), or wants
    the protocol route: no fast path is taken."""
    cdef uintptr_t api
    cdef View v
    cdef int32_t gpu_type = 0
    if _dlpack_import_needs_streams(stream):
        stream = _stream_argument(stream)
        gpu_type = _check_stream_for_producer(x, stream)
        stream = _stream_to_ask_producer(stream, gpu_type)
    if stream is not None or exchange_tried:
        pass  # straight to __dlpack__
    elif _is_ndarray_type(type(x)):
        v = _view_of_ndarray(x)
        if v is not None:
            return v
    else:
        api = _exchange_api_for(type(x))
        if api != 0:
            v = _view_via_exchange_api(x, api)
            if v is not None:
                return v
    cdef int kind = _producer_kind(type(x))
    cdef bint requires_grad = False
    source = x
    if kind == _MASKED:
        _refuse_masked(x)
    elif kind == _TORCH:
        # PyTorch's __dlpack__ refuses grad tensors and ignores the negative bit: export
        # the detached tensor (the same memory) read-only, and refuse lazy negation here.
        requires_grad = _torch_before_export(x, True)
        if requires_grad:
            source = x.detach()
    elif kind == _TENSORFLOW or kind == _PADDLE:
        _refuse_unexportable(x, kind)
        if kind == _PADDLE and _paddle_tracks_grad(x):
            # Paddle's __dlpack__ refuses such tensors (its exchange API does not): export
            # the detached tensor, the same memory, read-only as on the fast path.
            requires_grad = True
            source = x.detach()
    try:
        capsule = _request_capsule(source, stream)
    except BufferError:
        v = _fallback_import(x)
        if v is None:
            raise
        return v
    v = _view_from_capsule(capsule, x)
    if requires_grad:
        v._flags |= APDL_FLAG_READ_ONLY
    _note_dlpack_import(v, gpu_type, stream)
    return v


cdef View _dlpack_view_or_copy(x, stream):
    """_dlpack_view, resolving a NeedsCopy refusal into a copy (callers allowing copies)."""
    try:
        return _dlpack_view(x, stream)
    except NeedsCopy as refusal:
        return _resolved_view(refusal, stream, True)


def dlpack_view(x, /, *, stream=None, copy=None, exchange_api=True):
    """A View of ``x`` through DLPack only (``from_dlpack`` without device/copy handling):
    zero-copy, or with ``copy`` not False, a resolved copy where the producer's memory does
    not hold its values as they are (NeedsCopy). ``exchange_api=False`` skips the type's C
    exchange API and asks ``__dlpack__`` (the protocol route the fast path must agree with:
    the differential tests compare the two)."""
    if PyCapsule_CheckExact(x):
        if stream is not None:
            raise ValueError("from_dlpack: a DLPack capsule was already produced; a "
                             "stream cannot apply to it")
        return _view_from_capsule(x, x)
    if not exchange_api:
        try:
            return _dlpack_view(x, stream, True)
        except NeedsCopy as refusal:
            if copy is False:
                raise
            return _resolved_view(refusal, stream, True)
    if copy is False:
        return _dlpack_view(x, stream)
    return _dlpack_view_or_copy(x, stream)


cdef int32_t _check_stream_for_producer(x, stream) except -1:
    """Validate ``stream`` against the device the producer says its data is on, before
    calling its __dlpack__: producers answer a bad stream in their own dialects (NumPy
    raises RuntimeError), the spec's answer is ValueError. Returns the device type when
    it is a stream-ordered GPU (CUDA, CUDA managed, ROCm), else 0."""
    device = getattr(x, "__dlpack_device__", None)
    if device is None:
        return 0
    answer = device()
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise BufferError(f"dlpack: {type(x).__qualname__}.__dlpack_device__() returned "
                          f"{answer!r}, not a (device_type, device_id) tuple")
    device_type = answer[0]
    if type(device_type) is not int and isinstance(device_type, int):
        device_type = _plain_int(device_type)
    if (isinstance(device_type, int) and 0 < device_type < len(_DEVICE_TYPES)
            and _DEVICE_TYPES[device_type] is not None):
        check_stream(stream, device_type)  # unknown devices: the producer judges
        if _stream_ordered(device_type):
            return device_type
    return 0


def rejects_keywords(error, names):
    """Whether a TypeError says the callee does not accept the keyword arguments ``names``
    (an old producer), rather than failing for some other reason."""
    message = str(error)
    if "keyword" not in message:
        return False
    # CPython: "got an unexpected keyword argument 'max_version'", "'copy' is an invalid
    # keyword argument for ...", "takes no keyword arguments".
    return "no keyword arguments" in message or any(f"'{name}'" in message for name in names)


def import_capsule(capsule, owner=None):
    """A View that consumes ``capsule`` (owner defaults to the capsule itself)."""
    return _view_from_capsule(capsule, capsule if owner is None else owner)


def from_dlpack(x, /, *, device=None, copy=None, stream=None):
    """A View of ``x`` through DLPack, with the array API standard's semantics.

    Parameters
    ----------
    x : object
        Any object with ``__dlpack__`` and ``__dlpack_device__``, or a DLPack capsule
        (``"dltensor"`` or ``"dltensor_versioned"``; consumed).
    device : Device, str or tuple, optional
        Where the data should be (``"cpu"``, ``"cuda:1"``, ``(2, 1)``); a copy when it
        lives elsewhere. ``None``: where it is.
    copy : bool, optional
        ``True`` always returns a new copy (``View.is_copy``); ``False`` never copies;
        ``None`` copies only when ``device`` asks for it.
    stream : int, optional
        The CUDA/ROCm stream the caller will use the data on (DLPack values), passed to the
        producer, which orders its pending work before it; a copy is made on it.

    Returns
    -------
    View

    Raises
    ------
    BufferError
        A copy would be needed with ``copy=False``, or the capsule is malformed, used, or of
        another DLPack major version.
    TypeError
        ``x`` has no ``__dlpack__``, or an argument has the wrong type.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> a = np.arange(4.0)
    >>> ap.from_dlpack(a).readonly
    False
    >>> c = ap.from_dlpack(a, copy=True)
    >>> c.is_copy, np.shares_memory(np.asarray(c), a)
    (True, False)
    """
    if device is None and copy is None:
        return dlpack_view(x, stream=stream)
    return _hook(_from_dlpack_options_hook, "from_dlpack_with_options")(x, device, copy, stream)


cdef View _fallback_import(x):
    """NumPy arrays whose dtype NumPy's own __dlpack__ refuses (ml_dtypes bfloat16, float8…)
    are read through their array interface instead; None when that does not apply."""
    return _hook(_ndarray_fallback_hook, "ndarray_dlpack_fallback")(x)


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


include "_core_hooks.pxi"
include "_core_streams.pxi"
include "_core_buffer.pxi"
include "_core_interface.pxi"
include "_core_torch_bits.pxi"
include "_core_producers.pxi"
include "_core_arrow.pxi"
include "_core_exchange.pxi"
include "_core_dispatch.pxi"
include "_core_capi.pxi"
include "_core_convert.pxi"
include "_core_numpy.pxi"
include "_core_layout.pxi"
include "_core_contract.pxi"

# Views exist only as the core builds them: Python's View.__new__(View) is refused (the
# core's own calls go straight to Cython's allocator). See ap_seal_constructor.
ap_seal_constructor(<PyTypeObject*>View)
