# Included by _core.pyx. The copies the core issues itself (View.copy), planned and issued
# from C on CUDA's compiled floor (_csrc/cuda_floor.h), in one floor session each, with no
# Python between the call and the driver:
#   - CUDA device memory to its own device, into a block of arrayport's pool there: one
#     transfer where C-contiguous (the copy cuda-core's Buffer.copy_to makes), else one
#     launch of arrayport's strided-copy kernel, planned by _csrc/device_copy_plan.h;
#   - CUDA device memory to new host memory: one transfer (of the source, or of its packing
#     by that kernel into a pool block freed in the stream's order), then the host's wait;
#   - host memory to a device's pool: one transfer (strided memory packed by the host kernel
#     first; pageable memory only below the pinned ring's threshold, gpu/staging.py's, read
#     from that module at each copy).
# Before any launch of the kernel, the driver is asked whether the device can read the
# source (_kernel_source_refusal, the one rule both paths ask): a label is the producer's
# word, and a kernel reading memory the device cannot address kills the context.
# Everything else (another device, pinned or managed targets, ROCm, a driver without the
# floor, a pool not made yet, kernels not loaded yet in the device's context, a layout the
# kernels take no plan for) is arrayport/gpu/copies.py's, through the copy hook; so is
# every failure here: where the floor refuses a step, the general path makes the copy again
# from the start and says what went wrong as it always does (its refusals, its room-making
# for a full device).
#
# Who owns what: the pool, and what becomes of a dead result's block (held, then returned
# after one synchronization), are the memory policy's (gpu/held_memory.py), which publishes
# each device's pool here (through CUDA's memory floor: publish_cuda_result_pool) and takes a block back through the function it published
# with it; the kernels' modules are gpu/kernels' (KernelCache: loaded per context, unloaded
# at exit), which publishes their functions here (publish_cuda_kernel) with the context's
# id; the stream rules (which streams wait for whom) are _core_streams.pxi's, asked with the
# floor as the waiter. tests/test_gpu_device_copy.py holds this path to the general one:
# the same bytes, the same View, the same driver calls, the same lifetimes.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_cuda_floor.pxi: _cuda_floor_direct, _cuda_location_refused
#   _core_hooks.pxi: _driver_for
#   _core_describe.pxi: _fill_c_strides, _new_view_like
#   _core_host_copy.pxi: _copy_elements, _new_host_copy_of
#   _core_kernel_plan.pxi: _plan_view_copy
#   _core_streams.pxi: _CUDA_FLOOR_WAITS, _order_copy_after_source,
#       _order_writers_after_copy
#   _core_view.pxi: View

cdef extern from "_csrc/cuda_floor.h":
    int ap_cuda_stream_is_on(uintptr_t stream, int ordinal, int* on) nogil
    int ap_cuda_pool_allocate(int ordinal, void* pool, size_t nbytes, uintptr_t stream,
                              uintptr_t* out) nogil
    int ap_cuda_copy_async(int ordinal, uintptr_t dst, uintptr_t src, size_t nbytes,
                           uintptr_t stream) nogil
    int ap_cuda_allocation_bytes(int ordinal, uintptr_t address, size_t* out) nogil
    int ap_cuda_stream_synchronize(int ordinal, uintptr_t stream) nogil
    int ap_cuda_free_async(int ordinal, uintptr_t address, uintptr_t stream) nogil
    void ap_cuda_publish_kernel(int ordinal, int which, void* context,
                                unsigned long long context_id, void* function) nogil
    bint ap_cuda_kernel_published(int ordinal, int which) nogil
    int ap_cuda_launch(int ordinal, int which, const unsigned* grid, const unsigned* block,
                       void* params, uintptr_t stream, int* launched) nogil
    long ap_cuda_floor_launches() nogil
    ctypedef struct ap_cuda_session:
        pass
    int ap_cuda_session_enter(int ordinal, ap_cuda_session* session) nogil
    void ap_cuda_session_exit(ap_cuda_session* session) nogil
    enum:
        AP_CU_KERNELS


