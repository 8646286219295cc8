"""Converters from anything arrayport can view to other libraries' arrays."""

from __future__ import annotations

from arrayport import _core
from arrayport.dtypes import DTypeCode

__all__ = ["to_numpy"]

_NUMPY_DLPACK_CODES = frozenset(
    {DTypeCode.INT, DTypeCode.UINT, DTypeCode.FLOAT, DTypeCode.COMPLEX, DTypeCode.BOOL})


class _ArrayInterfaceHolder:
    """Presents a View to NumPy as raw bytes and keeps the View alive as the array's base."""

    __slots__ = ("__array_interface__", "view")

    def __init__(self, view, itemsize):
        self.view = view
        self.__array_interface__ = {
            "version": 3,
            "shape": view.shape,
            "strides": view.strides,
            "typestr": f"|V{itemsize}",
            "data": (view.ptr, view.readonly),
        }


def to_numpy(x, *, copy=None):
    """A NumPy array of ``x`` (anything ``arrayport.from_dlpack`` accepts), zero-copy unless
    ``copy=True``. Read-only stays read-only. bfloat16 and the float8/6/4 formats become
    ``ml_dtypes`` arrays (``TypeError`` without ml_dtypes)."""
    import numpy as np

    view = x if isinstance(x, _core.View) else _core.from_dlpack(x)
    if not view.device.type.is_host_accessible:
        raise BufferError(f"to_numpy: the data is on {view.device}; NumPy reads host memory only")
    dtype = view.dtype
    if dtype.code in _NUMPY_DLPACK_CODES and dtype.lanes == 1 and dtype.name != "complex32":
        array = np.from_dlpack(view)
    else:
        target = dtype.to_numpy()
        array = np.asarray(_ArrayInterfaceHolder(view, target.itemsize)).view(target)
    return array.copy() if copy else array
