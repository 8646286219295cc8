# Included by _core.pyx. Stream order, the one owner (issue 32). Every rule about CUDA and
# ROCm streams lives here and nowhere else:
#   - what a stream value means: DLPack's None, -1, 1, 2 or a handle (check_stream); the
#     CUDA Array Interface's None, 1, 2 or a handle (_cai_stream); an object with cuda-core's
#     __cuda_stream__ protocol, wherever arrayport takes a stream (_stream_argument);
#   - which stream None stands for (_NONE_STREAM);
#   - whether arrayport orders anything: the implicit-synchronization switch, read only in
#     this file (_implicit_sync; arrayport.gpu holds its public functions);
#   - who waits for whom, and how: an event recorded on the producer's stream and waited on
#     by the consumer's (the driver's make_stream_wait); the host blocks only where host
#     memory must be readable when a call returns.
# Every path asks it: DLPack export (View.__dlpack__, ap.view of a View) and import
# (_dlpack_view), the CUDA Array Interface both ways, the DLPack exchange API and the C API,
# copies on one device, between devices and to the host (arrayport/gpu/copies.py, through the
# def functions at the end), and pickling.
#
# A View carries two stream facts, set only here: _stream, the stream with work pending on
# its data (None: none), and _producer_stream, a CUDA Array Interface producer's own
# stream once the import has handed the data over to a consumer's stream.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_cuda_floor.pxi: _cuda_floor_serves, _cuda_floor_wait
#   _core_hip_floor.pxi: _hip_floor_serves, _hip_floor_wait
#   _core_describe.pxi: _plain_int
#   _core_hooks.pxi: _driver_for
#   _core_view.pxi: View


# Implicit synchronization: on unless ARRAYPORT_IMPLICIT_SYNC=0 (or false/off/no) says off.
cdef bint _implicit_sync = _os.environ.get("ARRAYPORT_IMPLICIT_SYNC", "1").strip().lower() \
    not in ("0", "false", "off", "no")
# The stream None stands for, per device type (DLPack: the legacy default stream; ROCm's
# null stream). The pinned-host kinds: the stream a copy to or from them runs on.
# (the one statement of it; Python asks none_stream_of)
cdef dict _NONE_STREAM = {APDL_CUDA: 1, APDL_CUDA_MANAGED: 1, APDL_CUDA_HOST: 1,
                          APDL_ROCM: 0, APDL_ROCM_HOST: 0}


def none_stream_of(int32_t device_type):
    """The stream None stands for on ``device_type`` (None: no streams), as this part
    decides it."""
    return _NONE_STREAM.get(device_type)


def set_implicit_sync(bint enabled):
    global _implicit_sync
    previous = _implicit_sync
    _implicit_sync = enabled
    return previous


def implicit_sync_enabled():
    return _implicit_sync


# ---- what a stream value means --------------------------------------------------------------

cdef inline int _check_handle_range(object stream, str protocol) except -1:
    """A stream handle is a pointer (cudaStream_t, hipStream_t): a value past one is refused
    at the door, so that no later driver call (cuStreamGetCtx of a truncated value) is the
    first to see it."""
    if stream > <uintptr_t>-1:
        raise ValueError(f"{protocol}: stream {stream} is not a stream handle (a handle is a "
                         f"pointer, at most {<uintptr_t>-1:#x})")
    return 0


cdef object _stream_argument(stream):
    """A stream argument as a plain int (or None): an int, or the handle an object's
    ``__cuda_stream__()`` gives — cuda-core's protocol, answering (0, handle), with 1 and 2
    for the legacy and per-thread default streams as in DLPack."""
    if stream is None or type(stream) is int:
        return stream
    if isinstance(stream, int) and not isinstance(stream, bool):
        return _plain_int(stream)
    method = getattr(type(stream), "__cuda_stream__", None)
    if method is None or isinstance(stream, bool):
        raise TypeError(f"dlpack: stream must be an int or None (or offer __cuda_stream__), "
                        f"got {type(stream).__name__}")
    answer = method(stream)
    if (type(answer) is not tuple or len(<tuple>answer) != 2 or answer[0] != 0
            or isinstance(answer[1], bool) or not isinstance(answer[1], int)):
        raise TypeError(f"dlpack: {type(stream).__qualname__}.__cuda_stream__() returned "
                        f"{answer!r}, not (0, handle)")
    return _plain_int(answer[1])


cdef object _gpu_stream_value(stream):
    """A stream argument held to the rules both GPU vendors share (an int >= -1, or a
    handle): what can be checked before knowing whose memory it is for; None stays None.
    The vendor's own rules are check_stream's."""
    if stream is None:
        return None
    stream = _stream_argument(stream)
    if stream < -1:
        raise ValueError(f"dlpack: stream must be >= -1, got {stream}")
    _check_handle_range(stream, "dlpack")
    return stream


