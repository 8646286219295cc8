/*
 * numpy_arrays.h — NumPy arrays read and made through NumPy's C API, for the paths where a
 * DLPack capsule round trip costs more than the work (ap.view(ndarray), View → ndarray,
 * the ufunc dispatch of arrayport.View).
 *
 * Loaded lazily: including this header imports nothing. ap_numpy_load() imports NumPy's
 * C API table the first time arrayport meets a NumPy array (or is asked for one), so
 * `import arrayport` alone never imports NumPy.
 *
 * The rules are NumPy's own DLPack export rules (numpy/_core/src/multiarray/dlpack.c):
 * native byte order, bool / int / uint / IEEE float / complex types only, strides that are
 * whole multiples of the itemsize, read-only arrays flagged read-only. Anything else is
 * answered "not here" (0) and the caller takes the general, fully validating path, so the
 * error messages a user sees come from one place.
 *
 * Built against NumPy 2 headers, which run on NumPy >= 1.26 too: only accessors that exist
 * in both ABIs are used (PyDataType_ELSIZE, type_num, byteorder).
 */
#ifndef ARRAYPORT_NUMPY_ARRAYS_H
#define ARRAYPORT_NUMPY_ARRAYS_H

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>
#include "arrayport/dlpack_abi.h"

/* 0 when NumPy's C API is usable, -1 with ImportError set when NumPy cannot be imported. */
static inline int ap_numpy_load(void) { return PyArray_ImportNumPyAPI(); }

/* The numpy.ndarray type object (call ap_numpy_load() first). */
static inline PyObject *ap_numpy_ndarray_type(void) { return (PyObject *)&PyArray_Type; }

/* Whether obj is a NumPy scalar (np.float64(1), np.bool_(True), ...). */
static inline int ap_is_numpy_scalar(PyObject *obj) { return PyArray_IsScalar(obj, Generic); }

/* The DLPack type of a NumPy dtype, or 0 when NumPy's DLPack export would refuse it. */
static int ap_dlpack_dtype_of_descr(PyArray_Descr *descr, APDLDataType *out) {
    if (!PyArray_ISNBO(descr->byteorder))
        return 0;
    int itemsize = (int)PyDataType_ELSIZE(descr);
    switch (descr->type_num) {
    case NPY_BOOL:
        out->code = APDL_BOOL; break;
    case NPY_BYTE: case NPY_SHORT: case NPY_INT: case NPY_LONG: case NPY_LONGLONG:
        out->code = APDL_INT; break;
    case NPY_UBYTE: case NPY_USHORT: case NPY_UINT: case NPY_ULONG: case NPY_ULONGLONG:
        out->code = APDL_UINT; break;
    case NPY_HALF: case NPY_FLOAT: case NPY_DOUBLE:
        out->code = APDL_FLOAT; break;
    case NPY_CFLOAT: case NPY_CDOUBLE:
        out->code = APDL_COMPLEX; break;
    default:  /* long double (not IEEE), datetimes, strings, objects, user types (ml_dtypes) */
        return 0;
    }
    out->bits = (uint8_t)(8 * itemsize);
    out->lanes = 1;
    return 1;
}

/* The NumPy type number for a DLPack type NumPy holds natively, or -1. */
static int ap_numpy_type_of_dlpack(APDLDataType dtype) {
    if (dtype.lanes != 1)
        return -1;
    switch (dtype.code) {
    case APDL_BOOL:
        return dtype.bits == 8 ? NPY_BOOL : -1;
    case APDL_INT:
        switch (dtype.bits) {
        case 8: return NPY_INT8; case 16: return NPY_INT16;
        case 32: return NPY_INT32; case 64: return NPY_INT64;
        }
        return -1;
    case APDL_UINT:
        switch (dtype.bits) {
        case 8: return NPY_UINT8; case 16: return NPY_UINT16;
        case 32: return NPY_UINT32; case 64: return NPY_UINT64;
        }
        return -1;
    case APDL_FLOAT:
        switch (dtype.bits) {
        case 16: return NPY_FLOAT16; case 32: return NPY_FLOAT32; case 64: return NPY_FLOAT64;
        }
        return -1;
    case APDL_COMPLEX:
        switch (dtype.bits) {
        case 64: return NPY_COMPLEX64; case 128: return NPY_COMPLEX128;
        }
        return -1;
    }
    return -1;
}

