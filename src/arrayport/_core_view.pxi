# Included by _core.pyx, second (after _core_base.pxi). The View type: arrayport's one
# object, an immutable description of strided memory (a DLTensor, its flags, its owner
# and its stream facts) — and its facade. Each method is a door to the part that owns the
# work: DLPack export here (the capsule, the copy or relabelling a consumer asks for),
# the Arrow exports (_core_arrow.pxi), the NumPy and CUDA protocols
# (_core_interface.pxi, _core_buffer.pxi, _core_numpy.pxi), layout operations
# (_core_layout.pxi), host copies (_core_host_copy.pxi) and, through hooks, pickling,
# shared memory and device copies (the Python layers).
#
# Who owns what: a View imported from a DLPack capsule owns the producer's managed tensor
# (its deallocation calls the deleter exactly once); one made from a raw pointer owns
# nothing in C and holds the object that keeps the memory alive; a capsule exported from a
# View holds the View until its deleter runs (core_support.h drops it, from any thread).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_arrow.pxi: _view_arrow_array, _view_arrow_device_array, _view_arrow_schema,
#       _view_arrow_stream, _view_from_arrow_given, _view_from_arrow_protocol
#   _core_buffer.pxi: _fill_buffer, _view_from_buffer
#   _core_capi.pxi: _exchange_api_capsule
#   _core_describe.pxi: _checked_int, _new_view_like, _parse_dl_device
#   _core_device_copy.pxi: _cuda_copy_in_c
#   _core_hip_copy.pxi: _hip_copy_in_c
#   _core_hooks.pxi: _array_function_hook, _array_ufunc_hook, _copies_watched,
#       _copy_view_hook, _from_shared_hook, _hook, _reduce_view_hook, _share_hook,
#       _unasked_copy_hook
#   _core_host_copy.pxi: _copy_elements, _new_host_copy_of
#   _core_interface.pxi: _array_interface_of, _cuda_array_interface_of, _ndarray_of,
#       _view_from_ai_object, _view_from_array_method, _view_from_cai_object
#   _core_layout.pxi: _as_readonly, _getitem, _is_integer_index, _permuted, _reinterpreted,
#       _reshaped, _reversed_axes
#   _core_numpy.pxi: _array_function_fast, _check_ufunc_call, _load_numpy, _NOT_FAST,
#       _numpy_ndarray, _ufunc_fast, _wrap_result
#   _core_streams.pxi: _host_wait_for_pending, _order_after_pending

from operator import index as _operator_index


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
        """``(device_type, device_id)``: where the memory is, in DLPack's numbers."""
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
            if _copies_watched and copy is None:   # the consumer's dl_device: a copy it needs
                _hook(_unasked_copy_hook, "unasked_copy")(
                    "dlpack", f"exporting {self.device} memory to "
                              f"{Device(target_type, target_id)}", False)
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

    # ---- Python's scalar conversions, as NumPy's ndarray answers them ---------------------
    # bool(), float(), int(), complex() and operator.index() of one element, on any device:
    # device memory is copied to the host for it, as float() of a PyTorch CUDA scalar is.
    # bool() of no element or of several is NumPy's ValueError (an ``if v:`` cannot mean
    # "is not None"); the numbers of several elements are NumPy's TypeError.

    def __bool__(self):
        if self._size != 1:
            raise ValueError("The truth value of an array with more than one element (or "
                             "none) is ambiguous. Use v.size, or numpy.any / numpy.all "
                             "over numpy.asarray(v)")
        return bool(_one_value(self))

    def __float__(self):
        return float(_one_value(self, "only length-1 arrays can be converted to Python "
                                      "scalars"))

    def __int__(self):
        return int(_one_value(self, "only length-1 arrays can be converted to Python scalars"))

    def __complex__(self):
        return complex(_one_value(self, "only length-1 arrays can be converted to Python "
                                        "scalars"))

    def __index__(self):
        if self._t.ndim != 0:
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return _operator_index(_one_value(self))


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
        """Share this View with other processes of the machine: host data copied once into
        shared memory; CUDA device memory by CUDA IPC, no copy (docs/processes.md).

        Parameters
        ----------
        readonly : bool, optional
            Whether Views of the segment are read-only; ``None``: as this View is.

        Returns
        -------
        SharedHandle or CudaSharedHandle
            Picklable (a few hundred bytes); ``View.from_shared(handle)`` maps the segment (the
            device memory) in any process on the machine. This process owns the segment
            (``handle.unlink()``); a device View is kept while receivers hold it.

        Raises
        ------
        BufferError
            Device memory that cannot be shared (not CUDA, or no IPC in the driver).
        """
        return _hook(_share_hook, "share")(self, readonly)

    @staticmethod
    def from_shared(handle):
        """A zero-copy View of the shared-memory segment (or CUDA device memory) ``handle``
        names.

        Parameters
        ----------
        handle : SharedHandle or CudaSharedHandle
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
        cdef View issued = _cuda_copy_in_c(self, device, stream)   # no Python, where it serves
        if issued is None:
            issued = _hip_copy_in_c(self, device, stream)
        if issued is not None:
            return issued
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


cdef object _one_value(View v, str refusal=None):
    """The host ndarray holding ``v``'s one element (a device View copied to the host for
    it; pinned memory waited for); TypeError ``refusal`` when ``v`` holds more or none."""
    if refusal is not None and v._size != 1:
        raise TypeError(refusal)
    source = v
    if not _host_accessible(v._t.device.device_type):
        source = v.copy(device="cpu")
    return _ndarray_of(source, None, None)
