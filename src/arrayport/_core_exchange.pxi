# Included by _core.pyx. The consumer half of the DLPack 1.3 C exchange API.
#
# A producer type (PyTorch >= 2.10) carries __dlpack_c_exchange_api__: a capsule named
# "dlpack_exchange_api" pointing at a static, process-lifetime table. arrayport looks it up
# on the *type*, once per type (cached), walks prev_api to a table whose major version it
# reads, and then gets an owning DLManagedTensorVersioned straight from C, skipping the
# Python-level __dlpack__ call and its capsule.
#
# The "no sync" functions leave stream ordering to the consumer, and arrayport is that
# consumer (issue 42): a tensor in GPU memory is imported straight from C too, and its
# producer's current work stream — asked of the same table — becomes the View's pending
# work. No event, no driver call, no host wait at import: the stream owner
# (_core_streams.pxi) orders lazily, when a consumer on another stream or the host reads.
# A consumer stream named at import waits for the producer's stream at once (one reused
# event); with synchronization off (or stream -1) nothing is asked. Only a table without
# current_work_stream sends a GPU tensor to __dlpack__ (released here, deleter run once).
# ap.view asks the table once; the general plan then goes straight to __dlpack__.
#
# The other way, _object_via_exchange_api hands a View to a consumer's own table
# (managed_tensor_to_py_object_no_sync): to_torch's floor, CPU and GPU alike, with the
# consumer's current work stream first ordered after the View's pending work.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _adopt
#   _core_dlpack.pxi: _refuse_foreign_major
#   _core_producers.pxi: _finish_import, _finish_import_of_kind, _producer_failure,
#       _producer_kind, _refuse_unexportable, _torch_after_import, _torch_before_export
#   _core_streams.pxi: _export_orders_consumer, _import_asks_producer_stream,
#       _note_exchange_import, _order_consumer_handle_after_pending
#   _core_view.pxi: View

from cpython.exc cimport PyErr_Occurred
from cpython.ref cimport Py_DECREF

cdef dict _exchange_api_by_type = {}


cdef uintptr_t _find_exchange_api(object tp):
    try:
        capsule = getattr(tp, "__dlpack_c_exchange_api__", None)
    except Exception:  # a broken descriptor: the type simply has no usable table
        return 0
    if capsule is None or not PyCapsule_IsValid(capsule, APDL_CAPSULE_EXCHANGE_API):
        return 0
    cdef APDLPackExchangeAPIHeader* header = <APDLPackExchangeAPIHeader*>PyCapsule_GetPointer(
        capsule, APDL_CAPSULE_EXCHANGE_API)
    cdef int hops = 0
    while header != NULL and header.version.major != APDL_MAJOR_VERSION and hops < 64:
        header = header.prev_api
        hops += 1
    if header == NULL or header.version.major != APDL_MAJOR_VERSION:
        return 0
    cdef APDLPackExchangeAPI* api = <APDLPackExchangeAPI*>header
    if api.managed_tensor_from_py_object_no_sync == NULL:
        return 0
    return <uintptr_t>api


# One-entry cache in front of the dict, (type, table address) in one object so that
# threads never see a type paired with another type's table.
cdef class _TypeTable:
    """A type and its exchange table's address, in one object (replaced whole, never
    changed); the address a C integer, read without a conversion."""
    cdef object tp
    cdef uintptr_t api


cdef _TypeTable _last_exchange = _TypeTable.__new__(_TypeTable)   # no type yet


cdef inline uintptr_t _exchange_api_for(object tp):
    """The exchange API table of type ``tp`` (0: none), looked up once per type."""
    global _last_exchange
    cdef _TypeTable last = _last_exchange
    if last.tp is tp:
        return last.api
    cached = _exchange_api_by_type.get(tp)
    cdef uintptr_t found
    if cached is not None:
        found = cached
    else:
        found = _find_exchange_api(tp)
        if len(_exchange_api_by_type) >= _TYPE_CACHE_LIMIT:
            _exchange_api_by_type.clear()
        _exchange_api_by_type[tp] = found
    cdef _TypeTable entry = _TypeTable.__new__(_TypeTable)
    entry.tp, entry.api = tp, found
    _last_exchange = entry
    return found


def exchange_api_version(tp):
    """(major, minor) of the exchange API table arrayport would use for type ``tp``, or
    None when it has none arrayport can read."""
    cdef uintptr_t api = _exchange_api_for(tp)
    if api == 0:
        return None
    cdef APDLPackExchangeAPIHeader* header = <APDLPackExchangeAPIHeader*>api
    return (header.version.major, header.version.minor)


cdef int _exchange_failed(str what) except -1:
    if PyErr_Occurred():
        return -1
    raise BufferError(f"dlpack: the producer's {what} failed without setting an error")


cdef int _table_call_failed(object x, str what) except -1:
    """A call of ``x``'s exchange table failed: a BufferError (the producer's own, or one
    naming it with the error it set), so that importers fall back to __dlpack__."""
    try:
        _exchange_failed(what)
    except BufferError:
        raise
    except Exception as error:
        raise _producer_failure(x, f"its C exchange API ({what})", error)
    return -1