def check_stream(stream, int32_t device_type):
    """The DLPack ``stream`` argument for memory of ``device_type``, validated (spec rules)
    and returned as a plain int or None: CUDA kinds take None, -1, 1 (legacy default), 2
    (per-thread default) or a stream handle > 2, never 0; ROCm kinds None, -1, 0 or a
    handle > 2; every other device only None."""
    if stream is None:
        return None
    cdef bint cuda = _cuda_kind(device_type)
    cdef bint rocm = device_type == APDL_ROCM
    if not (cuda or rocm):
        raise ValueError(f"dlpack: stream must be None for {_device_type_label(device_type)} "
                         f"memory, got {stream!r}")
    stream = _gpu_stream_value(stream)
    if cuda and stream == 0:
        raise ValueError("dlpack: stream 0 is ambiguous on CUDA and disallowed; use 1 (legacy "
                         "default stream), 2 (per-thread default stream) or a stream handle")
    if rocm and (stream == 1 or stream == 2):
        raise ValueError(f"dlpack: stream {stream} is not supported on ROCm; use 0 (default "
                         f"stream) or a stream handle")
    return stream


cdef object _cai_consumer_stream(consumer, int32_t device_type):
    """The consumer's stream of a CUDA Array Interface import, once the memory is located:
    DLPack's rules for the vendor whose memory it is (CUDA's, pinned memory included; ROCm's
    for HIP memory, which ROCm's libraries export through this interface too)."""
    return check_stream(consumer, APDL_ROCM if _rocm_kind(device_type) else APDL_CUDA)


cdef object _cai_producer_stream(producer, int32_t device_type):
    """A CUDA Array Interface producer's stream as the DLPack value a View keeps. On CUDA
    memory it is that value already. On HIP memory the interface's legacy default stream
    (1) is HIP's null stream, DLPack's 0 on ROCm; its per-thread default stream (2) is
    refused: HIP's hipStreamPerThread is that handle, but arrayport has never been shown
    to order after it (the HIP simulator does not model it), so it is refused rather than
    guessed."""
    if producer is None or not _rocm_kind(device_type):
        return producer
    if producer == 1:
        return 0
    if producer == 2:
        raise BufferError("cuda_array_interface: stream 2 (the per-thread default stream) on "
                          "ROCm memory is not supported: arrayport does not order after "
                          "hipStreamPerThread")
    return producer


cdef object _cai_stream(dict d):
    """A CUDA Array Interface producer's ``stream`` entry: None or a stream handle (1
    legacy, 2 per-thread); 0 is disallowed by the spec."""
    stream = d.get("stream")
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"cuda_array_interface: stream must be None or an int, got "
                        f"{type(stream).__name__}")
    stream = _plain_int(stream)
    if stream == 0:
        raise ValueError("cuda_array_interface: stream 0 is disallowed (ambiguous between "
                         "None and the legacy and per-thread default streams); use None, "
                         "1 or 2")
    if stream < 0:
        raise ValueError(f"cuda_array_interface: stream {stream} is not a stream handle")
    _check_handle_range(stream, "cuda_array_interface")
    return stream


# ---- exports: the consumer waits for what is pending ------------------------------------------

cdef int _order_after_pending(View v, consumer) except -1:
    """The consumer's stream (DLPack value; None: the default stream) waits, on the GPU,
    for the work pending on ``v``: an event recorded on the pending stream. -1, no pending
    work, or synchronization switched off: nothing. Pinned host memory has no stream in
    DLPack (its consumers may be the CPU): its pending work is waited for on the host."""
    if v._stream is None or not _implicit_sync or consumer == -1:
        return 0
    cdef int32_t device_type = v._t.device.device_type
    if _host_accessible(device_type):
        return _host_wait_for_pending(v)
    if consumer is None:
        consumer = _NONE_STREAM.get(device_type)
        if consumer is None:
            return 0
    _make_stream_wait(device_type, v._t.device.device_id, consumer, v._stream)
    return 0


cdef int _make_stream_wait(int32_t device_type, int32_t ordinal, consumer, producer) except -1:
    """``consumer`` (of device ``ordinal``) waits on the GPU for ``producer``'s work so far:
    made by the CUDA or HIP floor from C where it serves (no Python), else by the device's
    driver."""
    if _cuda_floor_serves(device_type):
        return _cuda_floor_wait(ordinal, consumer, producer, ordinal)
    if device_type == APDL_ROCM_HOST:
        # pinned memory names no device (its id is 0): the producer's stream says which
        ordinal = -1
    if _hip_floor_serves(device_type):
        return _hip_floor_wait(ordinal, consumer, producer, ordinal)
    _driver_for(device_type).make_stream_wait(ordinal, consumer, producer)
    return 0


