"""A producer type whose DLPack 1.3 exchange table is C (tests/helpers/exchange_table.c),
as PyTorch's is C++: ``CompiledExchangeTensor`` wraps a device array of a driver simulator
(or any memory) and offers the table on its type. For the benchmark of exchange-table
imports, where exchange_producer.py's ctypes callbacks would charge each import the
producer's own Python. ``counts()``: (managed tensors alive, from_py calls,
current_work_stream calls); ``set_stream(device, stream)``: what current_work_stream
answers for a device."""

from __future__ import annotations

import ctypes
import functools
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

from arrayport.cli.capsules import DLDataType, DLDevice, DLTensor, ManagedVersioned, Version
from simulator_library import build

_HERE = Path(__file__).resolve().parent
_INCLUDE = _HERE.parents[1] / "src" / "arrayport" / "include"
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_why_not: list[str] = []


@functools.lru_cache(maxsize=None)
def _library():
    path = build("the compiled exchange table",
                 [str(_HERE / "exchange_table.c"), f"-I{sysconfig.get_paths()['include']}",
                  f"-I{_INCLUDE}"],
                 Path(tempfile.mkdtemp(prefix="exchange-table-")) / "libexchange_table.so",
                 "libexchange_table.so", _why_not)
    if path is None:
        return None
    library = ctypes.CDLL(path)
    library.exchange_table.restype = ctypes.c_void_p
    library.exchange_table_set_stream.argtypes = [ctypes.c_int, ctypes.c_void_p]
    library.exchange_table_counts.argtypes = [ctypes.POINTER(ctypes.c_long)]
    return library


def unavailable() -> str | None:
    """Why the table cannot be built here (None: it can)."""
    return None if _library() is not None else "; ".join(_why_not)


def set_stream(device: int, stream: int) -> None:
    _library().exchange_table_set_stream(device, stream)


def counts() -> tuple[int, int, int]:
    out = (ctypes.c_long * 3)()
    _library().exchange_table_counts(out)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _capsule():
    ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
    ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.c_void_p]
    return ctypes.pythonapi.PyCapsule_New(_library().exchange_table(), _NAME, None)


_NAME = b"dlpack_exchange_api"   # a capsule keeps a pointer to its name: module-lifetime


class _TableOnType:
    """The type attribute ``__dlpack_c_exchange_api__``, made on first read."""

    def __get__(self, instance, owner):
        return _capsule()


class CompiledExchangeTensor:
    """``array``'s memory (``.ptr``, ``.shape``, ``.dtype``, ``.device``: a simulator's
    DeviceArray) with a compiled exchange table on its type."""

    __dlpack_c_exchange_api__ = _TableOnType()

    def __init__(self, array, device_type=2):
        self.array = array
        dtype = np.dtype(array.dtype)
        self._shape = (ctypes.c_int64 * len(array.shape))(*array.shape)
        self._strides = (ctypes.c_int64 * len(array.shape))(
            *(s // dtype.itemsize for s in np.empty(array.shape, dtype).strides))
        managed = ManagedVersioned()
        managed.version = Version(1, 3)
        managed.dl_tensor = DLTensor(array.ptr, DLDevice(device_type, array.device),
                                     len(array.shape),
                                     DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1),
                                     self._shape, self._strides, 0)
        self._managed = managed
        self._template = ctypes.addressof(managed)
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, self.array.device)

    def __dlpack__(self, stream=None, **kwargs):
        raise BufferError("compiled_exchange_producer: import through the table")
