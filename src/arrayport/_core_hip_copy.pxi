# Included by _core.pyx. The ROCm copies the core issues itself (View.copy), from C on
# HIP's compiled floor (_csrc/hip_floor.h), in one floor session each (the device made
# current once), with no Python between the call and the runtime — ROCm's counterpart of
# _core_device_copy.pxi, whose reading of a target, upload rule and result View it shares:
#   - ROCm device memory to its own device: new device memory (hipMalloc), one transfer
#     where C-contiguous, else the 2-D transfers of the layout's plan (_csrc/transfer_runs.h:
#     HIP cannot load arrayport's PTX kernels);
#   - ROCm device memory to new host memory: the same transfers, then the host's wait for
#     the stream (a copy into host memory is readable on return);
#   - host memory to a ROCm device: one transfer (strided memory packed by the host kernel
#     first; pageable memory only below the pinned ring's threshold, gpu/staging.py's).
# Everything else (another device; pinned targets; the floor off; results not published
# yet) is
# arrayport/gpu/copies.py's, through the copy hook; so is every failure here: where the
# floor refuses a step, the general path makes the copy again from the start and says what
# went wrong as it always does (its room-making for a full device among it).
#
# Who owns what: what becomes of a dead result's memory is the memory policy's
# (gpu/held_memory.py), which says per device, through HIP's memory floor
# (publish_hip_results), how a result's memory is given back — its release, and whether
# that is the vendor's free at once (HIP's frees wait for the device's work), which the
# core then makes itself from C while the floor is up; the stream rules (which streams wait
# for whom) are _core_streams.pxi's, asked with HIP's floor as the waiter.
# tests/test_gpu_hip_copy.py holds this path to the general one: the same bytes, the same
# View, the same waits, the same lifetimes.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_device_copy.pxi: _copy_target, _device_result, _ring_takes, _upload_ordinal,
#       _upload_source
#   _core_hip_floor.pxi: _hip_floor_direct
#   _core_host_copy.pxi: _new_host_copy_of
#   _core_kernel_plan.pxi: _plan_view_transfers
#   _core_streams.pxi: _HIP_FLOOR_WAITS, _order_copy_after_source,
#       _order_writers_after_copy
#   _core_view.pxi: View


# Each device's results, as gpu/held_memory.py published them: ordinal -> (release(address,
# nbytes, keep, keep_bytes): a dead result's memory given back as the policy says; at_once:
# whether that is the vendor's free at once, which the core makes itself from C).
cdef dict _hip_results = {}


def publish_hip_results(int ordinal, release, bint at_once=False):
    """Say that the core's copies to ROCm device ``ordinal`` may make results of ordinary
    memory given back by ``release(address, nbytes, keep, keep_bytes)`` — by HIP's free
    from C while the floor is up, where ``at_once`` says that is what ``release`` does;
    ``release`` None: no longer; ``ordinal`` -1 with None: no device's (the driver closed,
    or a test swapped the policy's tables)."""
    if release is None:
        if ordinal == -1:
            _hip_results.clear()
        else:
            _hip_results.pop(ordinal, None)
    else:
        _hip_results[ordinal] = (release, at_once)


def published_hip_results(int ordinal):
    """(release, at_once) as published for ROCm device ``ordinal``; None: nothing."""
    return _hip_results.get(ordinal)