cdef int _order_default_stream_after_pending(View v) except -1:
    """The exchange API's "no sync" exports leave ordering to the consumer, which orders
    its stream after our current work stream: the default stream (NULL, below). A View
    with work pending on another stream first makes the default stream wait for it (an
    event, on the GPU), so that ordering is enough."""
    return _order_after_pending(v, None)


cdef inline int _host_wait_for_pending(View v) except -1:
    """The one rule for every host reader of a View (issue 40): before the host touches
    memory with GPU work pending on it (pinned memory an asynchronous copy is still
    writing), block until that work is done; nothing when nothing is pending (one pointer
    test). The spec's rule for CPU exports of memory a GPU may still be writing, applied to
    every host form, each of which calls this before handing out or reading the memory:
    the buffer protocol (_fill_buffer), __array_interface__ (_array_interface_of), every
    ndarray over a View (_ndarray_over_view: __array__, to_numpy, NumPy's dispatch), the
    Arrow C data exports (_view_arrow_array, _view_arrow_stream), the host copy kernel
    (_copy_elements: host_copy, share, the converters' and copies' host packing), the
    sub-byte unpacking (unpacked_copy), DLPack exports to the CPU and pinned consumers
    (_export_source, _order_after_pending) and pickling. tests/test_host_readers.py lists
    every host form and fails when one does not wait.
    Once waited, the work is done: ``v`` has nothing pending any more, so later reads do
    not wait again — not for unrelated work queued on that stream since, nor on a stream
    its producer has destroyed in the meantime. The stream stays known as one that may
    write the data again (``_producer_stream``, unless one is known already), so copies
    still order it after themselves (order_writers_after_copy).
    Implicit synchronization off: nothing (the caller orders its own reads).
    Inline: the common case, nothing pending, is one pointer test at each door."""
    if v._stream is None:
        return 0
    return _host_wait_for_pending_work(v)


cdef int _host_wait_for_pending_work(View v) except -1:
    """``_host_wait_for_pending`` when something is pending (see there)."""
    if not _implicit_sync:
        return 0
    stream = v._stream
    _driver_for(v._t.device.device_type).synchronize(v._t.device.device_id, stream)
    v._stream = None
    if v._producer_stream is None:
        v._producer_stream = stream
    return 0


def host_wait_for_pending(View v):
    """``_host_wait_for_pending`` for the Python layers (pickling)."""
    _host_wait_for_pending(v)


cdef int _host_wait_for_arrow_event(int32_t device_type, int32_t device_id,
                                    uintptr_t event) except -1:
    """Block until an Arrow producer's sync ``event`` has completed: before arrayport
    itself reads a host-accessible buffer of the array (a pinned validity bitmap, counted
    on the host) during the import. Done whatever the implicit-synchronization switch says:
    the read is arrayport's own, needed for a right answer, as a copy to the host is."""
    if event != 0:
        _driver_for(device_type).synchronize_event(device_id, event)
    return 0


cdef object _cai_export_stream(View v):
    """The ``stream`` entry of ``v``'s CUDA Array Interface: honestly the stream with
    pending work, or None (also with synchronization off: the spec's producer option). On
    HIP memory, pending work on the null stream (DLPack's 0, which the interface forbids) is
    said as the interface's legacy default stream, 1 (read back the same way)."""
    if not _implicit_sync:
        return None
    if v._stream == 0 and _rocm_kind(v._t.device.device_type):
        return 1
    return v._stream


# ---- imports: what the producer is told, and what the View remembers ----------------------

cdef bint _import_asks_producer_stream(consumer):
    """Whether an import through a DLPack exchange table (whose "no sync" functions order
    nothing) must learn the producer's current work stream: synchronization on, and the
    consumer did not say -1 ("do not synchronize"). Off: nothing is asked."""
    return _implicit_sync and consumer != -1


cdef object _stream_of_handle(int32_t device_type, uintptr_t handle):
    """A stream handle as C code hands it over (a ``cudaStream_t``/``hipStream_t``: what an
    exchange table's ``current_work_stream`` writes) as a DLPack stream value: NULL is the
    device's default stream (``_NONE_STREAM``: CUDA's legacy stream 1, ROCm's 0); any other
    handle is itself (CUDA's own handles of its legacy and per-thread streams are 1 and 2)."""
    if handle == 0:
        return _NONE_STREAM.get(device_type)
    return handle