# Each device's pool, as gpu/held_memory.py published it: ordinal -> (the pool (its
# ResultPool: its handle, and whether it closed), release(address, nbytes, keep,
# keep_bytes): a dead result's block given back to it, room(status, attempt): an allocation
# refused for want of memory tried again as every allocation is, after room is made).
cdef dict _cuda_result_pools = {}
cdef int _CUDA_ERROR_OUT_OF_MEMORY = 2


def publish_cuda_result_pool(int ordinal, pool, release, room):
    """Say that device ``ordinal``'s copies may take blocks of ``pool`` (a
    gpu/held_memory.py ResultPool: ``.handle``, ``.closed``), given back by ``release(address,
    nbytes, keep, keep_bytes)``, room made by ``room(status, attempt)``; ``pool`` None: no
    longer (it closes); ``ordinal`` -1 with None: no pool of any device (the driver's pool
    table was replaced)."""
    if pool is None:
        if ordinal == -1:
            _cuda_result_pools.clear()
        else:
            _cuda_result_pools.pop(ordinal, None)
    else:
        _cuda_result_pools[ordinal] = (pool, <uintptr_t>pool.handle, release, room)


def published_cuda_result_pool(int ordinal):
    """The pool device ``ordinal``'s copies take blocks of (None: none)."""
    entry = _cuda_result_pools.get(ordinal)
    return None if entry is None else entry[0]


def publish_cuda_kernel(int ordinal, str kernel, uintptr_t context,
                        unsigned long long context_id, uintptr_t function):
    """Say that arrayport's kernel ``kernel`` is ``function`` on device ``ordinal``, its
    module loaded into ``context`` (that device's primary context) while the context's id
    was ``context_id`` (gpu/kernels, when it finds a function); ``ordinal`` -1: no kernel of
    any device (the modules are unloaded). A kernel this part does not launch is ignored."""
    cdef int which
    if ordinal == -1:
        ap_cuda_publish_kernel(-1, 0, NULL, 0, NULL)
        return
    for which in range(min(AP_PLAN_KERNELS, AP_CU_KERNELS)):
        if kernel == (<bytes>ap_plan_kernel_names[which]).decode():
            ap_cuda_publish_kernel(ordinal, which, <void*>context, context_id,
                                   <void*>function)


def cuda_floor_launches():
    """Kernel launches the floor made (tests, benchmarks)."""
    return ap_cuda_floor_launches()


cdef class _PoolAttempt:
    """One attempt at a pool block, for ``room`` to make again after each step that makes
    room (it returns the driver's status; the block, where one came, is ``address``)."""
    cdef int ordinal
    cdef uintptr_t pool, stream, address
    cdef size_t nbytes

    def __call__(self):
        cdef int status
        with nogil:
            status = ap_cuda_pool_allocate(self.ordinal, <void*>self.pool, self.nbytes,
                                           self.stream, &self.address)
        return status


@cython.no_gc_clear   # a result in a reference cycle still gives its block back
cdef class _PooledBlock:
    """A copy's block of arrayport's pool, and what it keeps alive (the source, which the
    copy may still be reading): given back through the pool's ``release`` when the last
    View on it goes — as gpu/library.py's OwnedMemory gives back the general path's."""
    cdef uintptr_t address
    cdef size_t nbytes
    cdef size_t keep_bytes
    cdef object keep
    cdef object release

    def __dealloc__(self):
        if self.address:
            address, self.address = self.address, 0
            try:
                self.release(address, self.nbytes, self.keep, self.keep_bytes)
            except BaseException:   # at interpreter exit the driver may be gone
                pass


# Where a copy is asked to go, as the core reads it without Python: a (type, id) pair (a
# Device is one), else a name seen before ("cpu", "cuda:0": parsed once by arrayport.devices,
# the names' one owner, and remembered here, a few at most).
cdef dict _copy_targets = {}
DEF _COPY_TARGETS_KEPT = 32
DEF _INT32_MAX = 2147483647


