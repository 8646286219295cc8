# Included by _core.pyx. The CUDA driver's floor (_csrc/cuda_floor.h: entry points resolved
# once, called from C; each device's primary context and one reused event per context) as
# the core and the GPU wing ask it. gpu/cuda.py installs it when it opens the driver; until
# then, and in a fork's child, it is off and the Python driver serves (as it does for the
# stand-in libraries of the tests). What a call failing raises is what the Python driver
# raises for the same call: BufferError("cuda: <entry point> failed with error <code>").


cdef extern from "_csrc/cuda_floor.h":
    int ap_cuda_floor_install(void* get_proc, int with_status) nogil
    bint ap_cuda_floor_ready() nogil
    int ap_cuda_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                            int producer_ordinal) nogil
    int ap_cuda_primary_context(int ordinal, void** out) nogil
    size_t ap_cuda_cached_events() nogil
    long ap_cuda_floor_stream_waits() nogil
    const char* ap_cuda_floor_failed() nogil
    void ap_cuda_floor_close() nogil
    int ap_cuda_locate_pointer(uintptr_t ptr, int32_t* device_type, int32_t* device_id) nogil
    int ap_cuda_locate_allocation(uintptr_t ptr, int32_t* device_type, int32_t* device_id,
                                  uintptr_t* base, size_t* size) nogil
    int ap_cuda_location_of(unsigned memory_type, unsigned is_managed, int ordinal,
                            int32_t* device_type, int32_t* device_id) nogil
    int ap_cuda_current_device(int* out) nogil
    enum:
        AP_CU_UNKNOWN_MEMORY
        AP_CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        AP_CU_POINTER_ATTRIBUTE_IS_MANAGED
        AP_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL


# Whether the core calls the floor itself (stream waits, a CAI import's pointer), without
# asking the Python driver: while the process's driver works over the library the floor was
# installed from with its own methods (gpu/cuda.py says so whenever either changes: the
# tests swap in stand-ins) — and the floor serves.
cdef bint _cuda_floor_direct = False


def set_cuda_floor_direct(bint direct):
    """Say whether the process's CUDA driver works over the floor's library (gpu/cuda.py);
    returns what was said before."""
    global _cuda_floor_direct
    previous, _cuda_floor_direct = _cuda_floor_direct, direct
    return previous


cdef inline bint _cuda_floor_serves(int32_t device_type) noexcept:
    """Whether a stream wait on ``device_type`` memory is the floor's to make, from C."""
    return _cuda_floor_direct and _cuda_kind(device_type) and ap_cuda_floor_ready()


cdef int _cuda_floor_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                          int producer_ordinal) except -1:
    cdef int status
    with nogil:   # a driver call may block (a full queue): other threads run meanwhile
        status = ap_cuda_stream_wait(ordinal, consumer, producer, producer_ordinal)
    if status != 0:
        _cuda_floor_raise(status)
    return 0


cdef int _cuda_floor_locate(uintptr_t pointer, int32_t* device_type,
                            int32_t* device_id) except -1:
    """Where a CUDA Array Interface import's memory lives, from C: 1 where the floor served,
    0 where the process's driver must be asked, 2 where the floor says the memory is none
    CUDA knows (another vendor's, perhaps: the caller asks on). A NULL pointer (size 0: no
    memory to ask about) is a CUDA device's: the calling thread's current one."""
    cdef int ordinal = 0
    cdef int status
    if not (_cuda_floor_direct and ap_cuda_floor_ready()):
        return 0
    if pointer == 0:
        with nogil:
            status = ap_cuda_current_device(&ordinal)
        if status != 0:
            _cuda_floor_raise(status)
        device_type[0], device_id[0] = APDL_CUDA, ordinal
        return 1
    with nogil:
        status = ap_cuda_locate_pointer(pointer, device_type, device_id)
    if status == AP_CU_UNKNOWN_MEMORY:
        return 2
    if status != 0:
        _cuda_location_refused(status, pointer, True)
    return 1


