/*
 * exchange_table.c — a DLPack 1.3 C exchange table written in C, as PyTorch's is in C++:
 * for the benchmark of exchange-table imports (benchmarks/bench_driver_calls.py), where
 * tests/helpers/exchange_producer.py's table of ctypes callbacks would charge each import
 * the producer's own Python (its current_work_stream most of all, which arrayport asks and
 * tvm-ffi does not). Built and wrapped by tests/helpers/compiled_exchange_producer.py.
 *
 * A producer object names its tensor by the attribute `_template`: the address of a
 * DLManagedTensorVersioned its Python side fills and keeps alive (shape and strides
 * included). managed_tensor_from_py_object_no_sync hands out a new copy of it (malloc'd,
 * freed by its deleter, counted live); dltensor_from_py_object_no_sync fills the caller's
 * DLTensor; current_work_stream answers the stream set for the device
 * (exchange_table_set_stream). No tensor is taken in (to_py_object: NULL).
 */
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "arrayport/dlpack_abi.h"

#define MAX_DEVICES 64

static void *work_streams[MAX_DEVICES];
static long live, from_py_calls, work_stream_calls;

static APDLManagedTensorVersioned *template_of(void *py_object) {
    PyObject *attribute = PyObject_GetAttrString((PyObject *)py_object, "_template");
    if (attribute == NULL) return NULL;
    void *address = PyLong_AsVoidPtr(attribute);
    Py_DECREF(attribute);
    if (address == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "exchange_table: no tensor template");
    return address;
}

static void delete_copy(APDLManagedTensorVersioned *self) {
    __atomic_sub_fetch(&live, 1, __ATOMIC_RELAXED);
    free(self);
}

static int from_py(void *py_object, APDLManagedTensorVersioned **out) {
    APDLManagedTensorVersioned *template = template_of(py_object);
    if (template == NULL) return -1;
    APDLManagedTensorVersioned *copy = malloc(sizeof *copy);
    if (copy == NULL) { PyErr_NoMemory(); return -1; }
    memcpy(copy, template, sizeof *copy);
    copy->deleter = delete_copy;
    __atomic_add_fetch(&live, 1, __ATOMIC_RELAXED);
    from_py_calls++;
    *out = copy;
    return 0;
}

static int dltensor_from_py(void *py_object, APDLTensor *out) {
    APDLManagedTensorVersioned *template = template_of(py_object);
    if (template == NULL) return -1;
    *out = template->dl_tensor;
    return 0;
}

static int current_work_stream(int32_t device_type, int32_t device_id, void **out) {
    work_stream_calls++;
    *out = device_id >= 0 && device_id < MAX_DEVICES ? work_streams[device_id] : NULL;
    return 0;
}

static APDLPackExchangeAPI table = {
    {{1, 3}, NULL}, NULL, from_py, NULL, dltensor_from_py, current_work_stream};

void *exchange_table(void) { return &table; }
void exchange_table_set_stream(int device_id, void *stream) {
    if (device_id >= 0 && device_id < MAX_DEVICES) work_streams[device_id] = stream;
}
/* managed tensors alive, from_py calls, current_work_stream calls */
void exchange_table_counts(long *out) {
    out[0] = __atomic_load_n(&live, __ATOMIC_RELAXED);
    out[1] = from_py_calls;
    out[2] = work_stream_calls;
}