cdef tuple _copy_target(device):
    """(device type, id) of ``device``, a copy's target; None where the core does not read
    it (the general path answers, and refuses what it must)."""
    if isinstance(device, tuple):   # a Device, or a plain (type, id)
        if len(<tuple>device) != 2:
            return None
        kind, number = device
        if (isinstance(kind, bool) or isinstance(number, bool) or not isinstance(kind, int)
                or not isinstance(number, int) or not 0 <= number <= _INT32_MAX):
            return None   # the general path refuses it, in its words
        return (int(kind), int(number))
    if type(device) is not str:
        return None
    target = _copy_targets.get(device)
    if target is None:
        from arrayport.devices import Device   # once per name: its parser owns the names
        try:
            target = tuple(int(part) for part in Device(device))
        except (TypeError, ValueError):
            return None
        if len(_copy_targets) >= _COPY_TARGETS_KEPT:
            _copy_targets.clear()
        _copy_targets[device] = target
    return target


# gpu/staging.py, once imported: its THRESHOLD_BYTES says from what size a pageable upload
# is the pinned ring's (a Python path); None until then (the core's uploads wait for it).
cdef object _upload_staging = None


def publish_upload_staging(module):
    """Say where the pinned ring's threshold is read (gpu/staging.py, at its import)."""
    global _upload_staging
    _upload_staging = module


cdef View _cuda_copy_in_c(View v, device, stream):
    """``v.copy(device, stream)`` issued from C where this part serves (see the header);
    None where it does not, or where the floor refused a step (the caller takes the general
    path, which makes the copy whole)."""
    if (not _cuda_floor_direct or not ap_cuda_floor_ready() or v.nbytes == 0
            or (stream is not None and type(stream) is not int)):
        return None   # (the general path reads other stream objects)
    if v._t.device.device_type == APDL_CPU:
        return _cuda_upload_in_c(v, device, stream) if device is not None else None
    if v._t.device.device_type == APDL_CUDA:
        return _cuda_device_copy_in_c(v, device, stream)
    return None


# The most allocations next to the one holding a layout's first element that its bytes are
# followed into (the pieces of one virtual reservation: PyTorch's expandable segments map 2
# or 20 MiB at a time, and each piece has its own range; 1,024 pieces of 20 MiB are 20 GiB).
DEF _MAX_PIECES = 1024


cdef inline bint _kernel_reads(int32_t device_type, int32_t device_id, int32_t ordinal):
    """Whether a kernel on CUDA device ``ordinal`` may read memory the driver locates so:
    that device's, managed memory, pinned host memory (mapped into its addresses)."""
    return ((device_type == APDL_CUDA and device_id == ordinal)
            or device_type == APDL_CUDA_HOST or device_type == APDL_CUDA_MANAGED)


cdef int _join_neighbours(uintptr_t low, uintptr_t high, int32_t ordinal, uintptr_t* start,
                          uintptr_t* end) except -1:
    """[start, end), the allocation holding a layout's first element, extended over the
    allocations right next to it that the kernel may read, until it holds [low, high) or
    the next is missing: memory mapped in pieces (cuMemMap) has a range per piece, and a
    tensor may lie across pieces. Asked only where the layout leaves its first allocation,
    at most _MAX_PIECES more questions. A driver failure raises as it is."""
    cdef int pieces = 0, status
    cdef int32_t device_type = 0, device_id = 0
    cdef uintptr_t base = 0, at
    cdef size_t size = 0
    while pieces < _MAX_PIECES and (end[0] < high or start[0] > low):
        at = end[0] if end[0] < high else start[0] - 1
        with nogil:
            status = ap_cuda_locate_allocation(at, &device_type, &device_id, &base, &size)
        if status != 0 and status != AP_CU_UNKNOWN_MEMORY:
            _cuda_location_refused(status, at, True)
        if (status != 0 or size == 0 or not _kernel_reads(device_type, device_id, ordinal)
                or (base != end[0] if at == end[0] else base + size != start[0])):
            return 0   # a gap, or memory the kernel may not read: the caller refuses
        if at == end[0]:
            end[0] = base + size
        else:
            start[0] = base
        pieces += 1
    return 0


