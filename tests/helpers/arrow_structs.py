"""Arrow C data interface structs built by hand with ctypes (the layouts of the Arrow format
docs), wrapped in the capsules the PyCapsule protocol uses, with release callbacks that
count their calls: hostile arrays for the Arrow import, and a producer that is not pyarrow.
"""

from __future__ import annotations

import ctypes

import numpy as np


class Schema(ctypes.Structure):
    pass


class Array(ctypes.Structure):
    pass


SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(Schema))
ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(Array))

Schema._fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p),
                   ("metadata", ctypes.c_char_p), ("flags", ctypes.c_int64),
                   ("n_children", ctypes.c_int64),
                   ("children", ctypes.POINTER(ctypes.POINTER(Schema))),
                   ("dictionary", ctypes.POINTER(Schema)), ("release", SCHEMA_RELEASE),
                   ("private_data", ctypes.c_void_p)]
Array._fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64),
                  ("offset", ctypes.c_int64), ("n_buffers", ctypes.c_int64),
                  ("n_children", ctypes.c_int64), ("buffers", ctypes.POINTER(ctypes.c_void_p)),
                  ("children", ctypes.POINTER(ctypes.POINTER(Array))),
                  ("dictionary", ctypes.POINTER(Array)), ("release", ARRAY_RELEASE),
                  ("private_data", ctypes.c_void_p)]

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Made:
    """One hand-made array: its structs, the memory they point at, and release counters.
    Everything is kept alive by this object (the capsules have no destructor: a test
    checks release counts itself)."""

    def __init__(self, fmt, values, *, length=None, offset=0, null_count=0, validity=None,
                 n_buffers=2, buffers=None, children=(), metadata=None):
        self.released = {"array": 0, "schema": 0}
        self.keep = []
        self.values = None if values is None else np.ascontiguousarray(values)
        self.schema = Schema()
        self.schema.format = fmt.encode() if isinstance(fmt, str) else fmt
        self.schema.metadata = metadata
        self.schema.n_children = len(children)
        self.array = Array()
        self.array.length = len(self.values) if length is None else length
        self.array.offset = offset
        self.array.null_count = null_count
        self.array.n_buffers = n_buffers
        if buffers is None:
            buffers = [validity, None if self.values is None else self.values.ctypes.data]
        pointers = (ctypes.c_void_p * max(len(buffers), 1))(*buffers)
        self.keep.append(pointers)
        self.array.buffers = ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p))
        self.array.n_children = len(children)
        if children:
            schemas = (ctypes.POINTER(Schema) * len(children))(
                *[ctypes.pointer(child.schema) for child in children])
            arrays = (ctypes.POINTER(Array) * len(children))(
                *[ctypes.pointer(child.array) for child in children])
            self.keep += [schemas, arrays, *children]
            self.schema.children = schemas
            self.array.children = arrays

        def release_array(pointer):
            self.released["array"] += 1
            pointer[0].release = ARRAY_RELEASE()

        def release_schema(pointer):
            self.released["schema"] += 1
            pointer[0].release = SCHEMA_RELEASE()

        self._release_array = ARRAY_RELEASE(release_array)
        self._release_schema = SCHEMA_RELEASE(release_schema)
        self.array.release = self._release_array
        self.schema.release = self._release_schema

    def capsules(self):
        return (_new_capsule(ctypes.addressof(self.schema), b"arrow_schema", None),
                _new_capsule(ctypes.addressof(self.array), b"arrow_array", None))

    @property
    def array_released(self) -> bool:
        return not self.array.release


def fixed_size_list(width, child, **options):
    """A "+w:N" list of ``child`` (a Made), one validity buffer (NULL)."""
    rows = options.pop("length", child.array.length // width if width else 0)
    return Made(f"+w:{width}", None, length=rows, n_buffers=1, buffers=[None],
                children=(child,), **options)


def metadata_bytes(pairs: dict) -> bytes:
    """The C data interface's metadata encoding: int32 count, then length-prefixed keys
    and values (native byte order)."""
    out = len(pairs).to_bytes(4, "little", signed=True)
    for key, value in pairs.items():
        for part in (key, value):
            out += len(part).to_bytes(4, "little", signed=True) + part
    return out


# ---- the device interface and streams -----------------------------------------------------

class DeviceArray(ctypes.Structure):
    _fields_ = [("array", Array), ("device_id", ctypes.c_int64), ("device_type", ctypes.c_int32),
                ("sync_event", ctypes.c_void_p), ("reserved", ctypes.c_int64 * 3)]


def device_capsules(made, *, device_type=1, device_id=-1, sync_event=None):
    """(schema, "arrow_device_array") capsules of ``made``'s array on ``device_type`` /
    ``device_id`` with ``sync_event`` (the address of an event handle, or None); the
    struct is kept by ``made`` (``made.device_struct``)."""
    struct = DeviceArray()
    struct.array = made.array
    struct.device_id, struct.device_type, struct.sync_event = device_id, device_type, sync_event
    made.device_struct = struct
    return (_new_capsule(ctypes.addressof(made.schema), b"arrow_schema", None),
            _new_capsule(ctypes.addressof(struct), b"arrow_device_array", None))


class ArrayStream(ctypes.Structure):
    pass


GET_SCHEMA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ArrayStream), ctypes.POINTER(Schema))
GET_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ArrayStream), ctypes.POINTER(Array))
GET_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ArrayStream))
STREAM_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrayStream))
ArrayStream._fields_ = [("get_schema", GET_SCHEMA), ("get_next", GET_NEXT),
                        ("get_last_error", GET_LAST_ERROR), ("release", STREAM_RELEASE),
                        ("private_data", ctypes.c_void_p)]


class MadeStream:
    """A hand-made stream of ``chunks`` (Made arrays of one schema, the first one's): each
    get_next hands the next chunk's array over (the consumer then owns it; the Made counts
    its release), then the end. ``fail_at``: get_next number ``fail_at`` (0-based) fails
    with EIO and the message ``b"disk on fire"``; ``schema_fails``: get_schema does."""

    def __init__(self, chunks, *, fail_at=None, schema_fails=False):
        self.chunks, self.next, self.released = list(chunks), 0, 0
        self.error = ctypes.create_string_buffer(b"disk on fire")

        def get_schema(stream, out):
            if schema_fails:
                return 5
            out[0] = self.chunks[0].schema
            self.chunks[0].schema_handed = True
            return 0

        def get_next(stream, out):
            if fail_at is not None and self.next == fail_at:
                return 5
            if self.next == len(self.chunks):
                out[0].release = ARRAY_RELEASE()
                return 0
            out[0] = self.chunks[self.next].array
            self.chunks[self.next].array.release = ARRAY_RELEASE()   # moved out
            self.next += 1
            return 0

        def get_last_error(stream):
            return ctypes.addressof(self.error)

        def release(stream):
            self.released += 1
            stream[0].release = STREAM_RELEASE()

        self._callbacks = (GET_SCHEMA(get_schema), GET_NEXT(get_next),
                           GET_LAST_ERROR(get_last_error), STREAM_RELEASE(release))
        self.stream = ArrayStream(*self._callbacks, None)

    def capsule(self):
        return _new_capsule(ctypes.addressof(self.stream), b"arrow_array_stream", None)