cdef View _view_via_exchange_api(object x, uintptr_t address, consumer=None):
    """A View of ``x`` through its type's exchange API, with the producer's quirks put back
    (_core_producers.pxi) and, for GPU memory, its producer's current work stream as the
    View's pending work (``consumer``, a DLPack stream value, ordered after it); None when
    the table cannot say which stream that is (the tensor is released again; the caller
    falls back to __dlpack__, whose producer orders streams)."""
    cdef APDLPackExchangeAPI* api = <APDLPackExchangeAPI*>address
    cdef APDLManagedTensorVersioned* m = NULL
    cdef int kind = _producer_kind(type(x))
    cdef bint requires_grad = False
    cdef void* producer_stream = NULL
    if kind == _TORCH:
        requires_grad = _torch_before_export(x, False)
    elif kind == _PADDLE:
        _refuse_unexportable(x, kind)
    if api.managed_tensor_from_py_object_no_sync(<void*>x, &m) != 0:
        _table_call_failed(x, "managed_tensor_from_py_object_no_sync")
    if m == NULL:
        raise BufferError("dlpack: the producer's exchange API returned no tensor")
    cdef View v = _view_owning_versioned(m, x, kind)
    cdef int32_t device_type = v._t.device.device_type
    if consumer is not None:
        consumer = check_stream(consumer, device_type)   # a refusal drops v: deleter once
    if _stream_ordered(device_type) and _import_asks_producer_stream(consumer):
        if api.current_work_stream == NULL:
            return None  # dropping v runs the producer's deleter
        if api.current_work_stream(device_type, v._t.device.device_id, &producer_stream) != 0:
            _table_call_failed(x, "current_work_stream")
        _note_exchange_import(v, <uintptr_t>producer_stream, consumer)
    if kind == _TORCH:
        _torch_after_import(x, v, requires_grad)  # a refusal drops v: deleter runs once
    return v


cdef object _object_via_exchange_api(View v, uintptr_t address):
    """The consumer's own object over ``v``'s memory, made by the consumer's exchange table
    (``managed_tensor_to_py_object_no_sync``, which takes a managed tensor of ``v`` whether it
    succeeds or fails); None where the table cannot take ``v`` that way — no such function,
    pinned host memory (no stream to order in DLPack), a device without streams arrayport
    orders, or GPU memory with work pending and no ``current_work_stream`` to order — and
    the caller uses the consumer's from_dlpack.
    GPU memory with work pending: the consumer's current work stream first waits for it."""
    cdef APDLPackExchangeAPI* api = <APDLPackExchangeAPI*>address
    cdef int32_t device_type = v._t.device.device_type
    cdef void* consumer_stream = NULL
    if api.managed_tensor_to_py_object_no_sync == NULL:
        return None
    if device_type != APDL_CPU:
        if not _stream_ordered(device_type):
            return None   # pinned memory, or a device arrayport has no driver for
        if _export_orders_consumer(v):
            if api.current_work_stream == NULL:
                return None
            if api.current_work_stream(device_type, v._t.device.device_id,
                                       &consumer_stream) != 0:
                _exchange_failed("current_work_stream")
            _order_consumer_handle_after_pending(v, <uintptr_t>consumer_stream)
    return _object_of_managed(api, v._export_managed(v._flags & APDL_FLAG_IS_COPIED))


cdef object _object_of_managed(APDLPackExchangeAPI* api, APDLManagedTensorVersioned* m):
    """The consumer's object made by its table from ``m``, which the table takes whether
    it succeeds or fails (its ``managed_tensor_to_py_object_no_sync``, not NULL)."""
    cdef void* out = NULL
    if api.managed_tensor_to_py_object_no_sync(m, &out) != 0:
        _exchange_failed("managed_tensor_to_py_object_no_sync")
    result = <object>out
    Py_DECREF(result)  # adopt the new reference the consumer returned
    return result


def object_via_exchange_api(View v, tp):
    """``tp``'s own object over ``v`` through ``tp``'s exchange table, as ``to_torch`` makes
    a tensor (see ``_object_via_exchange_api``); None where it cannot."""
    cdef uintptr_t api = _exchange_api_for(tp)
    return None if api == 0 else _object_via_exchange_api(v, api)


cdef View _view_owning_versioned(APDLManagedTensorVersioned* m, object owner,
                                 int owner_kind=-1):
    """A View that takes ownership of ``m`` (no capsule involved): on any failure the
    deleter is called here, exactly once. ``owner_kind``: the owner's producer kind where
    the caller knows it (-1: asked here)."""
    cdef View v
    if m.version.major != APDL_MAJOR_VERSION:
        _refuse_foreign_major(m, "tensor")
    v = View.__new__(View)
    try:
        _adopt(v, &m.dl_tensor, m.flags, m.version.minor < 2, "dlpack")
    except BaseException:
        if m.deleter != NULL:
            m.deleter(m)
        raise
    v._managed = m
    v._managed_versioned = True
    ap_counter_add(&ap_live_imported, 1)
    v._owner = owner
    v._protocol = "dlpack"
    if owner_kind < 0:
        _finish_import(v, owner)
    else:
        _finish_import_of_kind(v, owner, owner_kind)
    return v