cdef str _kernel_source_refusal(View v, int32_t ordinal):
    """Why arrayport's strided-copy kernel, launched on CUDA device ``ordinal``, may not
    read ``v``; None where it may. ``v``'s device and layout are its producer's word (a
    DLPack capsule, an Arrow device array), and a wrong one — pageable host memory called
    device memory, strides that reach past the allocation — would make the kernel fault and
    the context die with it (CUDA's sticky error: every later call of the process fails).
    So, before each launch (of either path: this one, gpu/kernels/strided_copy.py), the
    driver is asked where the memory is and which allocation holds it: one call, more only
    where the layout leaves that allocation (its neighbours, joined: _join_neighbours). The
    kernel may read memory of that device, managed memory and pinned host memory, every
    byte the layout reaches inside allocations the driver knows, with no gap between them
    (the driver's range of a virtual reservation may be the whole reservation, mapped or
    not: what lies in its unmapped part passes). A driver that fails to answer raises its
    own error; only its answers become this refusal. Transfers need no such question: the
    driver reads memory a transfer names as what it is. ROCm memory is never asked about:
    HIP cannot load the kernels (PTX), its strided copies are transfers. Without the floor
    (a driver older than CUDA 11.3) only the location is asked, through the driver."""
    cdef int32_t labelled = v._t.device.device_type
    if labelled != APDL_CUDA and labelled != APDL_CUDA_MANAGED:
        return None
    cdef uintptr_t pointer = <uintptr_t>v._t.data + v._t.byte_offset, start = 0, end
    cdef size_t size = 0
    cdef int32_t device_type = 0, device_id = 0
    cdef int status = 0
    cdef bint floor = ap_cuda_floor_ready()
    cdef APExtent extent
    if floor:
        with nogil:
            status = ap_cuda_locate_allocation(pointer, &device_type, &device_id, &start,
                                               &size)
        if status != 0 and status != AP_CU_UNKNOWN_MEMORY:
            _cuda_location_refused(status, pointer, True)   # a failure, not an answer
    driver = None if floor else _driver_for(APDL_CUDA)   # no driver: its own error
    try:
        if not floor:
            device_type, device_id = driver.locate_pointer(pointer)
        elif status == AP_CU_UNKNOWN_MEMORY:
            _cuda_location_refused(status, pointer, True)   # the driver's answer, worded
    except BufferError as error:
        found = str(error)
    else:
        end = start + size
        if device_type == APDL_CUDA and device_id != ordinal:
            found = f"the driver places it on cuda:{device_id}"
        elif not _kernel_reads(device_type, device_id, ordinal):
            found = f"the driver calls it {Device(device_type, device_id)} memory"
        elif size == 0:   # the driver gives no range: the location is all it says
            return None
        elif ap_layout_extent(v._t.ndim, v._t.shape, v._t.strides, v._itembits(),
                              <uintptr_t>v._t.data, v._t.byte_offset, &extent) != AP_EXTENT_OK:
            found = "its layout's extent does not fit an address"
        elif (ap_extent_within(pointer, &extent, start, <int64_t>size)
              or (_join_neighbours(pointer + extent.low, pointer + extent.high, ordinal,
                                   &start, &end) == 0
                  and ap_extent_within(pointer, &extent, start, <int64_t>(end - start)))):
            return None
        else:
            found = (f"its layout reaches bytes {<int64_t>(pointer - start) + extent.low}.."
                     f"{<int64_t>(pointer - start) + extent.high} of the {end - start}-byte "
                     f"memory holding it")
    return (f"its producer labelled it {v.device} memory, but {found}; arrayport's kernel "
            f"on cuda:{ordinal} would fault reading it")


