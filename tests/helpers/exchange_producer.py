"""A producer type with a DLPack 1.3 C exchange table over device memory of the CUDA driver
simulator (issue 42): what PyTorch's CUDA tensors offer a consumer, without a GPU.

``ExchangeTensor`` wraps a ``sim_arrays.DeviceArray`` whose upload is still pending on a
stream; its type's ``__dlpack_c_exchange_api__`` is a table of C functions (ctypes
callbacks) — ``managed_tensor_from_py_object_no_sync`` (an owning tensor, its deleter
counted), ``current_work_stream`` (the stream the producer last wrote on: its "current
stream"), ``managed_tensor_to_py_object_no_sync`` (takes a managed tensor in, as a new
``ExchangeTensor``) — and its Python ``__dlpack__`` counts its calls, so a test can prove the
import never used it. ``COUNTS`` holds the counters."""

from __future__ import annotations

import ctypes
from collections import Counter

import numpy as np

# DLPack's structs as arrayport's conformance checker declares them (ctypes)
from arrayport.cli.capsules import DLDataType, DLDevice, DLTensor, ManagedVersioned, Version

COUNTS: Counter = Counter()
DL_CUDA = 2


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p))
TO_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                         ctypes.POINTER(ctypes.c_void_p))
WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                               ctypes.POINTER(ctypes.c_void_p))


class ExchangeHeader(ctypes.Structure):
    pass


ExchangeHeader._fields_ = [("version", Version), ("prev_api", ctypes.POINTER(ExchangeHeader))]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", ExchangeHeader), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", FROM_PY),
                ("managed_tensor_to_py_object_no_sync", TO_PY),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", WORK_STREAM)]


_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_alive: dict[int, tuple] = {}   # managed tensors handed out, by address: their parts


def _delete(address):
    COUNTS["deleter"] += 1
    _alive.pop(address, None)


_DELETE = DELETER(_delete)


def _managed_of(tensor: "ExchangeTensor"):
    """A new owning DLManagedTensorVersioned of ``tensor``'s memory (kept alive here until
    its deleter runs)."""
    shape = (ctypes.c_int64 * len(tensor.shape))(*tensor.shape)
    itemsize = tensor.dtype.itemsize
    strides = (ctypes.c_int64 * len(tensor.shape))(*(s // itemsize for s in tensor.strides))
    managed = ManagedVersioned()
    managed.version = Version(1, 3)
    managed.deleter = ctypes.cast(_DELETE, ctypes.c_void_p).value
    managed.dl_tensor = DLTensor(tensor.ptr, DLDevice(tensor.device_type, tensor.device),
                                 len(tensor.shape),
                                 DLDataType(_CODES[tensor.dtype.kind], itemsize * 8, 1),
                                 shape, strides, 0)
    _alive[ctypes.addressof(managed)] = (managed, shape, strides, tensor)
    return managed


def _from_py(obj, out):
    try:
        tensor = ctypes.cast(obj, ctypes.py_object).value
        COUNTS["from_py_object"] += 1
        managed = _managed_of(tensor)
        out[0] = ctypes.addressof(managed)
        return 0
    except Exception:   # the table's contract: -1 with a Python error set; none is here
        return -1


def _current_work_stream(device_type, device_id, out):
    COUNTS["current_work_stream"] += 1
    ExchangeTensor.asked.append((device_type, device_id))
    if ExchangeTensor.fail_work_stream:   # a failure (a ctypes callback cannot leave a
        return -1                           # Python error set: it fails without one)
    out[0] = ExchangeTensor.current_stream.get(device_id, 0)
    return 0


def _to_py(address, out):
    COUNTS["to_py_object"] += 1
    managed = ManagedVersioned.from_address(address)
    made = ExchangeTensor.adopting(address, managed.dl_tensor)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(made))   # a new reference, as the table's
    out[0] = id(made)                                     # contract says
    return 0


_TABLE = ExchangeAPI(ExchangeHeader(Version(1, 3), None), None, FROM_PY(_from_py),
                     TO_PY(_to_py), None, WORK_STREAM(_current_work_stream))
ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
# A capsule keeps a pointer to its name, not a copy: the name lives as long as the module.
_CAPSULE_NAME = ctypes.create_string_buffer(b"dlpack_exchange_api")


class ExchangeTensor:
    """Device memory of the simulator, with a DLPack 1.3 exchange table on its type."""

    __dlpack_c_exchange_api__ = ctypes.pythonapi.PyCapsule_New(
        ctypes.addressof(_TABLE), ctypes.addressof(_CAPSULE_NAME), None)
    current_stream: dict[int, int] = {}   # device -> the producer's current work stream
    asked: list = []                        # (device type, device) of each such question
    fail_work_stream = False                # current_work_stream fails (a test sets it)

    def __init__(self, array, shape=None, strides=None, device_type=DL_CUDA):
        self.array = array             # a sim_arrays.DeviceArray (owns the memory), or
        self.device_type = device_type  # hip_arrays' (device_type: kDLROCM)
        self.ptr, self.device, self.dtype = array.ptr, array.device, np.dtype(array.dtype)
        self.shape = tuple(shape if shape is not None else array.shape)
        self.strides = tuple(strides if strides is not None else
                             np.empty(self.shape, self.dtype).strides)
        self._managed = None

    @classmethod
    def adopting(cls, managed, tensor):
        """A tensor taking over the managed tensor at address ``managed`` (to_py_object):
        its deleter runs when this goes."""
        made = cls.__new__(cls)
        made.array, made.ptr, made.device = None, tensor.data, tensor.device.device_id
        made.device_type = tensor.device.device_type
        made.dtype = np.dtype(f"{'iufcb'[tensor.dtype.code if tensor.dtype.code < 3 else 3]}"
                              f"{tensor.dtype.bits // 8}") if tensor.dtype.code != 6 \
            else np.dtype(bool)
        made.shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
        made.strides = tuple(tensor.strides[i] * made.dtype.itemsize
                             for i in range(tensor.ndim))
        made._managed = managed
        return made

    def __del__(self):
        managed, self._managed = self._managed, None
        if managed is not None:
            DELETER(ManagedVersioned.from_address(managed).deleter)(managed)
        array, self.array = self.array, None
        if array is not None:
            array.free()   # the memory it made (its last View is gone: it held this)

    def __dlpack_device__(self):
        return (self.device_type, self.device)

    def __dlpack__(self, stream=None, **kwargs):
        COUNTS["__dlpack__"] += 1
        raise BufferError("exchange_producer: the test says __dlpack__ must not be called")
