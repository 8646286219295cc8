# Included by _core.pyx. The HIP runtime's floor (_csrc/hip_floor.h: entry points resolved
# once, called from C; one reused event per device) as the core and the GPU wing ask it —
# ROCm's counterpart of _core_cuda_floor.pxi. gpu/hip.py installs it when it opens the
# runtime; until then, and in a fork's child, it is off and the Python driver serves (as it
# does for the tests' stand-in libraries and methods). What a call failing raises is what
# the Python driver raises for the same call: BufferError("rocm: <entry point> failed with
# HIP error <code>").


cdef extern from "_csrc/hip_floor.h":
    int ap_hip_floor_install(const uintptr_t* entries, int count) nogil
    bint ap_hip_floor_ready() nogil
    const char* ap_hip_floor_failed() nogil
    int ap_hip_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                           int producer_ordinal) nogil
    int ap_hip_locate_pointer(uintptr_t ptr, int32_t* device_type, int32_t* device_id) nogil
    int ap_hip_location_of(unsigned memory_type, int is_managed, int ordinal,
                           int32_t* device_type, int32_t* device_id) nogil
    int ap_hip_current_device(int* out) nogil
    long ap_hip_floor_stream_waits() nogil
    size_t ap_hip_cached_events() nogil
    void ap_hip_pointer_attributes_layout(size_t* out) nogil
    void ap_hip_floor_close() nogil
    const char* ap_hip_entry_names[14]
    ctypedef struct ap_hip_session:
        pass
    int ap_hip_session_enter(int ordinal, ap_hip_session* session) nogil
    void ap_hip_session_exit(ap_hip_session* session) nogil
    int ap_hip_session_stream_is_on(uintptr_t stream, int* on) nogil
    int ap_hip_session_allocate(size_t nbytes, uintptr_t* out) nogil
    int ap_hip_session_copy_async(uintptr_t dst, uintptr_t src, size_t nbytes,
                                  uintptr_t stream) nogil
    int ap_hip_session_synchronize(uintptr_t stream) nogil
    int ap_hip_session_copy_2d_async(uintptr_t dst, size_t dst_pitch, uintptr_t src,
                                     size_t src_pitch, size_t width, size_t height,
                                     uintptr_t stream) nogil
    int ap_hip_session_max_pitch(int* out) nogil
    int ap_hip_free(int ordinal, uintptr_t address) nogil
    enum:
        AP_HIP_UNKNOWN_MEMORY
        AP_HIP_NOT_TRIED
        AP_HIP_ENTRY_POINTS
        AP_HIP_ERROR_INVALID_VALUE
        AP_HIP_EVENT_DISABLE_TIMING
        AP_HIP_MEMCPY_DEFAULT
        AP_HIP_DEVICE_ATTRIBUTE_MAX_PITCH
        AP_HIP_MEMORY_TYPE_HOST
        AP_HIP_MEMORY_TYPE_DEVICE
        AP_HIP_MEMORY_TYPE_MANAGED
        AP_HIP_MEMORY_TYPE_UNIFIED


# Whether the core asks the floor itself (ROCm stream waits, a CUDA Array Interface import's
# HIP pointer), without the Python driver: while the process's HIP driver works over the
# library the floor was installed from with its own methods (gpu/hip.py says so whenever
# either changes: the tests swap in stand-ins) — and the floor serves.
cdef bint _hip_floor_direct = False


def set_hip_floor_direct(bint direct):
    """Say whether the process's HIP driver works over the floor's library with its own
    stream wait (gpu/hip.py); returns what was said before."""
    global _hip_floor_direct
    previous, _hip_floor_direct = _hip_floor_direct, direct
    return previous


cdef inline bint _hip_floor_serves(int32_t device_type) noexcept:
    """Whether a stream wait on ``device_type`` memory (ROCm's, or pinned memory HIP made)
    is the HIP floor's to make, from C."""
    return _hip_floor_direct and _rocm_kind(device_type) and ap_hip_floor_ready()


cdef int _hip_floor_raise(int status) except -1:
    # worded as the Python driver's ctypes path words the same failure (gpu/library.py)
    raise BufferError(f"rocm: {(<bytes>ap_hip_floor_failed()).decode()} failed with error "
                      f"{status}")


cdef int _hip_floor_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                         int producer_ordinal) except -1:
    cdef int status
    with nogil:   # a runtime call may block (a full queue): other threads run meanwhile
        status = ap_hip_stream_wait(ordinal, consumer, producer, producer_ordinal)
    if status != 0:
        _hip_floor_raise(status)
    return 0


cdef int _hip_floor_locate(uintptr_t pointer, int32_t* device_type,
                           int32_t* device_id) except -1:
    """Where a CUDA Array Interface import's HIP memory lives, from C (ROCm's libraries
    export the interface too): 1 where the floor served, 0 where the drivers must be asked
    (the floor off; the memory none HIP knows, whose refusal is the drivers' to word; a NULL
    pointer, whose device is CUDA's current one first)."""
    cdef int status
    if pointer == 0 or not (_hip_floor_direct and ap_hip_floor_ready()):
        return 0
    with nogil:
        status = ap_hip_locate_pointer(pointer, device_type, device_id)
    if status == AP_HIP_UNKNOWN_MEMORY:
        return 0
    if status != 0:
        _hip_floor_raise(status)
    return 1


