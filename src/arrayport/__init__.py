"""arrayport: move arrays between Python libraries, zero-copy, over every protocol.

The public surface:
- ``View``: an immutable description of strided memory on any DLPack device;
- ``view(obj, stream=)``: a View of anything, through the best protocol it offers, never a copy;
- ``from_dlpack(obj, device=, copy=)``: a View of anything with ``__dlpack__`` or a capsule;
- ``to_numpy(obj)``: a NumPy array of it (ml_dtypes for bfloat16/float8/…);
- ``DType`` / ``DTypeCode``, ``Device`` / ``DeviceType``: DLPack's type and device model;
- ``get_include()``: the folder holding ``arrayport/dlpack_abi.h`` for C extensions.
"""

from pathlib import Path as _Path

from arrayport._core import DLPACK_VERSION, MAX_NDIM, View, from_dlpack, view
from arrayport._version import __version__
from arrayport.convert import to_numpy
from arrayport.devices import Device, DeviceType
from arrayport.dtypes import DType, DTypeCode

__all__ = [
    "DLPACK_VERSION", "MAX_NDIM", "Device", "DeviceType", "DType", "DTypeCode", "View",
    "__version__", "from_dlpack", "get_include", "to_numpy", "view",
]


def get_include() -> str:
    """The include folder for C/C++/Cython extensions: ``#include "arrayport/dlpack_abi.h"``."""
    return str(_Path(__file__).parent / "include")
