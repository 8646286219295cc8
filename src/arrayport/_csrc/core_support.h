/*
 * core_support.h — the C pieces of arrayport._core that must not be Cython:
 *
 *   - host memory blocks (aligned, huge pages for large ones);
 *   - live counters (atomics: exported deleters may run on any thread, GIL or not);
 *   - the deleters arrayport hands out with every exported managed tensor, and the
 *     capsule destructors that call them for capsules nobody consumed;
 *   - a vectorcall helper for `obj.__dlpack__(max_version=...)` on the import hot path;
 *   - (the host strided copy kernel is strided_copy.h, and checked layout arithmetic
 *     extent.h, both included here for the .pyx).
 *
 * Ownership of an exported tensor: one malloc block holds the managed struct followed by
 * shape[ndim] and strides[ndim]; manager_ctx is a strong reference to the exporting
 * arrayport.View. The deleter drops that reference and frees the block, taking the GIL.
 */
#ifndef ARRAYPORT_CORE_SUPPORT_H
#define ARRAYPORT_CORE_SUPPORT_H

#include <Python.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "arrayport/dlpack_abi.h"
#include "strided_copy.h"
#include "extent.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define AP_LITTLE_ENDIAN 0
#else
#define AP_LITTLE_ENDIAN 1
#endif

/* ---- live counters --------------------------------------------------------------------- */

/* Exported managed tensors whose deleter has not run yet. */
static long ap_live_exported = 0;
/* Imported managed tensors (producer deleters) that arrayport still holds. */
static long ap_live_imported = 0;
/* Host buffers arrayport allocated for copies and not yet freed. */
static long ap_live_host_buffers = 0;
/* Py_buffer exports arrayport holds from other objects (buffer-protocol imports). */
static long ap_live_buffer_leases = 0;