/* The number of dimensions of ndarray `array`. */
static inline int ap_ndarray_ndim(PyObject *array) {
    return PyArray_NDIM((PyArrayObject *)array);
}

/*
 * Describe ndarray `array` in `t`, whose shape and strides already point at room for
 * ap_ndarray_ndim(array) entries each. Returns 1 and sets *readonly and *size when NumPy's
 * DLPack export would carry the array as it is; 0 (t partly written, nothing raised) when
 * it would not, so the caller falls back to the general path.
 */
static int ap_ndarray_describe(PyObject *array, APDLTensor *t, int *readonly, int64_t *size) {
    PyArrayObject *a = (PyArrayObject *)array;
    if (!ap_dlpack_dtype_of_descr(PyArray_DESCR(a), &t->dtype))
        return 0;
    const int ndim = PyArray_NDIM(a);
    const npy_intp itemsize = PyArray_ITEMSIZE(a);
    const npy_intp *dims = PyArray_DIMS(a);
    const npy_intp *strides = PyArray_STRIDES(a);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (strides[i] % itemsize != 0)
            return 0;
        t->shape[i] = dims[i];
        t->strides[i] = strides[i] / itemsize;
        count *= dims[i];
    }
    t->data = PyArray_DATA(a);
    t->byte_offset = 0;
    t->ndim = ndim;
    t->device.device_type = APDL_CPU;
    t->device.device_id = 0;
    *readonly = !PyArray_ISWRITEABLE(a);
    *size = count;
    return 1;
}

/*
 * Whether `obj` is exactly a numpy.ndarray over the memory and layout `t` describes, with
 * a writable flag that does not contradict `readonly` — so that it can stand in for the
 * View that describes it, without making a new array.
 */
static int ap_ndarray_is_exactly(PyObject *obj, const APDLTensor *t, int readonly,
                                 int64_t itemsize) {
    if (Py_TYPE(obj) != &PyArray_Type)
        return 0;
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_NDIM(a) != t->ndim || PyArray_DATA(a) != (char *)t->data + t->byte_offset)
        return 0;
    if (readonly && PyArray_ISWRITEABLE(a))
        return 0;
    if (ap_numpy_type_of_dlpack(t->dtype) != PyArray_TYPE(a) || PyArray_ITEMSIZE(a) != itemsize)
        return 0;
    const npy_intp *dims = PyArray_DIMS(a);
    const npy_intp *strides = PyArray_STRIDES(a);
    for (int i = 0; i < t->ndim; i++) {
        if (dims[i] != t->shape[i] || strides[i] != t->strides[i] * itemsize)
            return 0;
    }
    return 1;
}

/*
 * A new ndarray over the memory `t` describes (host memory, a type NumPy holds natively:
 * checked by the caller), writable unless `readonly`, whose base is `owner` (a new
 * reference is taken). NULL with an exception set on failure.
 */
static PyObject *ap_ndarray_over(const APDLTensor *t, int readonly, PyObject *owner) {
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    int type_num = ap_numpy_type_of_dlpack(t->dtype);
    if (type_num < 0 || t->ndim > NPY_MAXDIMS) {
        PyErr_SetString(PyExc_BufferError, "numpy: the View's type has no NumPy equivalent");
        return NULL;
    }
    PyArray_Descr *descr = PyArray_DescrFromType(type_num);
    if (descr == NULL)
        return NULL;
    const npy_intp itemsize = PyDataType_ELSIZE(descr);
    for (int i = 0; i < t->ndim; i++) {
        dims[i] = (npy_intp)t->shape[i];
        strides[i] = (npy_intp)t->strides[i] * itemsize;
    }
    /* NumPy allocates when data is NULL; an empty array needs no memory, so any non-NULL
     * address does (it is never read). */
    char *data = t->data == NULL ? (char *)&dims[0] : (char *)t->data + t->byte_offset;
    PyObject *array = PyArray_NewFromDescr(&PyArray_Type, descr, t->ndim, dims, strides,
                                           data, readonly ? 0 : NPY_ARRAY_WRITEABLE, NULL);
    if (array == NULL)
        return NULL;
    Py_INCREF(owner);
    if (PyArray_SetBaseObject((PyArrayObject *)array, owner) < 0) {
        Py_DECREF(array);
        return NULL;
    }
    return array;
}

#endif /* ARRAYPORT_NUMPY_ARRAYS_H */