cdef int _note_exchange_import(View v, uintptr_t producer_handle, consumer) except -1:
    """A GPU tensor imported through its producer's exchange table, which wrote its current
    work stream to ``producer_handle``: that stream's work is pending on the data, and a
    named consumer stream is ordered after it (``_order_import_after_producer``)."""
    cdef int32_t device_type = v._t.device.device_type
    return _order_import_after_producer(v, _stream_of_handle(device_type, producer_handle),
                                        consumer)


cdef bint _export_orders_consumer(View v):
    """Whether an export that hands ``v`` to a consumer's exchange table ("no sync") must
    first order the consumer's current work stream after ``v``'s pending work: something is
    pending and synchronization is on. Nothing pending: the consumer's stream is not even
    asked."""
    return v._stream is not None and _implicit_sync


cdef int _order_consumer_handle_after_pending(View v, uintptr_t consumer_handle) except -1:
    """The consumer's current work stream (a handle its exchange table wrote) waits for
    ``v``'s pending work, as a DLPack export to that stream would."""
    return _order_after_pending(v, _stream_of_handle(v._t.device.device_type,
                                                     consumer_handle))


cdef object _stream_to_ask_producer(stream, int32_t gpu_type):
    """The ``stream`` to pass to a DLPack producer whose data is on ``gpu_type`` (0: not a
    stream-ordered GPU): the consumer's, or -1 ("do not synchronize") when synchronization
    is off, so that the producer does not order anything either."""
    if not _implicit_sync and gpu_type != 0:
        return -1
    return stream


cdef bint _dlpack_import_needs_streams(stream):
    """Whether a DLPack import must look at streams (a consumer stream was named, or
    synchronization is off and the producer must be told so)."""
    return stream is not None or not _implicit_sync


cdef int _note_dlpack_import(View v, int32_t gpu_type, stream) except -1:
    """After the producer ordered its work before the consumer's ``stream``: the data is
    ready in that stream's order."""
    if gpu_type != 0 and stream is not None and stream != -1:
        v._stream = stream
    return 0


cdef int _order_import_after_producer(View v, producer, consumer) except -1:
    """An import whose producer ordered nothing but said which stream it wrote on — a CUDA
    Array Interface's ``stream`` entry, a DLPack exchange table's current work stream: with
    synchronization on, that stream is the View's pending work; a consumer stream, if
    named, waits for it now (an event), the data then being ready in the consumer's order,
    and the producer's stream is remembered (it must wait for what arrayport enqueues on the
    data before writing again). Off: act as if the producer gave no stream (the CUDA Array
    Interface spec's consumer option)."""
    if not _implicit_sync:
        return 0
    v._stream = producer
    if producer is not None and consumer is not None and consumer != -1:
        _make_stream_wait(v._t.device.device_type, v._t.device.device_id, consumer, producer)
        v._stream = consumer
        v._producer_stream = producer
    return 0


cdef uintptr_t _arrow_sync_event(int32_t device_type, void* sync_event,
                                 str protocol) except? 0:
    """The event handle an Arrow device array's ``sync_event`` points to (0: none). On the
    CPU it means nothing and is not read; on CUDA and ROCm kinds it is a pointer to the
    vendor's event; on other devices (OpenCL, Vulkan, Metal...) arrayport has no driver
    to wait with, so a non-NULL one is refused rather than dropped."""
    if sync_event == NULL or device_type == APDL_CPU:
        return 0
    if device_type not in _NONE_STREAM:
        raise BufferError(f"{protocol}: the array on {_device_type_label(device_type)} "
                          f"carries a sync event, which arrayport cannot wait for (no "
                          f"driver for those devices)")
    return <uintptr_t>(<void**>sync_event)[0]


cdef int _order_arrow_device_import(View v, uintptr_t event, consumer) except -1:
    """An Arrow device array's sync event (0: none): with synchronization on, the
    consumer's stream (DLPack value; None: the default stream of the View's device type)
    waits for it on the GPU, and the data is then ready in that stream's order. -1, no
    streams on that device type, or synchronization off: nothing (the consumer's own
    business, as with DLPack's -1)."""
    if event == 0 or not _implicit_sync or consumer == -1:
        return 0
    cdef int32_t device_type = v._t.device.device_type
    if consumer is None:
        consumer = _NONE_STREAM.get(device_type)
        if consumer is None:
            return 0
    _driver_for(device_type).wait_for_event(v._t.device.device_id, consumer, event)
    v._stream = consumer
    return 0


