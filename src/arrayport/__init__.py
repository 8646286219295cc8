"""arrayport: move arrays between Python libraries, zero-copy, over every protocol.

The public surface:
- ``View``: an immutable description of strided memory on any DLPack device;
- ``view(obj, stream=)``: a View of anything, through the best protocol it offers, never a copy;
- ``from_dlpack(obj, device=, copy=)``: a View of anything with ``__dlpack__`` or a capsule;
- ``to_numpy(obj, copy=)``: a NumPy array of it (ml_dtypes for bfloat16/float8/…);
- ``to_torch(obj, device=, copy=, stream=, readonly=)``: a torch.Tensor of it, safely;
- ``View.copy(device=, stream=)``: a contiguous copy on any device arrayport drives
  (host, CUDA, ROCm), enqueued on the caller's stream;
- ``set_implicit_sync`` / ``no_implicit_sync()``: switch arrayport's stream
  synchronization off (CUDA graph capture); see ``arrayport.gpu``;
  ``release_device_memory()``: the GPU memory arrayport keeps for reuse, back to the driver;
- ``to(obj, target, **options)``: the same for "jax", "cupy", "tvm_ffi", "pyarrow"…;
- ``explain(obj, target, **options)``: what such a conversion would do (route, copy or
  not and why, stream ordering) without moving data; ``warn_on_copies()`` (or
  ``ARRAYPORT_WARN_COPIES=1``): a ``CopyWarning`` for every copy nobody asked for;
- ``require(x, dtype=, ndim=, shape=, order=, device=, writable=, align=, copy=, stream=)``,
  ``Spec`` and ``@accepts(x=Spec(...), returns="like:x")``: contracts for library authors —
  any array in, a View meeting the contract (a copy only where needed), the caller's
  library out (``arrayport.contracts``);
- ``View.share()`` / ``View.from_shared(handle)`` (POSIX shared memory, a picklable
  ``SharedHandle``) and pickling (protocol 5 out of band; ``device_pickling("host")`` to
  allow device Views): Views across processes (``arrayport.pickling``, ``arrayport.shared``);
  ``empty_shared(shape, dtype)``: a View to fill in place whose ``share()`` is no copy;
- ``DType`` / ``DTypeCode``, ``Device`` / ``DeviceType``: DLPack's type and device model;
- ``arrayport.errors``: what users catch, each a subclass of the built-in type it was —
  ``NeedsCopy`` (a BufferError: the producer's memory does not hold its values as they are;
  the converters resolve such arrays into copies), ``DriverUnavailable`` (a BufferError;
  ``CudaUnavailable``, ``HipUnavailable``), ``TypeNotHeld`` (a TypeError and a BufferError:
  the target library has no type for the data), ``ReadOnlySharedWarning``;
- ``get_include()``: the folder holding ``arrayport/dlpack_abi.h`` and ``arrayport/capi.h``
  for C extensions; ``_C_API`` is the capsule ``arrayport_import_capi()`` reads;
- ``View.__dlpack_c_exchange_api__``: the DLPack 1.3 C exchange API table.
"""

import os as _os

from arrayport._core import DLPACK_VERSION, MAX_NDIM, NeedsCopy, View, from_dlpack, view
from arrayport._version import __version__
from arrayport import errors
from arrayport.convert import to, to_numpy, to_torch
from arrayport._core import Spec, require
from arrayport.errors import (CopyWarning, DriverUnavailable, ReadOnlySharedWarning,
                              RequirementError, TypeNotHeld)
from arrayport.devices import Device, DeviceType
from arrayport.dtypes import DType, DTypeCode
from arrayport.gpu import (implicit_sync_enabled, no_implicit_sync, release_device_memory,
                           set_implicit_sync)
from arrayport.pickling import device_pickling, set_device_pickling
from arrayport import _policy  # noqa: F401  (installs the core's policy hooks)
from arrayport.copy_watch import warn_on_copies
from arrayport.explain import Explanation, explain
from arrayport.engines import register_with_engines as _register_with_engines

_register_with_engines()   # Dask's serializer family: now, or when distributed is imported

# The capsule arrayport_import_capi() (arrayport/capi.h) finds as "arrayport._C_API": a module
# attribute by contract.
from arrayport._core import _C_API  # noqa: E402,F401

__all__ = [
    "DLPACK_VERSION", "MAX_NDIM", "SharedHandle", "CopyWarning", "Device", "DeviceType",
    "DType", "DTypeCode", "DriverUnavailable", "Explanation", "NeedsCopy", "ReadOnlySharedWarning", "RequirementError", "Spec",
    "TypeNotHeld", "View", "__version__", "accepts", "device_pickling", "errors", "from_dlpack", "get_include",
    "empty_shared", "explain", "implicit_sync_enabled", "no_implicit_sync", "release_device_memory", "require", "set_device_pickling",
    "set_implicit_sync", "to", "to_numpy", "to_torch", "view", "warn_on_copies",
]


def get_include() -> str:
    """The include folder for C/C++/Cython extensions built against arrayport.

    It holds ``arrayport/dlpack_abi.h`` (the DLPack 1.3 ABI, names prefixed ``APDL``) and
    ``arrayport/capi.h`` (arrayport's C API); the ``.pxd`` files sit beside the package.

    Returns
    -------
    str
        An absolute path, for ``-I`` or ``include_dirs``.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


def __getattr__(name):
    # Imported on first use, not by ``import arrayport``: the decorator (arrayport.contracts)
    # and the shared-memory handle (arrayport.shared).
    if name == "accepts":
        from arrayport.contracts import accepts
        return accepts
    if name == "SharedHandle":
        from arrayport.shared import SharedHandle
        return SharedHandle
    if name == "empty_shared":
        from arrayport.shared import empty_shared
        return empty_shared
    raise AttributeError(f"module 'arrayport' has no attribute {name!r}")


def __dir__():
    # The lazily imported names (above) are as public as the rest: tab completion and
    # dir() show every name of __all__.
    return sorted(set(globals()) | set(__all__))
