"""Reading a result a library returned — its element 0's address, whether its memory is
writable, its values on the host — as its adapter says (``address_of``, ``writable``,
``host_values``), else through ``arrayport.view``. For the command (the matrix, the
conformance check) and for adapters that read through another library's arrays (xarray's
``.data``); with the libraries, so that those adapters need nothing of ``arrayport.cli``.
"""

from __future__ import annotations

import numpy as np

from arrayport.libraries import for_type

__all__ = ["element0_address", "is_writable", "to_host_numpy"]


def _adapter_answer(x, name):
    library = for_type(type(x))
    return None if library is None else library.get(name)


def element0_address(x) -> int:
    """The address of element [0, ..., 0] of any array a library returns."""
    address_of = _adapter_answer(x, "address_of")
    if address_of is not None:
        return address_of(x)
    import arrayport
    return arrayport.view(x).ptr


def is_writable(x) -> bool:
    """Whether a consumer's result lets the user write its memory."""
    writable = _adapter_answer(x, "writable")
    if writable is not None:
        return writable(x)
    return True  # torch, tvm-ffi and the frameworks' tensors have no read-only state


def to_host_numpy(x) -> np.ndarray:
    """A NumPy copy of a result, for checking its values."""
    import arrayport
    host_values = _adapter_answer(x, "host_values")
    values = host_values(x) if host_values is not None else None
    if isinstance(values, np.ndarray):
        return values
    view = values if values is not None else arrayport.view(x)   # or the adapter's View
    if not view.device.type.is_host_accessible:          # device memory: copied across
        view = view.copy(device="cpu")
    return np.array(arrayport.to_numpy(view, copy=True))
