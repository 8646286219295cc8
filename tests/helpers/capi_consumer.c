/*
 * capi_consumer.c — an out-of-tree C extension built by the test suite against nothing but
 * arrayport's installed headers (arrayport.get_include()) and the capsules at run time.
 *
 * It is a consumer of the DLPack 1.3 C exchange API of any type (torch.Tensor,
 * arrayport.View…) and of arrayport's own C API (arrayport/capi.h), and a producer of Views
 * whose memory it owns: malloc'd blocks released by a counting deleter, so the tests can
 * check that every deleter runs exactly once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arrayport/capi.h"

/* ---- describing a DLTensor to Python ----------------------------------------------------- */

static PyObject *int64_tuple(const int64_t *values, int32_t n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (int32_t i = 0; i < n; ++i) {
        PyObject *item = PyLong_FromLongLong(values == NULL ? 0 : values[i]);
        if (item == NULL) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

/* {"data": address of the first element, "shape", "strides", "dtype": (code, bits, lanes),
 *  "device": (type, id), "flags"} */
static PyObject *describe(const APDLTensor *t, unsigned long long flags) {
    PyObject *shape = int64_tuple(t->shape, t->ndim);
    PyObject *strides = int64_tuple(t->strides, t->ndim);
    PyObject *d = NULL;
    if (shape != NULL && strides != NULL)
        d = Py_BuildValue("{s:K,s:O,s:O,s:(iii),s:(ii),s:K}",
                          "data", (unsigned long long)((uintptr_t)t->data + t->byte_offset),
                          "shape", shape, "strides", strides, "dtype", (int)t->dtype.code,
                          (int)t->dtype.bits, (int)t->dtype.lanes, "device",
                          (int)t->device.device_type, (int)t->device.device_id, "flags", flags);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return d;
}

/* ---- the DLPack C exchange API, as any consumer would use it ---------------------------- */

static const APDLPackExchangeAPI *exchange_api_of(PyObject *obj) {
    PyObject *capsule = PyObject_GetAttrString((PyObject *)Py_TYPE(obj),
                                               "__dlpack_c_exchange_api__");
    if (capsule == NULL) return NULL;
    const APDLPackExchangeAPIHeader *header =
        (const APDLPackExchangeAPIHeader *)PyCapsule_GetPointer(capsule, APDL_CAPSULE_EXCHANGE_API);
    Py_DECREF(capsule);  /* the table itself is static: it outlives the capsule object */
    while (header != NULL && header->version.major != APDL_MAJOR_VERSION)
        header = header->prev_api;
    if (header == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "no exchange API of DLPack major version 1");
    return (const APDLPackExchangeAPI *)header;
}

/* exchange_version(obj) -> (major, minor, has_allocator, has_from, has_to, has_dltensor,
 * has_stream) */
static PyObject *exchange_version(PyObject *self, PyObject *obj) {
    const APDLPackExchangeAPI *api = exchange_api_of(obj);
    if (api == NULL) return NULL;
    return Py_BuildValue("(IIiiiii)", api->header.version.major, api->header.version.minor,
                         api->managed_tensor_allocator != NULL,
                         api->managed_tensor_from_py_object_no_sync != NULL,
                         api->managed_tensor_to_py_object_no_sync != NULL,
                         api->dltensor_from_py_object_no_sync != NULL,
                         api->current_work_stream != NULL);
}

/* Export obj through `api`, describe it, delete it. */
static PyObject *import_and_describe(const APDLPackExchangeAPI *api, PyObject *obj) {
    if (api == NULL) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
    PyObject *d = describe(&m->dl_tensor, m->flags);
    if (m->deleter != NULL) m->deleter(m);
    return d;
}

/* exchange_import(obj) -> description through obj's type's table. */
static PyObject *exchange_import(PyObject *self, PyObject *obj) {
    return import_and_describe(exchange_api_of(obj), obj);
}

/* exchange_import_with(table_owner, obj) -> description of obj exported through the
 * table of table_owner's type (View's table accepts anything arrayport.view accepts). */
static PyObject *exchange_import_with(PyObject *self, PyObject *args) {
    PyObject *owner, *obj;
    if (!PyArg_ParseTuple(args, "OO", &owner, &obj)) return NULL;
    return import_and_describe(exchange_api_of(owner), obj);
}

/* A capsule "held_tensor" that owns a managed tensor and deletes it when it dies. */
static void held_tensor_destructor(PyObject *capsule) {
    APDLManagedTensorVersioned *m =
        (APDLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, "held_tensor");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
}

/* exchange_hold(obj) -> a capsule holding obj's managed tensor until the capsule dies. */
static PyObject *exchange_hold(PyObject *self, PyObject *obj) {
    const APDLPackExchangeAPI *api = exchange_api_of(obj);
    if (api == NULL) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
    PyObject *capsule = PyCapsule_New(m, "held_tensor", held_tensor_destructor);
    if (capsule == NULL && m->deleter != NULL) m->deleter(m);
    return capsule;
}

/* exchange_dltensor(obj) -> description through the non-owning dltensor_from_py_object. */
static PyObject *exchange_dltensor(PyObject *self, PyObject *obj) {
    const APDLPackExchangeAPI *api = exchange_api_of(obj);
    if (api == NULL) return NULL;
    if (api->dltensor_from_py_object_no_sync == NULL)
        return PyErr_Format(PyExc_RuntimeError, "no dltensor_from_py_object_no_sync");
    APDLTensor t;
    if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    return describe(&t, 0);
}

/* exchange_dltensor_with(table_owner, obj) -> description of obj through the non-owning
 * dltensor_from_py_object of table_owner's type. */
static PyObject *exchange_dltensor_with(PyObject *self, PyObject *args) {
    PyObject *owner, *obj;
    if (!PyArg_ParseTuple(args, "OO", &owner, &obj)) return NULL;
    const APDLPackExchangeAPI *api = exchange_api_of(owner);
    if (api == NULL) return NULL;
    APDLTensor t;
    if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    return describe(&t, 0);
}

/* exchange_to_py_null(table_owner): to_py_object with a NULL tensor must raise. */
static PyObject *exchange_to_py_null(PyObject *self, PyObject *owner) {
    const APDLPackExchangeAPI *api = exchange_api_of(owner);
    if (api == NULL) return NULL;
    void *out = (void *)1;
    if (api->managed_tensor_to_py_object_no_sync(NULL, &out) != 0) return NULL;
    return PyErr_Format(PyExc_AssertionError, "a NULL tensor was accepted");
}

/* exchange_move(obj, target) -> obj's data as target's type: from_py_object on obj's
 * table, to_py_object on target's table (ownership moves to the new object). */
static PyObject *exchange_move(PyObject *self, PyObject *args) {
    PyObject *obj, *target;
    if (!PyArg_ParseTuple(args, "OO", &obj, &target)) return NULL;
    const APDLPackExchangeAPI *source_api = exchange_api_of(obj);
    const APDLPackExchangeAPI *target_api = source_api ? exchange_api_of(target) : NULL;
    if (target_api == NULL) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (source_api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
    void *out = NULL;
    if (target_api->managed_tensor_to_py_object_no_sync(m, &out) != 0) return NULL;  /* stolen */
    return (PyObject *)out;
}

/* The allocator's error channel: remembers the last (kind, message). */
typedef struct { char kind[64]; char message[256]; } ErrorSlot;
static void remember_error(void *ctx, const char *kind, const char *message) {
    ErrorSlot *slot = (ErrorSlot *)ctx;
    snprintf(slot->kind, sizeof slot->kind, "%s", kind);
    snprintf(slot->message, sizeof slot->message, "%s", message);
}

/* exchange_allocate(like, shape, (code, bits, lanes), device_type) -> a new object of
 * like's type made by its allocator then to_py_object, or raises RuntimeError(kind, msg). */
static PyObject *exchange_allocate(PyObject *self, PyObject *args) {
    PyObject *like, *shape_obj;
    int code, bits, lanes, device_type;
    if (!PyArg_ParseTuple(args, "OO(iii)i", &like, &shape_obj, &code, &bits, &lanes,
                          &device_type))
        return NULL;
    const APDLPackExchangeAPI *api = exchange_api_of(like);
    if (api == NULL) return NULL;
    Py_ssize_t ndim = PyTuple_Size(shape_obj);
    if (ndim < 0 || ndim > 16) return PyErr_Format(PyExc_ValueError, "shape: a short tuple");
    int64_t shape[16];
    for (Py_ssize_t i = 0; i < ndim; ++i) {
        shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape_obj, i));
        if (shape[i] == -1 && PyErr_Occurred()) return NULL;
    }
    APDLTensor prototype;
    memset(&prototype, 0, sizeof prototype);
    prototype.device.device_type = device_type;
    prototype.ndim = (int32_t)ndim;
    prototype.dtype.code = (uint8_t)code;
    prototype.dtype.bits = (uint8_t)bits;
    prototype.dtype.lanes = (uint16_t)lanes;
    prototype.shape = shape;
    ErrorSlot slot = {{0}, {0}};
    APDLManagedTensorVersioned *m = NULL;
    if (api->managed_tensor_allocator(&prototype, &m, &slot, remember_error) != 0) {
        if (PyErr_Occurred()) return NULL;
        return PyErr_Format(PyExc_RuntimeError, "%s: %s", slot.kind, slot.message);
    }
    /* Fill the new memory with 0, 1, 2… bytes so the test can read it back. */
    int64_t size = 1;
    for (Py_ssize_t i = 0; i < ndim; ++i) size *= shape[i];
    unsigned char *bytes = (unsigned char *)m->dl_tensor.data;
    for (int64_t i = 0; i < size * ((bits * lanes + 7) / 8); ++i) bytes[i] = (unsigned char)i;
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(m, &out) != 0) return NULL;
    return (PyObject *)out;
}

