# Included by _core.pyx. The consumer half of the DLPack 1.3 C exchange API.
#
# A producer type (PyTorch >= 2.10) carries __dlpack_c_exchange_api__: a capsule named
# "dlpack_exchange_api" pointing at a static, process-lifetime table. arrayport looks it up
# on the *type*, once per type (cached), walks prev_api to a table whose major version it
# reads, and then gets an owning DLManagedTensorVersioned straight from C, skipping the
# Python-level __dlpack__ call and its capsule.
#
# The "no sync" functions leave stream ordering to the consumer. arrayport does not ask the
# producer's current work stream here, so only host-readable tensors take this path: a
# tensor on a device is released (its deleter runs) and imported through __dlpack__
# instead, whose producer orders its work before the consumer's stream. ap.view asks the
# table once; the general plan then goes straight to __dlpack__.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _adopt
#   _core_dlpack.pxi: _refuse_foreign_major
#   _core_producers.pxi: _finish_import, _producer_failure, _producer_kind,
#       _refuse_unexportable, _torch_after_import, _torch_before_export

from cpython.exc cimport PyErr_Occurred

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
cdef tuple _last_exchange = (None, 0)


cdef inline uintptr_t _exchange_api_for(object tp):
    """The exchange API table of type ``tp`` (0: none), looked up once per type."""
    global _last_exchange
    cdef tuple last = _last_exchange
    if last[0] is tp:
        return last[1]
    cached = _exchange_api_by_type.get(tp)
    if cached is not None:
        _last_exchange = (tp, cached)
        return cached
    cdef uintptr_t found = _find_exchange_api(tp)
    if len(_exchange_api_by_type) >= _TYPE_CACHE_LIMIT:
        _exchange_api_by_type.clear()
    _exchange_api_by_type[tp] = found
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


cdef View _view_via_exchange_api(object x, uintptr_t address):
    """A View of ``x`` through its type's exchange API, with the producer's quirks put back
    (_core_producers.pxi); None when the tensor is on a device (released again; the caller
    falls back to __dlpack__, whose producer orders streams)."""
    cdef APDLPackExchangeAPI* api = <APDLPackExchangeAPI*>address
    cdef APDLManagedTensorVersioned* m = NULL
    cdef int kind = _producer_kind(type(x))
    cdef bint requires_grad = False
    if kind == _TORCH:
        requires_grad = _torch_before_export(x, False)
    elif kind == _PADDLE:
        _refuse_unexportable(x, kind)
    if api.managed_tensor_from_py_object_no_sync(<void*>x, &m) != 0:
        try:
            _exchange_failed("managed_tensor_from_py_object_no_sync")
        except BufferError:
            raise
        except Exception as error:
            raise _producer_failure(x, "its C exchange API", error)
    if m == NULL:
        raise BufferError("dlpack: the producer's exchange API returned no tensor")
    cdef View v = _view_owning_versioned(m, x)
    if not _host_accessible(v._t.device.device_type):
        return None  # dropping v runs the producer's deleter
    if kind == _TORCH:
        _torch_after_import(x, v, requires_grad)  # a refusal drops v: deleter runs once
    return v


cdef View _view_owning_versioned(APDLManagedTensorVersioned* m, object owner):
    """A View that takes ownership of ``m`` (no capsule involved): on any failure the
    deleter is called here, exactly once."""
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
    _finish_import(v, owner)
    return v