cdef int _kernel_may_read(View v, int32_t ordinal) except -1:
    """For this part's copies: whether the kernel may read ``v`` — 0 where not, and where
    the driver failed to answer (the general path asks again and raises what it says, as
    for every failure here)."""
    try:
        return _kernel_source_refusal(v, ordinal) is None
    except BufferError:
        return 0


def kernel_source_refusal(View v, int32_t ordinal):
    """Why the strided-copy kernel on CUDA device ``ordinal`` may not read ``v``; None
    where it may (the core's rule, for gpu/kernels/strided_copy.py)."""
    return _kernel_source_refusal(v, ordinal)


DEF _TO_DEVICE = 0   # what a session's copy does: to the device (its own memory, or an upload)
DEF _TO_HOST = 1     # device memory into new host memory


cdef View _in_one_session(int kind, View v, int32_t ordinal, uintptr_t handle,
                          bint contiguous, tuple pool, bint on_device, bint pageable):
    """The copy's calls in one session of the floor for device ``ordinal``: its context made
    current, and its id read, once (cuda_floor.h says what the session saves, and why it
    may); the session ends however the copy does."""
    cdef ap_cuda_session session
    cdef int status
    with nogil:
        status = ap_cuda_session_enter(ordinal, &session)
    try:
        if status != 0:
            return None
        if kind == _TO_HOST:
            return _cuda_copy_to_host_in_session(v, ordinal, handle, contiguous, pool)
        return _cuda_copy_in_session(v, ordinal, handle, contiguous, pool, on_device,
                                     pageable)
    finally:
        with nogil:
            ap_cuda_session_exit(&session)


cdef int32_t _upload_ordinal(View v, device, int32_t device_type):
    """The device of ``device_type`` an upload of host memory ``v`` from C goes to (both
    vendors' copies here); -1 where the core does not make it: another target, a source
    with GPU work pending or a producer stream (host memory a stream writes), the pinned
    ring's threshold not read yet (gpu/staging.py not imported)."""
    cdef tuple target = _copy_target(device)
    if (target is None or target[0] != device_type or _upload_staging is None
            or v._stream is not None or v._producer_stream is not None):
        return -1
    return target[1]


cdef inline bint _ring_takes(size_t nbytes):
    """Whether an upload of ``nbytes`` of pageable memory is the pinned ring's (gpu/staging.py,
    the threshold's one owner: a Python path) rather than one transfer."""
    return nbytes >= _upload_staging.THRESHOLD_BYTES


