# Included by _core.pyx. arrayport as a producer for compiled code:
#
# 1. The DLPack 1.3 C exchange API on the View type (`View.__dlpack_c_exchange_api__`, a
#    capsule named "dlpack_exchange_api" over one static table). Consumers such as tvm-ffi
#    and arrayport itself use it to skip the Python-level __dlpack__ call.
# 2. arrayport's own C API (arrayport/capi.h): `arrayport._C_API`, a versioned table to
#    import any Python object, wrap managed tensors as Views and read a View's DLTensor.
#
# Every function is called with the GIL held (they take Python objects); the exchange
# functions still take it themselves (`with gil`), so a consumer that forgot cannot corrupt
# the interpreter. The allocator is pure C (host_allocator.h) and needs no GIL at all.
# Ownership: every managed tensor handed out holds a strong reference to its View and is
# released by its deleter; every managed tensor handed in is owned by the View made from it
# (or deleted at once when that fails).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_dispatch.pxi: _view
#   _core_dlpack.pxi: _request_capsule, _view_from_capsule
#   _core_exchange.pxi: _exchange_api_for, _view_owning_versioned
#   _core_streams.pxi: _order_after_pending, _order_default_stream_after_pending
#   _core_view.pxi: View

from cpython.object cimport PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_New

from arrayport.capi cimport ArrayportCAPI, ARRAYPORT_CAPI_MAJOR, ARRAYPORT_CAPI_MINOR

cdef extern from "_csrc/host_allocator.h":
    long ap_live_allocated
    int ap_exchange_allocate(APDLTensor* prototype, APDLManagedTensorVersioned** out,
                             void* error_ctx, APDLSetErrorFn set_error) noexcept nogil


cdef inline object _stream_value(const int64_t* stream):
    return None if stream == NULL else stream[0]


# ---- the DLPack C exchange API (producer side) -----------------------------------------------

cdef int _exchange_from_py_object(void* py_object, APDLManagedTensorVersioned** out) \
        except -1 with gil:
    out[0] = NULL
    obj = <object>py_object
    cdef View v
    cdef uintptr_t api
    if type(obj) is View:
        v = obj
    else:
        api = _exchange_api_for(type(obj))
        if api != 0 and (<APDLPackExchangeAPI*>api).managed_tensor_from_py_object_no_sync == \
                <APDLManagedTensorFromPyObjectNoSyncFn>_exchange_from_py_object:
            # The type borrowed View's table: viewing it through that table would come
            # straight back here, so go through its __dlpack__ instead.
            v = _view_from_capsule(_request_capsule(obj, None), obj)
        else:
            v = _view(obj, None)
    _order_default_stream_after_pending(v)
    out[0] = v._export_managed(False)
    return 0


cdef int _exchange_to_py_object(APDLManagedTensorVersioned* tensor, void** out) \
        except -1 with gil:
    out[0] = NULL
    if tensor == NULL:
        raise ValueError("dlpack: managed_tensor_to_py_object_no_sync got a NULL tensor")
    cdef View v = _view_owning_versioned(tensor, None)
    Py_INCREF(v)  # the caller's new reference
    out[0] = <void*>v
    return 0


cdef int _exchange_dltensor(void* obj, APDLTensor* out) except -1 with gil:
    if type(<object>obj) is not View:
        raise TypeError(f"dlpack: dltensor_from_py_object_no_sync expects an arrayport.View, "
                        f"got {type(<object>obj).__name__}")
    _order_default_stream_after_pending(<View>obj)
    out[0] = (<View>obj)._t  # shape/strides point into the View, alive while it is
    return 0


cdef int _exchange_current_stream(int32_t device_type, int32_t device_id,
                                  void** out) noexcept nogil:
    # arrayport keeps no per-thread "current stream": work it enqueues goes on the stream
    # the caller names. NULL: the CPU's answer, and on a GPU the stream None stands for
    # (_core_streams.pxi, _NONE_STREAM), which Views with pending work order after it
    # before export (above).
    out[0] = NULL
    return 0


cdef APDLPackExchangeAPI _view_exchange_api


cdef object _exchange_api_capsule():
    _view_exchange_api.header.version.major = APDL_MAJOR_VERSION
    _view_exchange_api.header.version.minor = APDL_MINOR_VERSION
    _view_exchange_api.header.prev_api = NULL
    _view_exchange_api.managed_tensor_allocator = ap_exchange_allocate
    _view_exchange_api.managed_tensor_from_py_object_no_sync = \
        <APDLManagedTensorFromPyObjectNoSyncFn>_exchange_from_py_object
    _view_exchange_api.managed_tensor_to_py_object_no_sync = \
        <APDLManagedTensorToPyObjectNoSyncFn>_exchange_to_py_object
    _view_exchange_api.dltensor_from_py_object_no_sync = \
        <APDLTensorFromPyObjectNoSyncFn>_exchange_dltensor
    _view_exchange_api.current_work_stream = _exchange_current_stream
    return PyCapsule_New(&_view_exchange_api, APDL_CAPSULE_EXCHANGE_API, NULL)


# ---- arrayport's own C API (arrayport/capi.h) ------------------------------------------------

cdef int _capi_to_managed(object obj, const int64_t* stream,
                          APDLManagedTensorVersioned** out) except -1:
    out[0] = NULL
    cdef View v = _view(obj, _stream_value(stream))
    if stream == NULL:
        _order_after_pending(v, None)   # as View.__dlpack__() with no stream: the default
    out[0] = v._export_managed(False)   # stream waits (the host, for pinned memory)
    return 0


cdef object _capi_view_from_managed(APDLManagedTensorVersioned* tensor):
    if tensor == NULL:
        raise ValueError("arrayport C API: view_from_managed got a NULL tensor")
    return _view_owning_versioned(tensor, None)


cdef int _capi_view_dltensor(object obj, APDLTensor* out, uint64_t* flags) except -1:
    if type(obj) is not View:
        raise TypeError(f"arrayport C API: view_dltensor expects an arrayport.View, got "
                        f"{type(obj).__name__}")
    _order_default_stream_after_pending(<View>obj)   # as the exchange API's dltensor
    out[0] = (<View>obj)._t
    if flags != NULL:
        flags[0] = (<View>obj)._flags
    return 0


cdef object _capi_view(object obj, const int64_t* stream):
    return _view(obj, _stream_value(stream))


cdef ArrayportCAPI _arrayport_capi


cdef object _arrayport_capi_capsule():
    _arrayport_capi.version.major = ARRAYPORT_CAPI_MAJOR
    _arrayport_capi.version.minor = ARRAYPORT_CAPI_MINOR
    _arrayport_capi.prev = NULL
    _arrayport_capi.view_type = <PyTypeObject*>View
    _arrayport_capi.to_managed = _capi_to_managed
    _arrayport_capi.view_from_managed = _capi_view_from_managed
    _arrayport_capi.view_dltensor = _capi_view_dltensor
    _arrayport_capi.view = _capi_view
    return PyCapsule_New(&_arrayport_capi, b"arrayport._C_API", NULL)


_C_API = _arrayport_capi_capsule()