cdef int _cuda_location_refused(int status, uintptr_t pointer, bint by_floor) except -1:
    """The error of a pointer's location: memory CUDA does not know, the attributes' call
    failing, or (``by_floor``) a call the floor made before it failing — a context made
    current for it, named as the ctypes path names it."""
    if status == AP_CU_UNKNOWN_MEMORY:
        raise BufferError(f"cuda: pointer {pointer:#x} is not memory CUDA knows (not device, "
                          f"pinned or managed memory)")
    if by_floor and (<bytes>ap_cuda_floor_failed()) != b"cuPointerGetAttributes":
        _cuda_floor_raise(status)
    raise BufferError(f"cuda: cuPointerGetAttributes({pointer:#x}) failed with CUDA error "
                      f"{status}")


cdef int _cuda_floor_raise(int status) except -1:
    raise BufferError(f"cuda: {(<bytes>ap_cuda_floor_failed()).decode()} failed with error "
                      f"{status}")


def install_cuda_floor(uintptr_t get_proc, bint with_status):
    """Resolve the floor's entry points through the driver's ``cuGetProcAddress`` (its
    address; ``with_status``: the 12.0 ``_v2``, else the 11.3 one). None once installed,
    else the entry point it could not resolve (the floor stays off)."""
    if ap_cuda_floor_install(<void*>get_proc, with_status) != 0:
        return (<bytes>ap_cuda_floor_failed()).decode()
    return None


def cuda_floor_ready():
    """Whether the floor serves (installed, and not a fork's child)."""
    return ap_cuda_floor_ready()


def cuda_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                     int producer_ordinal):
    """``consumer`` (a stream of device ``ordinal``) waits on the GPU for the work queued so
    far on ``producer`` (of device ``producer_ordinal``): the floor's reused event of the
    producer's context, recorded and waited on. The host never blocks."""
    _cuda_floor_wait(ordinal, consumer, producer, producer_ordinal)


def cuda_primary_context(int ordinal):
    """Device ``ordinal``'s primary context (its handle), retained once by the floor."""
    cdef void* context = NULL
    cdef int status
    with nogil:   # the first retain creates the context: long
        status = ap_cuda_primary_context(ordinal, &context)
    if status != 0:
        _cuda_floor_raise(status)
    return <uintptr_t>context


def cuda_locate_pointer(uintptr_t pointer):
    """(DLPack device type, device id) of the memory at ``pointer``, asked of the driver by
    the floor; BufferError for an address CUDA does not know."""
    cdef int32_t device_type = 0, device_id = 0
    cdef int status
    with nogil:
        status = ap_cuda_locate_pointer(pointer, &device_type, &device_id)
    if status != 0:
        _cuda_location_refused(status, pointer, True)
    return device_type, device_id


def cuda_pointer_attributes():
    """The ``cuPointerGetAttributes`` attributes a location is read from, in the order
    ``cuda_pointer_location`` takes their answers (for a driver without the floor)."""
    return (AP_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, AP_CU_POINTER_ATTRIBUTE_IS_MANAGED,
            AP_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)


def cuda_pointer_location(int status, unsigned memory_type, unsigned is_managed, int ordinal,
                          uintptr_t pointer):
    """What a ``cuPointerGetAttributes`` call made without the floor answered (its status
    and the attributes' values), read as the floor reads it: (device type, device id), or
    the floor's BufferError."""
    cdef int32_t device_type = 0, device_id = 0
    if status == 0:
        status = ap_cuda_location_of(memory_type, is_managed, ordinal, &device_type,
                                     &device_id)
    if status != 0:
        _cuda_location_refused(status, pointer, False)
    return device_type, device_id


def cuda_current_device():
    """The device of the calling thread's current context (0 where none is), by the floor."""
    cdef int ordinal = 0
    cdef int status
    with nogil:
        status = ap_cuda_current_device(&ordinal)
    if status != 0:
        _cuda_floor_raise(status)
    return ordinal


def cuda_floor_counts():
    """(events the floor keeps for reuse, stream waits it made) — for leak checks and
    benchmarks."""
    return ap_cuda_cached_events(), ap_cuda_floor_stream_waits()


def close_cuda_floor():
    """Give back what the floor keeps (its events, then the primary contexts it retained):
    at the driver's close, at exit. Never raises."""
    with nogil:
        ap_cuda_floor_close()
