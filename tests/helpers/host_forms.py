"""Every way the host reads a View's memory (issue 40), as one table.

Each ``HostForm`` reads a View through one public door — NumPy's protocols, the buffer
protocol, Arrow's C data exports, the copies, shared memory, pickling, DLPack to the CPU,
NumPy's dispatch, the converters — and returns the values it read, copied at once into a
new ndarray, so that a wait arrayport makes afterwards cannot hide a stale read.

Two tests use the table:
- tests/test_host_readers.py, on any machine: a pinned View with work pending on a stream,
  and a recording driver — every form must ask the driver to wait for that stream first;
  and every public attribute of ``View`` and callable of ``arrayport`` must be in this
  table or in ``NOT_HOST_READERS`` with its reason, so that a new door cannot skip the
  rule unnoticed;
- tests/test_gpu_host_readers.py, on the CUDA driver simulator (``pytest -m gpu``): pinned
  memory an asynchronous copy is still writing — every form must read the written values.
"""

from __future__ import annotations

import operator
import pickle
from typing import Callable, NamedTuple

import numpy as np

import arrayport as ap
from arrayport import _core


class HostForm(NamedTuple):
    name: str
    attribute: str                  # the View attribute or arrayport callable it goes through
    read: Callable[[ap.View], np.ndarray]
    needs_gpu: bool = False         # allocates through the driver (pinned memory, a GPU copy)


class _Interface:
    """What NumPy reads a View's ``__array_interface__`` through."""

    def __init__(self, view):
        self.__array_interface__ = view.__array_interface__
        self.view = view


def _values(x) -> np.ndarray:
    return np.array(x, copy=True)


def _through_shared_memory(view):
    handle = view.share()
    try:
        return _values(ap.View.from_shared(handle))
    finally:
        handle.unlink()


def _through_dlpack(view):
    """A pinned consumer's import (no stream named): DLPack's capsule, read by arrayport
    (a capsule carries no pending work: its reader reads at once)."""
    return _values(ap.to_numpy(ap.view(view.__dlpack__(max_version=(1, 0)))))


def _element_by_element(convert):
    """The values read one element at a time through a scalar conversion of each 0-d View
    (each keeps its parent's pending work, so each conversion must wait for it)."""
    def read(view):
        return np.array([convert(view[index]) for index in np.ndindex(*view.shape)],
                        dtype=np.float64).reshape(view.shape)
    return read


def _through_index(view):
    """operator.index of each element of the same bytes read as int32, back to float32."""
    bits = view.view_as("int32")
    return np.array([operator.index(bits[index]) for index in np.ndindex(*view.shape)],
                    dtype=np.int32).reshape(view.shape).view(np.float32)