static inline void ap_counter_add(long *counter, long delta) {
    __atomic_add_fetch(counter, delta, __ATOMIC_RELAXED);
}
static inline long ap_counter_get(long *counter) {
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* ---- host memory ------------------------------------------------------------------------ */

/* Host memory for copies and allocations: 64-byte aligned (a cache line, any SIMD load),
 * never NULL for zero bytes (some consumers reject NULL). Blocks of 4 MiB and more are
 * aligned to 2 MiB and offered to the kernel for transparent huge pages, as NumPy does:
 * a fresh 64 MiB copy otherwise spends most of its time faulting in 16384 small pages.
 * ARRAYPORT_HUGE_PAGE_BYTES sets another size from which they are: read once, when the
 * core is imported (ap_read_host_settings, with the GIL: getenv is not safe beside a
 * setenv, and allocations also run without the GIL). Freed with free(). */
#define AP_HUGE_PAGE ((size_t)2 << 20)
static size_t ap_huge_pages_from_bytes = 2 * AP_HUGE_PAGE;

static void ap_read_host_settings(void) {
    int64_t asked = ap_env_count("ARRAYPORT_HUGE_PAGE_BYTES");
    if (asked > 0) ap_huge_pages_from_bytes = (size_t)asked;
}

static size_t ap_huge_pages_from(void) {
    return ap_huge_pages_from_bytes;
}

static void *ap_host_alloc(size_t nbytes) {
    void *block = NULL;
    size_t alignment = nbytes >= ap_huge_pages_from() ? AP_HUGE_PAGE : 64;
    if (posix_memalign(&block, alignment, nbytes > 0 ? nbytes : 64) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
    if (alignment == AP_HUGE_PAGE) madvise(block, nbytes, MADV_HUGEPAGE);  /* advice only */
#endif
    return block;
}

/* ---- interpreter state -------------------------------------------------------------------- */

static inline int ap_interpreter_is_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Release an exported tensor: drop its reference on the View and free its block.
 * Safe from any thread with or without the GIL. The block comes from PyMem_Malloc (fast for
 * small sizes) and so is freed under the GIL too. Once the interpreter is finalizing (or
 * gone) both are leaked on purpose: touching Python then can crash, and the process is
 * ending anyway. */
static void ap_release_exported(void *block, PyObject *owner) {
    ap_counter_add(&ap_live_exported, -1);
    if (!Py_IsInitialized() || ap_interpreter_is_finalizing()) return;
    if (PyGILState_Check()) {  /* the common case: a consumer dropping it under the GIL */
        PyMem_Free(block);
        Py_XDECREF(owner);
        return;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    PyMem_Free(block);
    Py_XDECREF(owner);
    PyGILState_Release(gil);
}

/* ---- exported tensors ----------------------------------------------------------------------- */

static void ap_exported_versioned_deleter(APDLManagedTensorVersioned *self) {
    if (self == NULL) return;
    PyObject *owner = (PyObject *)self->manager_ctx;
    self->manager_ctx = NULL;
    ap_release_exported(self, owner);
}

static void ap_exported_legacy_deleter(APDLManagedTensor *self) {
    if (self == NULL) return;
    PyObject *owner = (PyObject *)self->manager_ctx;
    self->manager_ctx = NULL;
    ap_release_exported(self, owner);
}

/* Allocate one block: struct, then shape[ndim], then strides[ndim]. The caller fills
 * dl_tensor and takes a reference for manager_ctx. Returns NULL (with MemoryError) on failure. */
static APDLManagedTensorVersioned *ap_alloc_exported_versioned(int32_t ndim) {
    size_t size = sizeof(APDLManagedTensorVersioned) + 2 * (size_t)ndim * sizeof(int64_t);
    APDLManagedTensorVersioned *m = (APDLManagedTensorVersioned *)PyMem_Malloc(size);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    memset(m, 0, sizeof(*m));
    m->version.major = APDL_MAJOR_VERSION;
    m->version.minor = APDL_MINOR_VERSION;
    m->deleter = ap_exported_versioned_deleter;
    m->dl_tensor.shape = (int64_t *)(m + 1);
    m->dl_tensor.strides = m->dl_tensor.shape + ndim;
    ap_counter_add(&ap_live_exported, 1);
    return m;
}

static APDLManagedTensor *ap_alloc_exported_legacy(int32_t ndim) {
    size_t size = sizeof(APDLManagedTensor) + 2 * (size_t)ndim * sizeof(int64_t);
    APDLManagedTensor *m = (APDLManagedTensor *)PyMem_Malloc(size);
    if (m == NULL) { PyErr_NoMemory(); return NULL; }
    memset(m, 0, sizeof(*m));
    m->deleter = ap_exported_legacy_deleter;
    m->dl_tensor.shape = (int64_t *)(m + 1);
    m->dl_tensor.strides = m->dl_tensor.shape + ndim;
    ap_counter_add(&ap_live_exported, 1);
    return m;
}

/* Capsule destructors: they run whoever created the capsule, and call the deleter only for
 * a capsule that was never consumed (a consumer renames it to "used_..."). An exception may
 * be in flight while a capsule dies, so it is saved around the deleter. */
static void ap_capsule_destructor_versioned(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED)) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    APDLManagedTensorVersioned *m =
        (APDLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED);
    if (m != NULL && m->deleter != NULL) m->deleter(m);
    PyErr_Restore(type, value, tb);
}

static void ap_capsule_destructor_legacy(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY)) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    APDLManagedTensor *m = (APDLManagedTensor *)PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY);
    if (m != NULL && m->deleter != NULL) m->deleter(m);
    PyErr_Restore(type, value, tb);
}

/* Call the deleter of a managed tensor of either kind. For imported tensors this runs with
 * the GIL held (from View dealloc); the producer's deleter may take the GIL again. */
static inline void ap_call_deleter(void *managed, int versioned) {
    if (managed == NULL) return;
    if (versioned) {
        APDLManagedTensorVersioned *m = (APDLManagedTensorVersioned *)managed;
        if (m->deleter != NULL) m->deleter(m);
    } else {
        APDLManagedTensor *m = (APDLManagedTensor *)managed;
        if (m->deleter != NULL) m->deleter(m);
    }
}

