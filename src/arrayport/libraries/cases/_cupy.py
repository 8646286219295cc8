"""CuPy: its device arrays in the matrix and in ``arrayport check`` (CUDA memory: exercised
where a GPU answers; CuPy does not run on the CUDA driver simulator — it needs the CUDA
runtime and compiles its kernels with NVRTC).

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._cupy``."""

from __future__ import annotations

from arrayport.libraries.toolkit import INDEXING, NotOffered, call, module


def _make_cupy(base, layout):
    import cupy
    if layout == "read-only":
        raise NotOffered("CuPy arrays have no read-only state")
    try:
        array = cupy.asarray(base)
    except (TypeError, ValueError) as exc:   # types CuPy does not hold (bfloat16, float8)
        raise NotOffered(f"CuPy: {exc}") from None
    return INDEXING[layout](array)


make = _make_cupy


def routes():
    # cupy.asarray reads the CUDA Array Interface (and DLPack, and host arrays by copy):
    # the matrix's interface route is it, given an object that offers only the interface.
    return {"dlpack": call("cupy", "from_dlpack"),
            "cuda_array_interface": call("cupy", "asarray")}


CHECK = (lambda a: module("cupy").asarray(a), lambda x: module("cupy").from_dlpack(x), None)


def address_of(x):
    return x.data.ptr


def writable(x):
    return True   # CuPy has no read-only arrays


def host_values(x):
    return module("cupy").asnumpy(x)