/* exchange_current_stream(obj, device_type, device_id) -> the stream as an int. */
static PyObject *exchange_current_stream(PyObject *self, PyObject *args) {
    PyObject *obj;
    int device_type, device_id;
    if (!PyArg_ParseTuple(args, "Oii", &obj, &device_type, &device_id)) return NULL;
    const APDLPackExchangeAPI *api = exchange_api_of(obj);
    if (api == NULL) return NULL;
    void *stream = (void *)1;
    if (api->current_work_stream(device_type, device_id, &stream) != 0) return NULL;
    return PyLong_FromVoidPtr(stream);
}

/* exchange_loop(obj, n) -> median-free mean ns per import+delete over n rounds (the
 * benchmark's C loop; the type's table is looked up once, as a consumer caches it). */
static PyObject *exchange_loop(PyObject *self, PyObject *args) {
    PyObject *obj;
    long long n;
    if (!PyArg_ParseTuple(args, "OL", &obj, &n)) return NULL;
    const APDLPackExchangeAPI *api = exchange_api_of(obj);
    if (api == NULL) return NULL;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long long i = 0; i < n; ++i) {
        APDLManagedTensorVersioned *m = NULL;
        if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
        if (m->deleter != NULL) m->deleter(m);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    return PyFloat_FromDouble(n > 0 ? ns / (double)n : 0.0);
}

