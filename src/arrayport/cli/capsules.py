"""Looking inside DLPack capsules from Python (ctypes): read a capsule's header and tensor
without consuming it, and count its deleter's calls by putting a counting wrapper in its
place. The conformance checker uses this on capsules any producer makes.

The struct layouts are DLPack 1.3's (see include/arrayport/dlpack_abi.h); only the frozen
parts are read.
"""

from __future__ import annotations

import ctypes

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetDestructor.restype = ctypes.c_int
_api.PyCapsule_SetDestructor.argtypes = [ctypes.py_object, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
READ_ONLY, IS_COPIED = 1 << 0, 1 << 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class ManagedLegacy(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_KEEP_ALIVE: list = []  # counting wrappers may be called at any time, even at shutdown


def is_capsule(x) -> bool:
    return type(x).__name__ == "PyCapsule"


def name(capsule) -> str | None:
    raw = _api.PyCapsule_GetName(capsule)
    return None if raw is None else raw.decode("utf-8", "replace")


def managed(capsule):
    """The ManagedLegacy or ManagedVersioned struct behind an unconsumed capsule."""
    for capsule_name, struct in ((VERSIONED, ManagedVersioned), (LEGACY, ManagedLegacy)):
        if _api.PyCapsule_IsValid(capsule, capsule_name):
            return struct.from_address(_api.PyCapsule_GetPointer(capsule, capsule_name))
    raise ValueError(f"capsule named {name(capsule)!r} is not an unconsumed DLPack capsule "
                     f"('dltensor' or 'dltensor_versioned')")


def describe(capsule) -> dict:
    """Everything a checker compares, read without consuming the capsule."""
    m = managed(capsule)
    t = m.dl_tensor
    versioned = isinstance(m, ManagedVersioned)
    return {
        "name": name(capsule), "versioned": versioned,
        "version": (m.version.major, m.version.minor) if versioned else None,
        "flags": m.flags if versioned else 0, "data": t.data or 0,
        "device": (t.device.device_type, t.device.device_id), "ndim": t.ndim,
        "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
        "shape": [t.shape[i] for i in range(t.ndim)] if t.shape else None,
        "strides": [t.strides[i] for i in range(t.ndim)] if t.strides else None,
        "byte_offset": t.byte_offset, "has_deleter": bool(m.deleter),
    }


def set_major_version(capsule, major: int) -> None:
    managed(capsule).version.major = major


class DeleterCount:
    """Replaces a capsule's deleter with one that counts its calls and runs the original
    once (a second call is counted, not passed on: it would free twice)."""

    def __init__(self, capsule):
        self.calls = 0
        struct = managed(capsule)
        original = struct.deleter
        self._original = DELETER(original) if original else None
        self._wrapper = DELETER(self._called)
        _KEEP_ALIVE.append(self)
        struct.deleter = ctypes.cast(self._wrapper, ctypes.c_void_p).value

    def _called(self, tensor):
        self.calls += 1
        if self.calls == 1 and self._original is not None:
            self._original(tensor)


def rename(capsule, new_name: bytes) -> None:
    """Give a capsule another name (the bytes must outlive it: they are kept here)."""
    _KEEP_ALIVE.append(new_name)
    _api.PyCapsule_SetName(capsule, new_name)


def drop_destructor(capsule) -> None:
    """Make a capsule that never calls its deleter (a broken producer, for tests)."""
    _api.PyCapsule_SetDestructor(capsule, None)