/* Wrap a freshly exported managed tensor in its capsule; on failure, release it at once. */
static PyObject *ap_capsule_for_export(void *managed, int versioned) {
    PyObject *capsule = versioned
        ? PyCapsule_New(managed, APDL_CAPSULE_VERSIONED, ap_capsule_destructor_versioned)
        : PyCapsule_New(managed, APDL_CAPSULE_LEGACY, ap_capsule_destructor_legacy);
    if (capsule == NULL) ap_call_deleter(managed, versioned);
    return capsule;
}

/* ---- types that only arrayport may build ------------------------------------------------- */

/* Python-level `Type.__new__(Type)` (and `Type()`) for a type whose instances only the
 * compiled core builds: an object made without its constructor would describe no memory
 * (NULL data, dtype int0) yet export it. The core's own `Type.__new__(Type)` calls compile
 * to a direct call of Cython's allocation function, not through this slot. */
static PyObject *ap_refuse_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)args;
    (void)kwds;
    PyErr_Format(PyExc_TypeError,
                 "%s cannot be constructed directly (only arrayport builds them): use "
                 "arrayport.view(obj), arrayport.from_dlpack(obj) or a View.from_* "
                 "constructor", type->tp_name);
    return NULL;
}

static inline void ap_seal_constructor(PyTypeObject *type) {
    type->tp_new = ap_refuse_new;
    PyType_Modified(type);
}

/* ---- calling __dlpack__ fast ------------------------------------------------------------ */

/* obj.<method>(<kwname>=value) through vectorcall, without building a kwargs dict. */
static inline PyObject *ap_call_method_one_kw(PyObject *obj, PyObject *method_name,
                                              PyObject *kwnames, PyObject *value) {
    PyObject *args[3] = {NULL, obj, value};
    return PyObject_VectorcallMethod(
        method_name, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
}

/* ---- layout validation ------------------------------------------------------------------ */

/* Sizes, byte counts, spans and pointer sums: extent.h (checked arithmetic, one place). */

/* Is the (element-stride) layout C-contiguous? Size-1 dimensions are ignored and a tensor
 * with no elements is contiguous. */
static int ap_is_c_contiguous(int ndim, const int64_t *shape, const int64_t *strides) {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] == 0) return 1;
        if (shape[i] != 1 && strides[i] != expected) {
            for (int j = i - 1; j >= 0; j--) if (shape[j] == 0) return 1;
            return 0;
        }
        expected *= shape[i];
    }
    return 1;
}

static int ap_is_f_contiguous(int ndim, const int64_t *shape, const int64_t *strides) {
    int64_t expected = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return 1;
        if (shape[i] != 1 && strides[i] != expected) {
            for (int j = i + 1; j < ndim; j++) if (shape[j] == 0) return 1;
            return 0;
        }
        expected *= shape[i];
    }
    return 1;
}

/* Bits allowed for each DLPack 1.3 type code; 0 means "code unknown". */
static inline int ap_dtype_is_valid(uint8_t code, uint8_t bits, uint16_t lanes) {
    if (lanes == 0) return 0;
    switch (code) {
    case APDL_INT: case APDL_UINT: case APDL_OPAQUE_HANDLE:
        return bits == 8 || bits == 16 || bits == 32 || bits == 64;
    case APDL_FLOAT: return bits == 16 || bits == 32 || bits == 64;
    case APDL_BFLOAT: return bits == 16;
    case APDL_COMPLEX: return bits == 32 || bits == 64 || bits == 128;
    case APDL_BOOL: return bits == 8;
    case APDL_FLOAT6_E2M3FN: case APDL_FLOAT6_E3M2FN: return bits == 6;
    case APDL_FLOAT4_E2M1FN: return bits == 4;
    case APDL_BCOMPLEX: return bits == 32;
    default:
        return code >= APDL_FLOAT8_E3M4 && code <= APDL_FLOAT8_E8M0FNU && bits == 8;
    }
}