@cython.no_gc_clear   # a result in a reference cycle still gives its memory back
cdef class _HipResultMemory:
    """A copy's new device memory (hipMalloc), and what it keeps alive (the source, which
    the copy's transfer may still read): given back when the last View on it goes — by
    HIP's free from C (it waits for the device's work) where the policy said that is its
    rule and the floor is up, else through the policy's ``release``."""
    cdef uintptr_t address
    cdef size_t nbytes
    cdef size_t keep_bytes
    cdef int ordinal
    cdef bint at_once
    cdef object keep
    cdef object release

    def __dealloc__(self):
        cdef uintptr_t address = self.address
        cdef int status = -1
        if not address:
            return
        self.address = 0
        if self.at_once:
            with nogil:
                status = ap_hip_free(self.ordinal, address)
        # Through the policy only where HIP's free was not tried (the floor closed, at exit;
        # a fork's child; the device not made current): after a failed hipFree the memory
        # may be gone, and is never freed twice.
        if status == AP_HIP_NOT_TRIED or not self.at_once:
            try:
                self.release(address, self.nbytes, self.keep, self.keep_bytes)
            except BaseException:   # at interpreter exit the runtime may be gone
                pass


cdef View _hip_copy_in_c(View v, device, stream):
    """``v.copy(device, stream)`` issued from C where this part serves (see the header);
    None where it does not, or where the floor refused a step (the caller takes the general
    path, which makes the copy whole)."""
    if (not _hip_floor_direct or not ap_hip_floor_ready() or v.nbytes == 0
            or (stream is not None and type(stream) is not int)):
        return None   # (the general path reads other stream objects)
    if v._t.device.device_type == APDL_CPU:
        return _hip_upload_in_c(v, device, stream) if device is not None else None
    if v._t.device.device_type == APDL_ROCM:
        return _hip_device_copy_in_c(v, device, stream)
    return None


cdef View _hip_upload_in_c(View v, device, stream):
    """Host memory copied to new memory of a ROCm device, from C: one transfer (a strided
    source packed first). None where this does not serve (``_upload_ordinal``,
    ``_upload_source``; large pageable memory: the pinned ring)."""
    cdef int32_t ordinal = _upload_ordinal(v, device, APDL_ROCM)
    cdef int32_t device_type = 0, device_id = 0
    cdef int status
    cdef bint pageable
    if ordinal < 0:
        return None
    results = _hip_results.get(ordinal)
    if results is None:
        return None
    handle = copy_work_stream(check_stream(stream, APDL_ROCM), APDL_ROCM)
    cdef View source = _upload_source(v)
    if source is None:
        return None
    pageable = source is not v   # a packing is pageable
    if not pageable:
        with nogil:   # pageable, or memory the runtime knows (pinned): kept until it ran
            status = ap_hip_locate_pointer(<uintptr_t>v._t.data + v._t.byte_offset,
                                           &device_type, &device_id)
        if status != 0 and status != AP_HIP_UNKNOWN_MEMORY:
            return None
        pageable = status == AP_HIP_UNKNOWN_MEMORY
        if pageable and _ring_takes(v.nbytes):
            return None
    return _hip_in_one_session(source, ordinal, handle, results, False, pageable)


cdef View _hip_device_copy_in_c(View v, device, stream):
    """ROCm device memory copied to its own device or to the host, from C; None where this
    does not serve."""
    cdef int32_t ordinal = v._t.device.device_id
    cdef bint to_host = False
    cdef tuple target
    if device is not None:   # its own device (as None), or the host's memory
        target = _copy_target(device)
        if target is None:
            return None
        to_host = target == (APDL_CPU, 0)
        if not to_host and target != (APDL_ROCM, ordinal):
            return None
    results = None if to_host else _hip_results.get(ordinal)
    if not to_host and results is None:
        return None
    handle = copy_work_stream(check_stream(stream, APDL_ROCM), APDL_ROCM)
    return _hip_in_one_session(v, ordinal, handle, results, to_host, False)


cdef View _hip_in_one_session(View v, int32_t ordinal, uintptr_t handle, tuple results,
                              bint to_host, bint pageable):
    """The copy's calls in one session of the floor for device ``ordinal`` (made current
    once, the thread's device set back however the copy ends)."""
    cdef ap_hip_session session
    cdef int status
    with nogil:
        status = ap_hip_session_enter(ordinal, &session)
    try:
        if status != 0:
            return None
        return _hip_copy_in_session(v, ordinal, handle, results, to_host, pageable)
    finally:
        with nogil:
            ap_hip_session_exit(&session)