cdef View _upload_source(View v):
    """What an upload from C sends: ``v`` where C-contiguous, else its packing by the host
    kernel into new (pageable) host memory; None where that packing is the pinned ring's to
    send (the general path packs and stages it)."""
    if ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides):
        return v
    if _ring_takes(v.nbytes):
        return None
    packed = _new_host_copy_of(v, v._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
    _copy_elements(v, <char*>packed._t.data)
    return packed


cdef View _device_result(View v, object owner, uintptr_t address, int32_t device_type,
                         int32_t ordinal, handle):
    """A copy's result from C, in both vendors' copies here: a C-contiguous, writable View
    of ``v``'s shape and type at ``address`` (device ``ordinal`` of ``device_type``), kept
    alive by ``owner``, flagged a copy, with the copy's work pending on ``handle``."""
    cdef View result = _new_view_like(v, owner, "copy")
    result._t.data = <void*>address
    result._t.byte_offset = 0
    result._t.device.device_type = device_type
    result._t.device.device_id = ordinal
    _fill_c_strides(result._t.ndim, result._t.shape, result._t.strides)
    result._flags = (v._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED) | APDL_FLAG_IS_COPIED
    result._stream = handle
    return result


cdef View _cuda_upload_in_c(View v, device, stream):
    """Host memory copied to a CUDA device's pool, from C (see the header): a strided source
    packed by the host kernel first, then one transfer. None where this does not serve
    (``_upload_ordinal``, ``_upload_source``; large pageable memory: the pinned ring)."""
    cdef int32_t ordinal = _upload_ordinal(v, device, APDL_CUDA)
    cdef int32_t device_type = 0, device_id = 0
    cdef int status
    cdef uintptr_t handle
    cdef bint pageable
    if ordinal < 0:
        return None
    pool = _cuda_result_pools.get(ordinal)
    if pool is None or pool[0].closed:
        return None
    handle = copy_work_stream(check_stream(stream, APDL_CUDA), APDL_CUDA)
    cdef View source = _upload_source(v)
    if source is None:
        return None
    pageable = source is not v   # a packing is pageable
    if not pageable:
        with nogil:   # pageable, or memory the driver knows (pinned): kept until it ran
            status = ap_cuda_locate_pointer(<uintptr_t>v._t.data + v._t.byte_offset,
                                            &device_type, &device_id)
        if status != 0 and status != AP_CU_UNKNOWN_MEMORY:
            return None
        pageable = status == AP_CU_UNKNOWN_MEMORY
        if pageable and _ring_takes(v.nbytes):
            return None
    return _in_one_session(_TO_DEVICE, source, ordinal, handle, True, pool, False, pageable)


cdef View _cuda_device_copy_in_c(View v, device, stream):
    """CUDA device memory copied to its own device or to the host, from C (see the
    header); None where this does not serve."""
    cdef int32_t ordinal = v._t.device.device_id
    cdef uintptr_t handle
    cdef bint contiguous, to_host = False
    cdef tuple target
    if device is not None:   # its own device (as None), or the host's memory
        target = _copy_target(device)
        if target is None:
            return None
        to_host = target == (APDL_CPU, 0)
        if not to_host and target != (APDL_CUDA, ordinal):
            return None
    contiguous = ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides)
    if not contiguous and not (ap_cuda_kernel_published(ordinal, 0)
                               or ap_cuda_kernel_published(ordinal, 1)):
        return None   # the general path loads the kernels (and publishes them) first
    pool = _cuda_result_pools.get(ordinal)   # results, and a strided download's staging
    if (not to_host or not contiguous) and (pool is None or pool[0].closed):
        return None
    handle = copy_work_stream(check_stream(stream, APDL_CUDA), APDL_CUDA)
    return _in_one_session(_TO_HOST if to_host else _TO_DEVICE, v, ordinal, handle,
                           contiguous, pool, True, False)