cdef int _hip_location_refused(int status, uintptr_t pointer) except -1:
    if status == AP_HIP_UNKNOWN_MEMORY:
        raise BufferError(f"rocm: pointer {pointer:#x} is not memory HIP knows (not device, "
                          f"pinned or managed memory)")
    raise BufferError(f"rocm: hipPointerGetAttributes({pointer:#x}) failed with HIP error "
                      f"{status}")


def hip_floor_entry_points():
    """The names of the runtime entry points the floor takes, in the order
    ``install_hip_floor`` takes their addresses."""
    return tuple((<bytes>ap_hip_entry_names[i]).decode() for i in range(AP_HIP_ENTRY_POINTS))


def install_hip_floor(addresses):
    """Install the floor from the entry points' addresses (``hip_floor_entry_points``'
    order). None once installed, else the entry point missing (the floor stays off)."""
    cdef uintptr_t entries[16]
    cdef int count = min(len(addresses), 16)
    for i in range(count):
        entries[i] = addresses[i] or 0
    if ap_hip_floor_install(entries, count) != 0:
        return (<bytes>ap_hip_floor_failed()).decode()
    return None


def hip_floor_ready():
    """Whether the HIP floor serves (installed, and not a fork's child)."""
    return ap_hip_floor_ready()


def hip_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer, int producer_ordinal):
    """``consumer`` (a stream of device ``ordinal``; 0 its null stream) waits on the GPU for
    the work queued so far on ``producer`` (of device ``producer_ordinal``): the floor's
    reused event of the producer's device, recorded and waited on. The host never blocks."""
    _hip_floor_wait(ordinal, consumer, producer, producer_ordinal)


def hip_locate_pointer(uintptr_t pointer):
    """(DLPack device type, device id) of the memory at ``pointer``, asked of the runtime by
    the floor; BufferError for an address HIP does not know."""
    cdef int32_t device_type = 0, device_id = 0
    cdef int status
    with nogil:
        status = ap_hip_locate_pointer(pointer, &device_type, &device_id)
    if status != 0:
        _hip_location_refused(status, pointer)
    return device_type, device_id


def hip_pointer_location(int status, unsigned memory_type, int is_managed, int ordinal,
                         uintptr_t pointer):
    """What a ``hipPointerGetAttributes`` call made without the floor answered (its status,
    and the struct's type, isManaged and device), read as the floor reads it: (device type,
    device id), or the floor's BufferError. hipErrorInvalidValue is HIP's answer for memory
    it does not know."""
    cdef int32_t device_type = 0, device_id = 0
    if status == AP_HIP_ERROR_INVALID_VALUE:
        status = AP_HIP_UNKNOWN_MEMORY
    elif status == 0:
        status = ap_hip_location_of(memory_type, is_managed, ordinal, &device_type, &device_id)
    if status != 0:
        _hip_location_refused(status, pointer)
    return device_type, device_id


def hip_current_device():
    """The calling thread's current HIP device, by the floor."""
    cdef int ordinal = 0
    cdef int status
    with nogil:
        status = ap_hip_current_device(&ordinal)
    if status != 0:
        _hip_floor_raise(status)
    return ordinal


def hip_floor_counts():
    """(events the floor keeps for reuse, stream waits it made) — for leak checks and
    benchmarks."""
    return ap_hip_cached_events(), ap_hip_floor_stream_waits()


def hip_floor_facts():
    """The HIP facts the floor states (``_csrc/hip_floor.h``; held to AMD's bindings by
    tests/test_hip_facts.py): hipMemoryType's HIP 6 numbering, hipErrorInvalidValue,
    hipEventDisableTiming, hipMemcpyDefault, hipDeviceAttributeMaxPitch."""
    return {"memory_type_host": AP_HIP_MEMORY_TYPE_HOST,
            "memory_type_device": AP_HIP_MEMORY_TYPE_DEVICE,
            "memory_type_managed": AP_HIP_MEMORY_TYPE_MANAGED,
            "memory_type_unified": AP_HIP_MEMORY_TYPE_UNIFIED,
            "error_invalid_value": AP_HIP_ERROR_INVALID_VALUE,
            "event_disable_timing": AP_HIP_EVENT_DISABLE_TIMING,
            "memcpy_default": AP_HIP_MEMCPY_DEFAULT,
            "device_attribute_max_pitch": AP_HIP_DEVICE_ATTRIBUTE_MAX_PITCH}


def hip_pointer_attributes_layout():
    """(size, offset of each field) of hipPointerAttribute_t as the floor declares it."""
    cdef size_t out[7]
    ap_hip_pointer_attributes_layout(out)
    return tuple(out[i] for i in range(7))


def close_hip_floor():
    """Give back what the floor keeps (its events): at the driver's close, at exit. Never
    raises."""
    with nogil:
        ap_hip_floor_close()
