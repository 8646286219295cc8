/*
 * arrow_export.h — a View as an Arrow C data interface array (producer side), in C that
 * runs without the GIL but where it drops the View.
 *
 * Who owns what: the consumer owns the structs it was handed (it moves them out of their
 * capsules) and calls each root's release exactly once, on any thread. A schema owns its
 * format string and its child schemas (private_data, children). An array owns its buffer
 * pointer array and its child arrays; the root array also owns one reference to the View
 * (private_data->owner), which keeps the memory alive and is dropped by its release.
 * Children are released by their parent's release, never by the consumer.
 *
 * A device array is the same array in an ArrowDeviceArray, with the View's device and, when
 * work is pending on it, a sync event the owner keeps until the release. A stream is one
 * array: get_schema fills a new schema each call, the first get_next moves the array out,
 * later ones answer the end of the stream; the stream's release releases an array never
 * taken.
 *
 * Layout exported: a C-contiguous View of shape (d0, ..., dn-1) is a primitive array of d0
 * values (n == 1), or a fixed-size list "+w:d1" of ... of a primitive array of
 * d0 * ... * dn-1 values (n > 1): the values buffer is the View's memory, no validity
 * bitmap (no nulls).
 *
 * Included by _core.pyx after core_support.h (ap_interpreter_is_finalizing, the counters).
 */
#ifndef ARRAYPORT_ARROW_EXPORT_H
#define ARRAYPORT_ARROW_EXPORT_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrayport/arrow_abi.h"

typedef struct {
    char format[32];                /* "f", "+w:768", ... */
} APArrowSchemaPrivate;

typedef struct {
    PyObject *owner;                /* the View (root array only), else NULL */
    const void *buffers[2];         /* validity (NULL), values */
} APArrowArrayPrivate;

static void ap_arrow_drop_owner(PyObject *owner) {
    if (owner == NULL || !Py_IsInitialized() || ap_interpreter_is_finalizing()) return;
    if (PyGILState_Check()) { Py_DECREF(owner); return; }
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(owner);
    PyGILState_Release(gil);
}

static void ap_arrow_release_schema(APArrowSchema *schema) {
    if (schema == NULL || schema->release == NULL) return;
    for (int64_t i = 0; i < schema->n_children; i++) {
        APArrowSchema *child = schema->children[i];
        if (child->release != NULL) child->release(child);
        free(child);
    }
    free(schema->children);
    free(schema->private_data);
    schema->release = NULL;
}

static void ap_arrow_release_array(APArrowArray *array) {
    if (array == NULL || array->release == NULL) return;
    for (int64_t i = 0; i < array->n_children; i++) {
        APArrowArray *child = array->children[i];
        if (child->release != NULL) child->release(child);
        free(child);
    }
    free(array->children);
    APArrowArrayPrivate *private_data = (APArrowArrayPrivate *)array->private_data;
    PyObject *owner = private_data != NULL ? private_data->owner : NULL;
    free(private_data);
    array->release = NULL;
    if (owner != NULL) {
        ap_counter_add(&ap_live_exported, -1);
        ap_arrow_drop_owner(owner);
    }
}

/* Fill *schema: `lists` fixed-size lists of widths[0..lists-1] around `primitive`.
 * Returns 0, or -1 (out of memory) with everything allocated so far freed. */
static int ap_arrow_fill_schema(APArrowSchema *schema, const char *primitive, int lists,
                                const int64_t *widths) {
    memset(schema, 0, sizeof(*schema));
    APArrowSchemaPrivate *private_data = (APArrowSchemaPrivate *)calloc(1, sizeof(*private_data));
    if (private_data == NULL) return -1;
    if (lists == 0) {
        snprintf(private_data->format, sizeof(private_data->format), "%s", primitive);
    } else {
        snprintf(private_data->format, sizeof(private_data->format), "+w:%lld",
                 (long long)widths[0]);
        schema->children = (APArrowSchema **)calloc(1, sizeof(APArrowSchema *));
        APArrowSchema *child = (APArrowSchema *)calloc(1, sizeof(APArrowSchema));
        if (schema->children == NULL || child == NULL
                || ap_arrow_fill_schema(child, primitive, lists - 1, widths + 1) != 0) {
            free(child);
            free(schema->children);
            free(private_data);
            schema->children = NULL;
            return -1;
        }
        child->name = "item";        /* Arrow's name for a list's values */
        schema->children[0] = child;
        schema->n_children = 1;
    }
    schema->format = private_data->format;
    schema->name = "";
    schema->private_data = private_data;
    schema->release = ap_arrow_release_schema;
    return 0;
}

/* Fill *array for a C-contiguous block of `ndim` dimensions `shape` at `data`; the root
 * (owner != NULL) takes a new reference to owner. Returns 0, or -1 (out of memory) with
 * everything allocated so far freed and no reference taken. */