/* ---- arrayport's own C API ------------------------------------------------------------------ */

static const ArrayportCAPI *ap_api = NULL;

static int need_capi(void) {
    if (ap_api == NULL) ap_api = arrayport_import_capi();
    return ap_api == NULL ? -1 : 0;
}

/* Parse an optional stream argument (None or an int) into *value / the pointer to pass. */
static int parse_stream(PyObject *stream_obj, int64_t *value, const int64_t **pointer) {
    *pointer = NULL;
    if (stream_obj == NULL || stream_obj == Py_None) return 0;
    *value = PyLong_AsLongLong(stream_obj);
    if (*value == -1 && PyErr_Occurred()) return -1;
    *pointer = value;
    return 0;
}

/* capi_version() -> (major, minor, view_type) */
static PyObject *capi_version(PyObject *self, PyObject *unused) {
    if (need_capi() != 0) return NULL;
    return Py_BuildValue("(IIO)", ap_api->version.major, ap_api->version.minor,
                         (PyObject *)ap_api->view_type);
}

/* capi_import(obj, stream=None) -> description of to_managed(obj); deleted before return */
static PyObject *capi_import(PyObject *self, PyObject *args) {
    PyObject *obj, *stream_obj = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &obj, &stream_obj) || need_capi() != 0) return NULL;
    int64_t stream_value;
    const int64_t *stream;
    if (parse_stream(stream_obj, &stream_value, &stream) != 0) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (ap_api->to_managed(obj, stream, &m) != 0) return NULL;
    PyObject *d = describe(&m->dl_tensor, m->flags);
    m->deleter(m);
    return d;
}

/* capi_hold(obj) -> a "held_tensor" capsule owning to_managed(obj) */
static PyObject *capi_hold(PyObject *self, PyObject *obj) {
    if (need_capi() != 0) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (ap_api->to_managed(obj, NULL, &m) != 0) return NULL;
    PyObject *capsule = PyCapsule_New(m, "held_tensor", held_tensor_destructor);
    if (capsule == NULL) m->deleter(m);
    return capsule;
}

/* capi_view(obj, stream=None) -> arrayport.View */
static PyObject *capi_view(PyObject *self, PyObject *args) {
    PyObject *obj, *stream_obj = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &obj, &stream_obj) || need_capi() != 0) return NULL;
    int64_t stream_value;
    const int64_t *stream;
    if (parse_stream(stream_obj, &stream_value, &stream) != 0) return NULL;
    return ap_api->view(obj, stream);
}

