/*
 * arrayport/capi.h — arrayport's own C API, for C/C++/Cython extensions.
 *
 * arrayport publishes one static, process-lifetime function table in the capsule
 * `arrayport._C_API`. Get it with arrayport_import_capi() (it imports arrayport and checks
 * the major version) and call through it; nothing links against arrayport.
 *
 *     const ArrayportCAPI *ap = arrayport_import_capi();
 *     if (ap == NULL) return NULL;                     // ImportError/RuntimeError set
 *     APDLManagedTensorVersioned *t;
 *     if (ap->to_managed(obj, NULL, &t) != 0) return NULL;
 *     ... use t->dl_tensor; honour t->flags & APDL_FLAG_READ_ONLY ...
 *     t->deleter(t);                                   // exactly once, any thread
 *
 * Every function must be called with the GIL held, except deleters. Functions returning
 * int give 0 on success and -1 with a Python exception set; functions returning PyObject*
 * give a new reference, or NULL with an exception set.
 *
 * Versioning: fields are only ever appended, within a major version. A table of minor m has
 * every field of minors < m. `prev` points at an older major version's table (or is NULL),
 * so a newer arrayport can keep serving extensions built for an older major. The layout of
 * version 1.0 is frozen by the static asserts at the end of this file.
 */
#ifndef ARRAYPORT_CAPI_H
#define ARRAYPORT_CAPI_H

#include <Python.h>
#include "arrayport/dlpack_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARRAYPORT_CAPI_MAJOR 1
#define ARRAYPORT_CAPI_MINOR 0
/* Both the capsule's name and the dotted path PyCapsule_Import resolves. */
#define ARRAYPORT_CAPI_CAPSULE "arrayport._C_API"

typedef struct {
    uint32_t major;
    uint32_t minor;
} ArrayportCAPIVersion;

typedef struct ArrayportCAPI {
    ArrayportCAPIVersion version;
    const struct ArrayportCAPI *prev;   /* an older major version's table, or NULL */

    /* ---- 1.0 -------------------------------------------------------------------------- */

    /* arrayport.View (borrowed, immortal for the process). */
    PyTypeObject *view_type;

    /* Import any object arrayport.view() accepts (DLPack, CUDA Array Interface, buffer,
     * __array_interface__, __array__, a View) and export it as an owning, versioned
     * managed tensor. `stream` is the consumer's stream as a DLPack stream value, or NULL
     * for none. The caller owns *out and calls its deleter exactly once. READ_ONLY is set
     * when the memory must not be written. Zero-copy always. */
    int (*to_managed)(PyObject *obj, const int64_t *stream, APDLManagedTensorVersioned **out);

    /* Wrap a managed tensor as a new arrayport.View, taking ownership: the View calls the
     * deleter when it dies, and on failure the deleter has already been called. */
    PyObject *(*view_from_managed)(APDLManagedTensorVersioned *tensor);

    /* Describe an arrayport.View without taking ownership: *out points into the View, valid
     * while the caller holds the View. `flags` (may be NULL) receives the DLPack flags.
     * TypeError when `view` is not an arrayport.View. */
    int (*view_dltensor)(PyObject *view, APDLTensor *out, uint64_t *flags);

    /* arrayport.view(obj, stream=...): a new reference to a View of obj, never a copy.
     * `stream` as for to_managed. */
    PyObject *(*view)(PyObject *obj, const int64_t *stream);
} ArrayportCAPI;

/* Import arrayport and return its C API table, or NULL with an exception set (ImportError,
 * or RuntimeError when the installed arrayport has no table of this major version). */
static inline const ArrayportCAPI *arrayport_import_capi(void) {
    const ArrayportCAPI *api =
        (const ArrayportCAPI *)PyCapsule_Import(ARRAYPORT_CAPI_CAPSULE, 0);
    while (api != NULL && api->version.major != ARRAYPORT_CAPI_MAJOR) api = api->prev;
    if (api == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError,
                     "arrayport: the installed arrayport has no C API of major version %d",
                     ARRAYPORT_CAPI_MAJOR);
    return api;
}

/* The 1.0 layout, frozen (64-bit and 32-bit pointer sizes alike). */
#ifdef __cplusplus
#define ARRAYPORT_STATIC_ASSERT static_assert
#else
#define ARRAYPORT_STATIC_ASSERT _Static_assert
#endif
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, version) == 0, "version first");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, prev) == 8, "prev after version");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, view_type) == 8 + sizeof(void *), "1.0");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, to_managed) == 8 + 2 * sizeof(void *), "1.0");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, view_from_managed) == 8 + 3 * sizeof(void *),
                        "1.0");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, view_dltensor) == 8 + 4 * sizeof(void *),
                        "1.0");
ARRAYPORT_STATIC_ASSERT(offsetof(ArrayportCAPI, view) == 8 + 5 * sizeof(void *), "1.0");
ARRAYPORT_STATIC_ASSERT(sizeof(ArrayportCAPI) == 8 + 6 * sizeof(void *), "1.0 size");

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* ARRAYPORT_CAPI_H */