static inline int ap_device_type_is_known(int32_t t) {
    return (t >= APDL_CPU && t <= APDL_OPENCL) || (t >= APDL_VULKAN && t <= APDL_ASCEND);
}

/* ---- PEP 3118 formats ------------------------------------------------------------------------ */

/* The fast path for the buffer formats nearly every exporter uses: one native-order item
 * code, optionally prefixed by '@' (or, for codes whose standard size equals the native one,
 * '=' / the native byte-order character). Fills *out and returns 1 when `format` is such a
 * format and matches `itemsize`; returns 0 for everything else, which the Python parser in
 * arrayport/formats.py then explains. NULL means "B" (PEP 3118). */
static inline int ap_simple_buffer_format(const char *format, Py_ssize_t itemsize,
                                          APDLDataType *out) {
    const char *code = format ? format : "B";
    int native_sizes = 1;
    if (code[0] == '@') {
        code++;
    } else if (code[0] == '=' || code[0] == (AP_LITTLE_ENDIAN ? '<' : '>')) {
        code++;
        native_sizes = 0;
    }
    uint8_t dl_code;
    Py_ssize_t size;
    if (code[0] == 'Z' && (code[1] == 'f' || code[1] == 'd') && code[2] == '\0') {
        dl_code = APDL_COMPLEX;
        size = code[1] == 'f' ? 8 : 16;
    } else if (code[0] != '\0' && code[1] == '\0') {
        switch (code[0]) {
        case '?': dl_code = APDL_BOOL; size = 1; break;
        case 'b': dl_code = APDL_INT; size = 1; break;
        case 'B': dl_code = APDL_UINT; size = 1; break;
        case 'h': dl_code = APDL_INT; size = 2; break;
        case 'H': dl_code = APDL_UINT; size = 2; break;
        case 'i': dl_code = APDL_INT; size = 4; break;
        case 'I': dl_code = APDL_UINT; size = 4; break;
        case 'q': dl_code = APDL_INT; size = 8; break;
        case 'Q': dl_code = APDL_UINT; size = 8; break;
        case 'e': dl_code = APDL_FLOAT; size = 2; break;
        case 'f': dl_code = APDL_FLOAT; size = 4; break;
        case 'd': dl_code = APDL_FLOAT; size = 8; break;
        case 'l': case 'L': case 'n': case 'N':
            if (!native_sizes) return 0;  /* standard sizes differ: leave to the parser */
            dl_code = (code[0] == 'l' || code[0] == 'n') ? APDL_INT : APDL_UINT;
            size = (code[0] == 'l' || code[0] == 'L') ? (Py_ssize_t)sizeof(long)
                                                      : (Py_ssize_t)sizeof(Py_ssize_t);
            break;
        default: return 0;
        }
    } else {
        return 0;
    }
    if (size != itemsize) return 0;
    out->code = dl_code;
    out->bits = (uint8_t)(size * 8);
    out->lanes = 1;
    return 1;
}

/* The PEP 3118 format of a DLPack type with one lane, or NULL when the buffer protocol has
 * none (bfloat16, float8/6/4, complex32, opaque handles, float128, multi-lane types). */
static inline const char *ap_buffer_format_for(uint8_t code, uint8_t bits, uint16_t lanes) {
    if (lanes != 1) return NULL;
    switch (code) {
    case APDL_BOOL: return bits == 8 ? "?" : NULL;
    case APDL_INT:
        return bits == 8 ? "b" : bits == 16 ? "h" : bits == 32 ? "i" : bits == 64 ? "q" : NULL;
    case APDL_UINT:
        return bits == 8 ? "B" : bits == 16 ? "H" : bits == 32 ? "I" : bits == 64 ? "Q" : NULL;
    case APDL_FLOAT: return bits == 16 ? "e" : bits == 32 ? "f" : bits == 64 ? "d" : NULL;
    case APDL_COMPLEX: return bits == 64 ? "Zf" : bits == 128 ? "Zd" : NULL;
    default: return NULL;
    }
}

#endif  /* ARRAYPORT_CORE_SUPPORT_H */