static int ap_arrow_fill_array(APArrowArray *array, const void *data, int ndim,
                               const int64_t *shape, int64_t rows, PyObject *owner) {
    memset(array, 0, sizeof(*array));
    APArrowArrayPrivate *private_data = (APArrowArrayPrivate *)calloc(1, sizeof(*private_data));
    if (private_data == NULL) return -1;
    array->length = rows;
    array->null_count = 0;
    array->offset = 0;
    array->buffers = private_data->buffers;
    if (ndim <= 1) {
        private_data->buffers[1] = data;
        array->n_buffers = 2;
    } else {
        array->n_buffers = 1;
        array->children = (APArrowArray **)calloc(1, sizeof(APArrowArray *));
        APArrowArray *child = (APArrowArray *)calloc(1, sizeof(APArrowArray));
        if (array->children == NULL || child == NULL
                || ap_arrow_fill_array(child, data, ndim - 1, shape + 1, rows * shape[1],
                                       NULL) != 0) {
            free(child);
            free(array->children);
            free(private_data);
            array->children = NULL;
            return -1;
        }
        array->children[0] = child;
        array->n_children = 1;
    }
    array->private_data = private_data;
    array->release = ap_arrow_release_array;
    if (owner != NULL) {
        Py_INCREF(owner);
        private_data->owner = owner;
        ap_counter_add(&ap_live_exported, 1);
    }
    return 0;
}

/* Capsule destructors: release what the consumer did not move out, then free the struct. */
static void ap_arrow_schema_capsule_free(PyObject *capsule) {
    APArrowSchema *schema = (APArrowSchema *)PyCapsule_GetPointer(capsule, APARROW_CAPSULE_SCHEMA);
    if (schema == NULL) { PyErr_Clear(); return; }
    if (schema->release != NULL) schema->release(schema);
    free(schema);
}

static void ap_arrow_array_capsule_free(PyObject *capsule) {
    APArrowArray *array = (APArrowArray *)PyCapsule_GetPointer(capsule, APARROW_CAPSULE_ARRAY);
    if (array == NULL) { PyErr_Clear(); return; }
    if (array->release != NULL) array->release(array);
    free(array);
}

static void ap_arrow_device_array_capsule_free(PyObject *capsule) {
    APArrowDeviceArray *array = (APArrowDeviceArray *)PyCapsule_GetPointer(
        capsule, APARROW_CAPSULE_DEVICE_ARRAY);
    if (array == NULL) { PyErr_Clear(); return; }
    if (array->array.release != NULL) array->array.release(&array->array);
    free(array);
}

/* ---- a one-array stream ------------------------------------------------------------- */

#define AP_ARROW_STREAM_MAX_LISTS 64

typedef struct {
    char primitive[8];
    int lists;
    int64_t widths[AP_ARROW_STREAM_MAX_LISTS];
    APArrowArray array;             /* the one array, until get_next moves it out */
    const char *last_error;
} APArrowStreamPrivate;

static int ap_arrow_stream_get_schema(APArrowArrayStream *stream, APArrowSchema *out) {
    APArrowStreamPrivate *p = (APArrowStreamPrivate *)stream->private_data;
    if (ap_arrow_fill_schema(out, p->primitive, p->lists, p->widths) != 0) {
        p->last_error = "out of memory";
        return ENOMEM;
    }
    return 0;
}

static int ap_arrow_stream_get_next(APArrowArrayStream *stream, APArrowArray *out) {
    APArrowStreamPrivate *p = (APArrowStreamPrivate *)stream->private_data;
    memcpy(out, &p->array, sizeof(*out));   /* after the move: release NULL, the end */
    p->array.release = NULL;
    return 0;
}

static const char *ap_arrow_stream_last_error(APArrowArrayStream *stream) {
    return ((APArrowStreamPrivate *)stream->private_data)->last_error;
}

static void ap_arrow_stream_release(APArrowArrayStream *stream) {
    if (stream == NULL || stream->release == NULL) return;
    APArrowStreamPrivate *p = (APArrowStreamPrivate *)stream->private_data;
    if (p->array.release != NULL) p->array.release(&p->array);
    free(p);
    stream->release = NULL;
}

/* Fill *stream with one array (as ap_arrow_fill_array) of the schema ap_arrow_fill_schema
 * gives for (primitive, lists, widths). Returns 0, or -1 (out of memory or too deep) with
 * nothing allocated and no reference taken. */
static int ap_arrow_fill_stream(APArrowArrayStream *stream, const char *primitive, int lists,
                                const int64_t *widths, const void *data, int ndim,
                                const int64_t *shape, int64_t rows, PyObject *owner) {
    memset(stream, 0, sizeof(*stream));
    if (lists < 0 || lists > AP_ARROW_STREAM_MAX_LISTS || strlen(primitive) >= 8) return -1;
    APArrowStreamPrivate *p = (APArrowStreamPrivate *)calloc(1, sizeof(*p));
    if (p == NULL) return -1;
    snprintf(p->primitive, sizeof(p->primitive), "%s", primitive);
    p->lists = lists;
    if (lists) memcpy(p->widths, widths, (size_t)lists * sizeof(int64_t));
    if (ap_arrow_fill_array(&p->array, data, ndim, shape, rows, owner) != 0) {
        free(p);
        return -1;
    }
    stream->get_schema = ap_arrow_stream_get_schema;
    stream->get_next = ap_arrow_stream_get_next;
    stream->get_last_error = ap_arrow_stream_last_error;
    stream->release = ap_arrow_stream_release;
    stream->private_data = p;
    return 0;
}

static void ap_arrow_stream_capsule_free(PyObject *capsule) {
    APArrowArrayStream *stream = (APArrowArrayStream *)PyCapsule_GetPointer(
        capsule, APARROW_CAPSULE_STREAM);
    if (stream == NULL) { PyErr_Clear(); return; }
    if (stream->release != NULL) stream->release(stream);
    free(stream);
}

#endif /* ARRAYPORT_ARROW_EXPORT_H */
