/* A test-only CPython extension for the buffer protocol, both directions.
 *
 * Exporter(memory, format=None, itemsize=1, shape=None, strides=None, suboffsets=None,
 *          readonly=False, offset=0, ndim=-1, refuse=False)
 *   exports exactly the Py_buffer it is told to (however wrong), over the bytes of
 *   `memory` (a bytearray it keeps alive) starting at `offset`; counts getbuffer/release
 *   calls in .gets / .releases so tests can prove "released exactly once".
 *   ndim=-1 means len(shape) (0 when shape is None).
 *
 * request(obj, flags) asks obj for a buffer with the given PEP 3118 flags and returns what
 * it filled in as a dict (then releases it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_DIMS 64

typedef struct {
    PyObject_HEAD
    PyObject *memory;  /* bytearray */
    PyObject *format;  /* bytes or NULL */
    Py_ssize_t itemsize, offset;
    int ndim, has_shape, has_strides, has_suboffsets, readonly, refuse;
    Py_ssize_t shape[MAX_DIMS], strides[MAX_DIMS], suboffsets[MAX_DIMS];
    long gets, releases;
} Exporter;

static int read_dims(PyObject *seq, Py_ssize_t *out, int *count, const char *what) {
    if (seq == Py_None) return 0;
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_DIMS) { Py_DECREF(fast); PyErr_SetString(PyExc_ValueError, "too many dims"); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
    }
    *count = (int)n;
    Py_DECREF(fast);
    return 1;
}

static int exporter_init(Exporter *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"memory", "format", "itemsize", "shape", "strides", "suboffsets",
                            "readonly", "offset", "ndim", "refuse", NULL};
    PyObject *memory, *format = Py_None, *shape = Py_None, *strides = Py_None,
             *suboffsets = Py_None;
    Py_ssize_t itemsize = 1, offset = 0;
    int readonly = 0, ndim = -1, refuse = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|OnOOOpnip", names, &PyByteArray_Type,
                                     &memory, &format, &itemsize, &shape, &strides,
                                     &suboffsets, &readonly, &offset, &ndim, &refuse))
        return -1;
    int n_shape = 0, n_strides = 0, n_sub = 0;
    if ((self->has_shape = read_dims(shape, self->shape, &n_shape, "shape")) < 0) return -1;
    if ((self->has_strides = read_dims(strides, self->strides, &n_strides, "strides")) < 0) return -1;
    if ((self->has_suboffsets = read_dims(suboffsets, self->suboffsets, &n_sub, "suboffsets")) < 0) return -1;
    Py_INCREF(memory);
    Py_XSETREF(self->memory, memory);
    if (format != Py_None) {
        PyObject *encoded = PyUnicode_AsASCIIString(format);
        if (!encoded) return -1;
        Py_XSETREF(self->format, encoded);
    }
    self->itemsize = itemsize;
    self->offset = offset;
    self->readonly = readonly;
    self->refuse = refuse;
    self->ndim = ndim >= 0 ? ndim : n_shape;
    return 0;
}

static int exporter_getbuffer(Exporter *self, Py_buffer *view, int flags) {
    (void)flags;
    if (self->refuse) {
        PyErr_SetString(PyExc_BufferError, "this exporter refuses");
        return -1;
    }
    view->buf = PyByteArray_AS_STRING(self->memory) + self->offset;
    view->len = PyByteArray_GET_SIZE(self->memory) - self->offset;
    view->readonly = self->readonly;
    view->itemsize = self->itemsize;
    view->format = self->format ? PyBytes_AS_STRING(self->format) : NULL;
    view->ndim = self->ndim;
    view->shape = self->has_shape ? self->shape : NULL;
    view->strides = self->has_strides ? self->strides : NULL;
    view->suboffsets = self->has_suboffsets ? self->suboffsets : NULL;
    view->internal = NULL;
    view->obj = Py_NewRef((PyObject *)self);
    self->gets++;
    return 0;
}

static void exporter_releasebuffer(Exporter *self, Py_buffer *view) {
    (void)view;
    self->releases++;
}

static void exporter_dealloc(Exporter *self) {
    Py_XDECREF(self->memory);
    Py_XDECREF(self->format);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *exporter_gets(Exporter *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->gets);
}
static PyObject *exporter_releases(Exporter *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->releases);
}

static PyGetSetDef exporter_getset[] = {
    {"gets", (getter)exporter_gets, NULL, "getbuffer calls", NULL},
    {"releases", (getter)exporter_releases, NULL, "releasebuffer calls", NULL},
    {NULL},
};

static PyBufferProcs exporter_as_buffer = {
    (getbufferproc)exporter_getbuffer, (releasebufferproc)exporter_releasebuffer,
};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "buffer_exporter.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)exporter_init,
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_as_buffer = &exporter_as_buffer,
    .tp_getset = exporter_getset,
};

static PyObject *dims_tuple(int ndim, const Py_ssize_t *dims) {
    if (!dims) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(ndim);
    for (int i = 0; out && i < ndim; i++)
        PyTuple_SET_ITEM(out, i, PyLong_FromSsize_t(dims[i]));
    return out;
}

static PyObject *request(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, flags) < 0) return NULL;
    PyObject *result = Py_BuildValue(
        "{s:n,s:n,s:n,s:O,s:i,s:N,s:N,s:N,s:O}", "buf", (Py_ssize_t)view.buf, "len", view.len,
        "itemsize", view.itemsize, "readonly", view.readonly ? Py_True : Py_False,
        "ndim", view.ndim, "shape", dims_tuple(view.ndim, view.shape),
        "strides", dims_tuple(view.ndim, view.strides),
        "format", view.format ? PyUnicode_FromString(view.format) : Py_NewRef(Py_None),
        "obj", view.obj ? view.obj : Py_None);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"request", request, METH_VARARGS, "request(obj, flags) -> dict of the Py_buffer"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "buffer_exporter", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit_buffer_exporter(void) {
    if (PyType_Ready(&ExporterType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Py_INCREF(&ExporterType);
    if (PyModule_AddObject(module, "Exporter", (PyObject *)&ExporterType) < 0) return NULL;
    return module;
}