cdef object _arrow_export_event(View v):
    """The sync event of ``v``'s Arrow device export: None when nothing is pending (or
    synchronization is off), else a new event recorded on the pending stream (an
    OwnedEvent, which the export keeps until the consumer releases the array)."""
    if v._stream is None or not _implicit_sync:
        return None
    return _driver_for(v._t.device.device_type).record_event(v._t.device.device_id, v._stream)


# ---- copies (arrayport/gpu/copies.py) ------------------------------------------------------------

def copy_work_stream(stream, int32_t device_type):
    """The stream handle a copy involving ``device_type`` memory runs on: ``stream``, or
    the default stream for None. -1 names no stream, so a copy cannot run on it."""
    if stream == -1:
        raise ValueError("copy: stream=-1 names no stream; a copy needs one to run on (None "
                         "for the default stream)")
    return _NONE_STREAM[device_type] if stream is None else stream


def order_copy_after_source(driver, View source, int ordinal, stream):
    """The copy's ``stream`` (of device ``ordinal``) waits for the work pending on
    ``source``, recorded on the source's own device."""
    _order_copy_after_source(driver, source, ordinal, stream)


def order_writers_after_copy(driver, View source, int ordinal, stream):
    """The streams that may write ``source`` again wait for the copy enqueued on
    ``stream`` (of device ``ordinal``): see ``_order_writers_after_copy``."""
    _order_writers_after_copy(driver, source, ordinal, stream)


# The waiter a copy the core issues itself names, as the ``driver`` of the copy's stream
# rules below: its vendor's compiled floor, called from C with no driver object between
# (_core_device_copy.pxi's copies on CUDA's, _core_hip_copy.pxi's on HIP's).
cdef object _CUDA_FLOOR_WAITS = object()
cdef object _HIP_FLOOR_WAITS = object()


cdef int _copy_wait(driver, int ordinal, consumer, producer, int producer_ordinal) except -1:
    """A copy's stream wait, made by ``driver`` — or by a vendor's floor from C, where
    ``driver`` is its marker (above)."""
    if driver is _CUDA_FLOOR_WAITS:
        return _cuda_floor_wait(ordinal, consumer, producer, producer_ordinal)
    if driver is _HIP_FLOOR_WAITS:
        return _hip_floor_wait(ordinal, consumer, producer, producer_ordinal)
    driver.make_stream_wait(ordinal, consumer, producer, producer_ordinal)
    return 0


cdef int _order_copy_after_source(driver, View source, int ordinal, stream) except -1:
    if source._stream is not None and _implicit_sync:
        _copy_wait(driver, ordinal, stream, source._stream, source._t.device.device_id)
    return 0


cdef int _order_writers_after_copy(driver, View source, int ordinal, stream) except -1:
    """The streams that may write ``source`` again wait for the copy enqueued on
    ``stream`` (of device ``ordinal``): its pending stream (else, for device memory, the
    default stream) and, when a CUDA Array Interface import handed the data to a consumer,
    the producer's own stream. Host memory without pending work: only a stream known to
    write it again (its producer's, once the host has waited for that) is ordered."""
    if not _implicit_sync:
        return 0
    cdef int32_t device_type = source._t.device.device_type
    cdef int32_t device_id = source._t.device.device_id
    pending, producer = source._stream, source._producer_stream
    if pending is None and _host_accessible(device_type):
        if producer is not None:
            _copy_wait(driver, device_id, producer, stream, ordinal)
        return 0
    if pending is None:
        pending = _NONE_STREAM[device_type]
    _copy_wait(driver, device_id, pending, stream, ordinal)
    if producer is not None and producer != pending:
        _copy_wait(driver, device_id, producer, stream, ordinal)
    return 0


def order_transfer_after_packing(driver, int ordinal, stream, int packing_ordinal):
    """A strided copy to another device is packed on its source device (``packing_ordinal``)
    and then transferred on ``stream`` (of device ``ordinal``). The same stream handle
    orders both steps by itself; a default stream value names each device's own, and two
    devices' default streams are not ordered with each other: the transfer's waits for the
    packing's (an event), whatever the switch says — both steps are arrayport's own."""
    if driver.is_default_stream(stream):
        driver.make_stream_wait(ordinal, stream, stream, packing_ordinal)


def finish_copy(driver, int ordinal, stream, bint lands_on_host):
    """The stream with the copy's work pending, for its result: None once a copy that
    lands in host memory is done (the host must be able to read it when ``copy`` returns,
    so that one wait is on the host, whatever the switch says)."""
    if lands_on_host:
        driver.synchronize(ordinal, stream)
        return None
    return stream


# ---- a View's stream facts, read and set for the Python layers --------------------------------

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
