"""CuPy at run time: the converter, and CuPy as the library NumPy functions on CUDA (and
ROCm) Views run on. Its cases for the command and the tests:
``arrayport.libraries.cases._cupy``."""

from __future__ import annotations

import sys

from arrayport import _core
from arrayport.copy_watch import unasked_copy
from arrayport.convert_steps import check_copy, check_readonly_policy, placed, writable_for
from arrayport.devices import DeviceType


def _to_cupy(x, *, copy=None, stream=None, readonly="copy"):
    import cupy

    check_copy(copy, "to(cupy)")
    check_readonly_policy(readonly, "to(cupy)")
    view = _core.view_or_copy(x, stream=stream, copy=copy)
    if view.device.type in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        view = placed(view, None, copy)
        return cupy.from_dlpack(writable_for(view, readonly, copy, "to(cupy)", "CuPy"))
    why = f"the data is on {view.device}; CuPy arrays live in CUDA memory"
    unasked_copy(copy, "to(cupy)", why, f"to(cupy): {why}, so this needs a copy, but copy=False")
    return cupy.asarray(_core.to_numpy(view))


class _CuPy:
    """CuPy computing on CUDA (or ROCm) memory."""

    def __init__(self, cupy):
        self._cupy = cupy
        self._ndarray = cupy.ndarray
        self._generic = sys.modules["numpy"].generic

    def operand(self, view):
        return self._cupy.from_dlpack(view)

    def accepts(self, x, protocol):
        """CuPy arrays and scalars: never a host array, which would need a copy."""
        return isinstance(x, (self._ndarray, bool, int, float, complex, self._generic))

    def accepts_type(self, tp):
        return issubclass(tp, self._ndarray)

    def wrap(self, result):
        if isinstance(result, self._ndarray):
            from arrayport import view
            return view(result)
        if type(result) is tuple:
            return tuple(self.wrap(item) for item in result)
        return result


# ---- what arrayport.libraries reads -----------------------------------------------------------

TARGETS = {"cupy": _to_cupy}


def numpy_backend():
    """CuPy computing on device memory, or None where it is not installed."""
    try:
        import cupy  # loaded only now, for device memory
    except ImportError:
        return None
    return _CuPy(cupy)
