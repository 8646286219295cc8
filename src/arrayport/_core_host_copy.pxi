# Included by _core.pyx. Host copies: memory arrayport allocates (HostBuffer, 64-byte
# aligned, freed with the last View on it), a View's elements copied into it in C order
# (_copy_elements: one memcpy when contiguous, else the strided kernel of
# _csrc/strided_copy.h, whose configuration is read and forced here), and packed
# sub-byte elements unpacked one per byte. Every host read waits first for GPU work
# pending on the source (_host_wait_for_pending, the host-reader rule).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _count_elements, _fill_c_strides
#   _core_streams.pxi: _host_wait_for_pending
#   _core_view.pxi: View

# The host allocator's settings (ARRAYPORT_HUGE_PAGE_BYTES), read here, at import, with the
# GIL held: allocations run without it, where getenv could race a setenv.
ap_read_host_settings()


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
        written with non-temporal stores: one core's L2, 1 MiB at least, half the last
        level at most; ``ARRAYPORT_COPY_STREAMING_BYTES`` overrides it), ``threads`` (at most this
        many threads share a copy: the CPUs this process may use, capped by
        ``ARRAYPORT_NUM_THREADS``), ``thread_bytes`` (each thread gets at least this
        many bytes: ``ARRAYPORT_COPY_THREAD_BYTES``) and ``huge_page_bytes`` (results this
        large are offered transparent huge pages: 4 MiB, ``ARRAYPORT_HUGE_PAGE_BYTES``).
    """
    ap_copy_configure()
    return {"path": ap_copy_path_names[ap_copy_config.path].decode(),
            "paths": [ap_copy_path_names[p].decode() for p in range(ap_copy_config.best + 1)],
            "line": ap_copy_config.line, "l1d": ap_copy_config.l1d, "l2": ap_copy_config.l2,
            "llc": ap_copy_config.llc, "l2_ways": ap_copy_config.l2_ways,
            "band_lines": ap_copy_config.band_lines,
            "streaming_bytes": ap_copy_config.streaming_bytes,
            "threads": ap_copy_config.threads, "thread_bytes": ap_copy_config.thread_bytes,
            "huge_page_bytes": ap_huge_pages_from()}


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


def set_copy_streaming(nbytes):
    """Write host copies' results of at least ``nbytes`` bytes with streaming stores,
    process-wide (benchmarks compare thresholds in one run; ``ARRAYPORT_COPY_STREAMING_BYTES``
    does the same at start-up).

    Returns
    -------
    int
        The previous threshold.

    Raises
    ------
    ValueError
        ``nbytes`` below 1.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"copy kernel: a streaming threshold is an int, not "
                        f"{type(nbytes).__name__}")
    if not 1 <= nbytes < 2**62:
        raise ValueError(f"copy kernel: a streaming threshold is a number of bytes from 1, "
                         f"not {nbytes!r}")
    return ap_copy_set_streaming(nbytes)


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
