/*
 * A hand-built DLPack producer for the tests, compiled by tests/conftest.py against
 * nothing but arrayport's installed header and loaded with ctypes.PyDLL.
 *
 * It makes capsules exactly as a test describes them (including malformed ones), counts
 * its deleter calls in C (a ctypes-made Python deleter could not run while an exception
 * propagates), inspects capsules arrayport exports, and consumes them from other threads
 * or after the interpreter has finalized.
 */
#include <Python.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arrayport/dlpack_abi.h"

#define MAX_DIMS 80
#define DATA_BYTES 4096

/* What the test asks for. Mirrored by TensorSpec in tests/producer.py. */
typedef struct {
    int32_t versioned;
    uint32_t major, minor;
    uint64_t flags;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int32_t null_shape, null_strides, null_data;
    uint64_t byte_offset;
    int64_t shape[MAX_DIMS];
    int64_t strides[MAX_DIMS];
    uint64_t data;          /* out (inspect): the data pointer */
    uint64_t block;         /* out (inspect): the managed struct's address */
    uint64_t shape_address; /* out (inspect): where shape lives */
} TensorSpec;

typedef struct {
    APDLManagedTensorVersioned managed;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS];
    unsigned char data[DATA_BYTES];
} VersionedBlock;

typedef struct {
    APDLManagedTensor managed;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS];
    unsigned char data[DATA_BYTES];
} LegacyBlock;

static long deleter_calls = 0;
long producer_deleter_calls(void) { return __atomic_load_n(&deleter_calls, __ATOMIC_SEQ_CST); }

static void versioned_deleter(APDLManagedTensorVersioned *self) {
    __atomic_add_fetch(&deleter_calls, 1, __ATOMIC_SEQ_CST);
    free(self);
}
static void legacy_deleter(APDLManagedTensor *self) {
    __atomic_add_fetch(&deleter_calls, 1, __ATOMIC_SEQ_CST);
    free(self);
}
static void versioned_capsule_destructor(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED)) return;
    APDLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED);
    m->deleter(m);
}
static void legacy_capsule_destructor(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY)) return;
    APDLManagedTensor *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY);
    m->deleter(m);
}

static void fill_tensor(APDLTensor *t, const TensorSpec *s, int64_t *shape, int64_t *strides,
                        unsigned char *data) {
    for (int i = 0; i < DATA_BYTES; i++) data[i] = (unsigned char)i;
    int n = s->ndim < 0 ? 0 : (s->ndim > MAX_DIMS ? MAX_DIMS : s->ndim);
    memcpy(shape, s->shape, n * sizeof(int64_t));
    memcpy(strides, s->strides, n * sizeof(int64_t));
    t->data = s->null_data ? NULL : data;
    t->device.device_type = s->device_type;
    t->device.device_id = s->device_id;
    t->ndim = s->ndim;
    t->dtype.code = s->code;
    t->dtype.bits = s->bits;
    t->dtype.lanes = s->lanes;
    t->shape = s->null_shape ? NULL : shape;
    t->strides = s->null_strides ? NULL : strides;
    t->byte_offset = s->byte_offset;
}

/* A capsule as the spec says; name NULL means the standard one. */
PyObject *make_capsule(const TensorSpec *s, const char *name) {
    if (s->versioned) {
        VersionedBlock *b = calloc(1, sizeof(VersionedBlock));
        b->managed.version.major = s->major;
        b->managed.version.minor = s->minor;
        b->managed.flags = s->flags;
        b->managed.deleter = versioned_deleter;
        fill_tensor(&b->managed.dl_tensor, s, b->shape, b->strides, b->data);
        return PyCapsule_New(b, name ? name : APDL_CAPSULE_VERSIONED, versioned_capsule_destructor);
    }
    LegacyBlock *b = calloc(1, sizeof(LegacyBlock));
    b->managed.deleter = legacy_deleter;
    fill_tensor(&b->managed.dl_tensor, s, b->shape, b->strides, b->data);
    return PyCapsule_New(b, name ? name : APDL_CAPSULE_LEGACY, legacy_capsule_destructor);
}

/* Read an (unconsumed) exported capsule into *out without consuming it.
 * Returns 1 for versioned, 0 for legacy, -1 if it is neither. */
int inspect_capsule(PyObject *capsule, TensorSpec *out) {
    APDLTensor *t;
    int versioned;
    memset(out, 0, sizeof(*out));
    if (PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED)) {
        APDLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED);
        out->major = m->version.major;
        out->minor = m->version.minor;
        out->flags = m->flags;
        out->block = (uint64_t)(uintptr_t)m;
        t = &m->dl_tensor;
        versioned = 1;
    } else if (PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY)) {
        APDLManagedTensor *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY);
        out->block = (uint64_t)(uintptr_t)m;
        t = &m->dl_tensor;
        versioned = 0;
    } else {
        return -1;
    }
    out->versioned = versioned;
    out->device_type = t->device.device_type;
    out->device_id = t->device.device_id;
    out->ndim = t->ndim;
    out->code = t->dtype.code;
    out->bits = t->dtype.bits;
    out->lanes = t->dtype.lanes;
    out->byte_offset = t->byte_offset;
    out->data = (uint64_t)(uintptr_t)t->data;
    out->shape_address = (uint64_t)(uintptr_t)t->shape;
    out->null_strides = t->strides == NULL;
    for (int i = 0; i < t->ndim && i < MAX_DIMS; i++) {
        out->shape[i] = t->shape[i];
        if (t->strides) out->strides[i] = t->strides[i];
    }
    return versioned;
}

/* Take ownership of an exported capsule as a consumer would (rename it used_...). */
static void *consume(PyObject *capsule, int *versioned) {
    if (PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED)) {
        *versioned = 1;
        void *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED);
        PyCapsule_SetName(capsule, APDL_CAPSULE_VERSIONED_USED);
        return m;
    }
    if (PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY)) {
        *versioned = 0;
        void *m = PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY);
        PyCapsule_SetName(capsule, APDL_CAPSULE_LEGACY_USED);
        return m;
    }
    return NULL;
}

static void call_deleter(void *m, int versioned) {
    if (versioned) {
        APDLManagedTensorVersioned *v = m;
        v->deleter(v);
    } else {
        APDLManagedTensor *l = m;
        l->deleter(l);
    }
}

typedef struct { void *managed; int versioned; } Pending;

static void *deleter_thread(void *arg) {
    Pending *p = arg;
    call_deleter(p->managed, p->versioned);  /* this thread has never held the GIL */
    return NULL;
}

/* Consume the capsule, then call its deleter from a fresh native thread while this thread
 * has released the GIL. Returns 0, or -1 if it is not a DLPack capsule. */
int delete_in_native_thread(PyObject *capsule) {
    Pending p;
    p.managed = consume(capsule, &p.versioned);
    if (p.managed == NULL) return -1;
    pthread_t thread;
    Py_BEGIN_ALLOW_THREADS
    pthread_create(&thread, NULL, deleter_thread, &p);
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    return 0;
}

static Pending at_exit;
static void delete_after_finalize(void) {
    call_deleter(at_exit.managed, at_exit.versioned);
    const char message[] = "deleter ran after finalization\n";
    ssize_t ignored = write(1, message, sizeof(message) - 1);
    (void)ignored;
}

/* Consume the capsule and call its deleter from a C atexit handler, which runs after
 * Python has finalized. */
int delete_at_process_exit(PyObject *capsule) {
    at_exit.managed = consume(capsule, &at_exit.versioned);
    if (at_exit.managed == NULL) return -1;
    atexit(delete_after_finalize);
    return 0;
}
