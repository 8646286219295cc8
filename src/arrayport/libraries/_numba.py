"""numba-cuda: the converter to device arrays (numba ignores the CUDA Array Interface's read-
only flag: the read-only policy applies), its device arrays in the matrix."""

from __future__ import annotations

from arrayport import _core
from arrayport.libraries.toolkit import INDEXING, NotOffered, module
from arrayport.convert_steps import (
    check_copy,
    check_readonly_policy,
    on_cuda,
    writable_for,
    no_type_for,
)


def _to_numba(x, *, copy=None, stream=None, readonly="copy"):
    """A numba-cuda device array. numba's arrays are always writable (it ignores the CUDA
    Array Interface's read-only flag), so the read-only policy applies."""
    from numba import cuda

    check_copy(copy, "to(numba)")
    check_readonly_policy(readonly, "to(numba)")
    view = on_cuda(_core.view_or_copy(x, stream=stream, copy=copy), copy, stream,
                    "to(numba)", "numba-cuda")
    if not view.dtype.numpy_native:   # numba's arrays would hold raw bytes ('V2')
        raise no_type_for("to(numba)", "numba-cuda", view.dtype)
    return cuda.as_cuda_array(writable_for(view, readonly, copy, "to(numba)", "numba-cuda"))


def _make_numba(base, layout):
    from numba import cuda
    if layout not in INDEXING or layout == "0-d":   # numba indexes to a host scalar
        raise NotOffered(f"numba device arrays cannot be {layout}")
    try:
        if layout == "transposed":   # numba transposes device arrays with a kernel: copy the
            return cuda.to_device(base.T)   # F-ordered host layout across instead
        return INDEXING[layout](cuda.to_device(base))
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise NotOffered(f"numba: {exc}") from None


def _numba_cuda_array(x):
    from numba import cuda
    return cuda.as_cuda_array(x)


# ---- what arrayport.libraries reads -----------------------------------------------------------

TARGETS = {"numba": _to_numba}
make = _make_numba


def routes():
    return {"cuda_array_interface": _numba_cuda_array}



CHECK = (lambda a: module("numba.cuda").to_device(a), None, None)