HOST_FORMS = [
    HostForm("the buffer protocol", "__getbuffer__", lambda v: _values(memoryview(v))),
    HostForm("numpy.asarray", "__getbuffer__", lambda v: _values(np.asarray(v))),
    HostForm("__array__", "__array__", lambda v: _values(v.__array__())),
    HostForm("__array_interface__", "__array_interface__",
             lambda v: _values(_Interface(v))),
    HostForm("__arrow_c_array__", "__arrow_c_array__",
             lambda v: _values(_core.view_from_arrow(*v.__arrow_c_array__()))),
    HostForm("__arrow_c_stream__", "__arrow_c_stream__",
             lambda v: _values(_core.view_from_arrow(v.__arrow_c_stream__()))),
    HostForm("host_copy", "host_copy", lambda v: _values(v.host_copy())),
    HostForm("copy to the CPU", "copy", lambda v: _values(v.copy(device="cpu"))),
    HostForm("strided copy to the CPU (the host kernel)", "copy",
             lambda v: _values(v[::-1].copy(device="cpu"))[::-1]),
    HostForm("strided copy in place (packed by the host kernel)", "copy",
             lambda v: _values(ap.to_numpy(v[::-1].copy().copy(device="cpu")))[::-1],
             needs_gpu=True),
    HostForm("copy.deepcopy", "__deepcopy__",
             lambda v: _values(ap.to_numpy(v.__deepcopy__({}).copy(device="cpu"))),
             needs_gpu=True),
    HostForm("share", "share", _through_shared_memory),
    HostForm("pickle 5", "__reduce_ex__",
             lambda v: _values(pickle.loads(pickle.dumps(v, protocol=5)))),
    HostForm("pickle 4", "__reduce_ex__",
             lambda v: _values(pickle.loads(pickle.dumps(v, protocol=4)))),
    HostForm("__dlpack__ for a pinned consumer", "__dlpack__", _through_dlpack),
    HostForm("__dlpack__ to the CPU", "__dlpack__",
             lambda v: _values(np.from_dlpack(v))),
    # (View.from_dlpack, an import, shares the name: the table holds the reading one)
    HostForm("arrayport.from_dlpack to the CPU", "from_dlpack",
             lambda v: _values(ap.from_dlpack(v, device="cpu"))),
    HostForm("arrayport.to_numpy", "to_numpy", lambda v: _values(ap.to_numpy(v))),
    HostForm("arrayport.to_numpy(copy=True)", "to_numpy",
             lambda v: _values(ap.to_numpy(v, copy=True))),
    HostForm("arrayport.to(x, 'numpy')", "to", lambda v: _values(ap.to(v, "numpy"))),
    HostForm("arrayport.to_torch", "to_torch",
             lambda v: ap.to_torch(v, device="cpu").numpy().copy()),
    HostForm("arrayport.require on the CPU", "require",
             lambda v: _values(ap.require(v, device="cpu", order="C", copy=True))),
    HostForm("a NumPy ufunc", "__array_ufunc__", lambda v: _values(np.add(v, 0))),
    HostForm("a NumPy function", "__array_function__",
             lambda v: _values(np.concatenate([v]))),
    HostForm("float() of each element", "__float__", _element_by_element(float)),
    HostForm("int() of each element", "__int__", _element_by_element(int)),
    HostForm("complex() of each element", "__complex__",
             _element_by_element(lambda e: complex(e).real)),
    # bool decides first (and waits); the value is then read without pending work
    HostForm("bool() of each element", "__bool__",
             _element_by_element(lambda e: float(e) if bool(e) else 0.0)),
    HostForm("operator.index of each element", "__index__", _through_index),
]

# Every other public attribute of View and callable of arrayport, and why it reads no
# host memory of a View (or where its ordering is held instead).
_METADATA = "metadata only: no data is read"
_IMPORT = "an import: makes a View, reads none"
NOT_HOST_READERS = {
    **{name: _METADATA for name in (
        "T", "mT", "permute", "reshape", "view_as", "as_readonly", "__getitem__", "device",
        "dtype", "element_strides", "is_c_contiguous", "is_copy", "is_f_contiguous",
        "itemsize", "nbytes", "ndim", "owner", "protocol", "ptr", "readonly", "shape",
        "size", "strides", "__dlpack_device__", "__repr__", "__array_priority__",
        "__class_getitem__", "__arrow_c_schema__", "__copy__")},
    **{name: _IMPORT for name in (
        "from_array", "from_array_interface", "from_arrow", "from_buffer",
        "from_cuda_array_interface", "from_shared", "view")},
    "__cuda_array_interface__": "a CUDA consumer's door: it names the pending stream, and "
                                "the consumer orders itself after it (the spec's rule)",
    "__arrow_c_device_array__": "a device consumer's door: it carries a sync event the "
                                "consumer waits on (tests/test_gpu_arrow.py)",
    "__dlpack_c_exchange_api__": "C consumers: its exports wait as __dlpack__ does "
                                 "(tests/test_host_readers.py, the C doors)",
    "__array_wrap__": "wraps NumPy's result, reads no View",
    "accepts": "a decorator: its arguments go through require",
    "device_pickling": "a setting", "set_device_pickling": "a setting",
    "implicit_sync_enabled": "a setting", "no_implicit_sync": "a setting",
    "set_implicit_sync": "a setting", "get_include": "a path",
    "empty_shared": "makes new host memory and reads none",
    "release_device_memory": "returns device memory to the driver and reads none",
    "explain": "runs the conversion it explains up to the first copy and reads no data; "
               "the conversion's own waits are its converter's, tested as that door",
}


def public_doors():
    """Every public attribute of View (the buffer protocol as ``__getbuffer__``) and every
    public callable of arrayport that is not a type."""
    names = {name for name in dir(ap.View) if not name.startswith("_")}
    names |= {name for name in vars(ap.View)
              if name.startswith("__") and name not in ("__doc__", "__init__", "__new__",
                                                          "__pyx_vtable__", "__module__")}
    names.add("__getbuffer__")
    names |= {name for name in ap.__all__ if callable(getattr(ap, name))
              and not isinstance(getattr(ap, name), type) and not name.startswith("_")}
    return names