cdef View _cuda_copy_to_host_in_session(View v, int32_t ordinal, uintptr_t handle,
                                        bint contiguous, tuple pool):
    """Device memory copied into new host memory (``_new_host_copy_of``), on ``handle``,
    complete when this returns: the waits, one transfer — of the source, or of its packing
    by the strided-copy kernel into a staging block of ``pool`` (freed in the stream's order
    after the transfer, as the general path's staging is) — and the host's one wait for the
    stream (a copy into host memory is readable on return)."""
    cdef int on = 0, launched = 0
    cdef int status, synchronized
    cdef bint enqueued = False
    cdef size_t nbytes = v.nbytes
    cdef uintptr_t source = <uintptr_t>v._t.data + v._t.byte_offset, staging = 0
    cdef ap_plan_launch launch
    cdef uintptr_t pool_handle = 0 if pool is None else pool[1]
    if not contiguous and not _kernel_may_read(v, ordinal):
        return None   # the general path refuses it, in its words
    with nogil:
        status = ap_cuda_stream_is_on(handle, ordinal, &on)
        if status == 0 and on and not contiguous:   # (a full device: the general path)
            status = ap_cuda_pool_allocate(ordinal, <void*>pool_handle, nbytes, handle,
                                           &staging)
    if status != 0 or not on:
        return None
    cdef View result
    try:
        if not contiguous and _plan_view_copy(v, staging, &launch) != 0:
            return None   # no plan (too deep): the general path copies by DMA
        result = _new_host_copy_of(v, v._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
        _order_copy_after_source(_CUDA_FLOOR_WAITS, v, ordinal, handle)
        with nogil:
            if not contiguous:
                status = ap_cuda_launch(ordinal, launch.tiled, launch.grid, launch.block,
                                        &launch.params, handle, &launched)
                if status == 0 and not launched:
                    status = -1   # not published for this context as it is now
                source = staging
            if status == 0:
                enqueued = True   # the transfer may write the result's memory from here on
                status = ap_cuda_copy_async(ordinal, <uintptr_t>result._t.data, source,
                                            nbytes, handle)
        if status == 0:
            _order_writers_after_copy(_CUDA_FLOOR_WAITS, v, ordinal, handle)
    except BufferError:
        status = -1
    finally:
        if staging:   # after the transfer that reads it, in the stream's order
            with nogil:
                ap_cuda_free_async(ordinal, staging, handle)
        if enqueued:   # the host's wait, whatever failed after the transfer was queued:
            with nogil:  # host memory is not let go while written
                synchronized = ap_cuda_stream_synchronize(ordinal, handle)
            if status == 0:
                status = synchronized
    return result if status == 0 else None


cdef View _cuda_copy_in_session(View v, int32_t ordinal, uintptr_t handle, bint contiguous,
                                tuple pool, bint on_device, bint pageable):
    """The copy's steps into device ``ordinal``'s memory, inside the floor's session for it:
    a block of ``pool`` on ``handle``, the waits, the transfer or the launch, the result
    (None where a step is refused). ``v`` is that device's memory (``on_device``), or host
    memory — ``pageable`` (the driver has read it when the transfer call returns: nothing
    kept), else pinned (kept until the block is freed, as a device source is)."""
    cdef int on = 0, launched = 0
    cdef int status
    cdef uintptr_t address = 0
    cdef size_t nbytes = v.nbytes, extent = 0
    cdef ap_plan_launch launch
    cdef uintptr_t pool_handle = pool[1]
    if on_device and not contiguous and not _kernel_may_read(v, ordinal):
        return None   # the general path refuses it, in its words
    with nogil:
        status = ap_cuda_stream_is_on(handle, ordinal, &on)
        if status == 0 and on:
            status = ap_cuda_pool_allocate(ordinal, <void*>pool_handle, nbytes, handle,
                                           &address)
    cdef _PoolAttempt attempt
    if status == _CUDA_ERROR_OUT_OF_MEMORY and on:
        attempt = _PoolAttempt.__new__(_PoolAttempt)
        attempt.ordinal, attempt.pool, attempt.stream = ordinal, pool_handle, handle
        attempt.nbytes = nbytes
        status = pool[3](status, attempt)
        address = attempt.address
    if status != 0 or not on:
        return None
    cdef _PooledBlock block = _PooledBlock.__new__(_PooledBlock)
    block.address, block.nbytes, block.release, block.keep = address, nbytes, pool[2], ()
    if not contiguous and _plan_view_copy(v, address, &launch) != 0:
        return None   # no plan (too deep): the general path copies by DMA
    try:
        _order_copy_after_source(_CUDA_FLOOR_WAITS, v, ordinal, handle)
        with nogil:
            if contiguous:
                status = ap_cuda_copy_async(ordinal, address, <uintptr_t>v._t.data
                                            + v._t.byte_offset, nbytes, handle)
            else:
                status = ap_cuda_launch(ordinal, launch.tiled, launch.grid, launch.block,
                                        &launch.params, handle, &launched)
                if status == 0 and not launched:
                    status = -1   # not published (yet, or for this context as it is now)
        if status == 0:
            _order_writers_after_copy(_CUDA_FLOOR_WAITS, v, ordinal, handle)
            if on_device:
                with nogil:
                    status = ap_cuda_allocation_bytes(ordinal, <uintptr_t>v._t.data, &extent)
    except BufferError:
        status = -1
    if status != 0:
        return None   # the block goes back with `block`; the general path starts again
    # What the copy reads stays alive until its block is really freed, counted at its
    # whole allocation (a small View of a large one holds all of it); pageable host memory
    # was read when the transfer call returned.
    if not pageable:
        block.keep, block.keep_bytes = (v,), extent or nbytes
    return _device_result(v, block, address, APDL_CUDA, ordinal, handle)