cdef View _hip_copy_in_session(View v, int32_t ordinal, uintptr_t handle, tuple results,
                               bint to_host, bint pageable):
    """The transfers of ``v`` (memory of the session's device, or C-contiguous host memory)
    on ``handle``, after the waits, into new memory — one where ``v`` is C-contiguous, else
    its layout's 2-D transfers (_plan_view_transfers) — host memory (``to_host``; complete
    on return: the host's one wait for the stream), else device memory of the session's
    device given back as ``results`` says. ``pageable``: host memory the runtime has read
    when the transfer call returns (nothing kept); any other source stays alive while the
    result's memory does (HIP's free waits for the transfers). None where a step is
    refused."""
    cdef int on = 0, status, synchronized, max_pitch = 0
    cdef bint enqueued = False
    cdef bint contiguous = ap_is_c_contiguous(v._t.ndim, v._t.shape, v._t.strides)
    cdef uintptr_t address = 0, destination, source = <uintptr_t>v._t.data + v._t.byte_offset
    cdef size_t nbytes = v.nbytes
    cdef int64_t source_offset = 0, destination_offset = 0
    cdef ap_transfer_runs plan
    cdef View result = None
    cdef _HipResultMemory memory = None
    with nogil:
        status = ap_hip_session_stream_is_on(handle, &on)
        if status == 0 and on and not contiguous:
            status = ap_hip_session_max_pitch(&max_pitch)
    if status != 0 or not on:
        return None   # a stream of another device: the general path
    if not contiguous and _plan_view_transfers(v, max_pitch, &plan) != 0:
        return None   # (packed sub-byte elements are never strided: layouts refuse it)
    if not to_host:
        with nogil:
            status = ap_hip_session_allocate(nbytes, &address)
        if status != 0:
            return None   # a full device: the general path makes room, or says so
    if to_host:
        result = _new_host_copy_of(v, v._flags & APDL_FLAG_IS_SUBBYTE_TYPE_PADDED)
        destination = <uintptr_t>result._t.data
    else:
        memory = _HipResultMemory.__new__(_HipResultMemory)
        memory.address, memory.nbytes, memory.ordinal = address, nbytes, ordinal
        memory.release, memory.at_once = results
        memory.keep = ()
        destination = address
    try:
        _order_copy_after_source(_HIP_FLOOR_WAITS, v, ordinal, handle)
        with nogil:
            enqueued = True   # work may be queued into the new memory from here on
            if contiguous:
                status = ap_hip_session_copy_async(destination, source, nbytes, handle)
            else:
                while status == 0 and ap_transfer_runs_next(&plan, &source_offset,
                                                            &destination_offset):
                    if plan.rows == 1:   # one row: a plain transfer, no pitch to bound
                        status = ap_hip_session_copy_async(
                            destination + destination_offset, source + source_offset,
                            plan.width, handle)
                    else:
                        status = ap_hip_session_copy_2d_async(
                            destination + destination_offset, plan.width,
                            source + source_offset, plan.pitch, plan.width, plan.rows, handle)
        if status == 0:
            _order_writers_after_copy(_HIP_FLOOR_WAITS, v, ordinal, handle)
    except BufferError:
        status = -1
    finally:
        if to_host and enqueued:   # the host's wait, whatever failed after the transfers
            with nogil:            # were queued: host memory is not let go while written
                synchronized = ap_hip_session_synchronize(handle)
            if status == 0:
                status = synchronized
    if status != 0:
        return None   # the memory goes with `memory` (hipFree waits for the device's
        # work); the general path starts again
    if to_host:
        return result
    if not pageable:
        memory.keep, memory.keep_bytes = (v,), nbytes
    return _device_result(v, memory, address, APDL_ROCM, ordinal, handle)
