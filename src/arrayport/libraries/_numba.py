"""numba-cuda at run time: the converter to device arrays (numba ignores the CUDA Array
Interface's read-only flag: the read-only policy applies). Its cases for the command and the
tests: ``arrayport.libraries.cases._numba``."""

from __future__ import annotations

from arrayport import _core
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


TARGETS = {"numba": _to_numba}
