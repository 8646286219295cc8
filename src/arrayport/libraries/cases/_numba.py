"""numba-cuda: the converter to device arrays (numba ignores the CUDA Array Interface's
read- only flag: the read-only policy applies), its device arrays in the matrix.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._numba``."""

from __future__ import annotations

from arrayport.libraries.toolkit import INDEXING, NotOffered, module


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


make = _make_numba


def routes():
    return {"cuda_array_interface": _numba_cuda_array}


CHECK = (lambda a: module("numba.cuda").to_device(a), None, None)