/* capi_rewrap(obj) -> view_from_managed(to_managed(obj)): a new View owning the export */
static PyObject *capi_rewrap(PyObject *self, PyObject *obj) {
    if (need_capi() != 0) return NULL;
    APDLManagedTensorVersioned *m = NULL;
    if (ap_api->to_managed(obj, NULL, &m) != 0) return NULL;
    return ap_api->view_from_managed(m);
}

/* capi_view_from_null(): view_from_managed(NULL) must raise. */
static PyObject *capi_view_from_null(PyObject *self, PyObject *unused) {
    if (need_capi() != 0) return NULL;
    return ap_api->view_from_managed(NULL);
}

/* capi_dltensor(view) -> description (with flags) of the View, not owning anything */
static PyObject *capi_dltensor(PyObject *self, PyObject *obj) {
    if (need_capi() != 0) return NULL;
    APDLTensor t;
    uint64_t flags = 0;
    if (ap_api->view_dltensor(obj, &t, &flags) != 0) return NULL;
    return describe(&t, flags);
}

/* ---- a C producer of Views, with a counting deleter ------------------------------------- */

static long owned_deleter_calls = 0;

typedef struct {
    APDLManagedTensorVersioned managed;
    int64_t shape[1];
    int64_t strides[1];
    double data[];
} OwnedBlock;

static void owned_deleter(APDLManagedTensorVersioned *self) {
    __atomic_add_fetch(&owned_deleter_calls, 1, __ATOMIC_RELAXED);
    free(self);
}

/* make_view(n, readonly, version_major=1) -> a View of n float64s 0.0, 1.0, … owned by a
 * C block, through view_from_managed. A foreign major version must be refused (and its
 * deleter called) by arrayport. */
static PyObject *make_view(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    int readonly, major = 1;
    if (!PyArg_ParseTuple(args, "np|i", &n, &readonly, &major) || need_capi() != 0)
        return NULL;
    OwnedBlock *b = (OwnedBlock *)calloc(1, sizeof(OwnedBlock) + (size_t)n * sizeof(double));
    if (b == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; ++i) b->data[i] = (double)i;
    b->managed.version.major = (uint32_t)major;
    b->managed.version.minor = APDL_MINOR_VERSION;
    b->managed.deleter = owned_deleter;
    b->managed.flags = readonly ? APDL_FLAG_READ_ONLY : 0;
    b->managed.dl_tensor.data = b->data;
    b->managed.dl_tensor.device.device_type = 1;
    b->managed.dl_tensor.ndim = 1;
    b->managed.dl_tensor.dtype.code = 2;
    b->managed.dl_tensor.dtype.bits = 64;
    b->managed.dl_tensor.dtype.lanes = 1;
    b->shape[0] = n;
    b->strides[0] = 1;
    b->managed.dl_tensor.shape = b->shape;
    b->managed.dl_tensor.strides = b->strides;
    return ap_api->view_from_managed(&b->managed);
}

static PyObject *deleter_calls(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(__atomic_load_n(&owned_deleter_calls, __ATOMIC_RELAXED));
}

static PyMethodDef methods[] = {
    {"exchange_version", exchange_version, METH_O, NULL},
    {"exchange_import", exchange_import, METH_O, NULL},
    {"exchange_import_with", exchange_import_with, METH_VARARGS, NULL},
    {"exchange_hold", exchange_hold, METH_O, NULL},
    {"exchange_dltensor", exchange_dltensor, METH_O, NULL},
    {"exchange_move", exchange_move, METH_VARARGS, NULL},
    {"exchange_dltensor_with", exchange_dltensor_with, METH_VARARGS, NULL},
    {"exchange_to_py_null", exchange_to_py_null, METH_O, NULL},
    {"exchange_allocate", exchange_allocate, METH_VARARGS, NULL},
    {"exchange_current_stream", exchange_current_stream, METH_VARARGS, NULL},
    {"exchange_loop", exchange_loop, METH_VARARGS, NULL},
    {"capi_version", capi_version, METH_NOARGS, NULL},
    {"capi_import", capi_import, METH_VARARGS, NULL},
    {"capi_hold", capi_hold, METH_O, NULL},
    {"capi_view", capi_view, METH_VARARGS, NULL},
    {"capi_rewrap", capi_rewrap, METH_O, NULL},
    {"capi_dltensor", capi_dltensor, METH_O, NULL},
    {"capi_view_from_null", capi_view_from_null, METH_NOARGS, NULL},
    {"make_view", make_view, METH_VARARGS, NULL},
    {"deleter_calls", deleter_calls, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "capi_consumer",
    "Out-of-tree consumer of the DLPack exchange API and arrayport's C API (tests).",
    -1, methods,
};

PyMODINIT_FUNC PyInit_capi_consumer(void) { return PyModule_Create(&module); }
