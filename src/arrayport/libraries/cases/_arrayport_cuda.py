"""arrayport's own Views of CUDA device memory, as a library of the matrix (exercised where
a CUDA driver answers: a GPU, or the CUDA driver simulator).

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

from arrayport.libraries.toolkit import device_sample


def _arrayport_cuda_routes():
    from arrayport import View
    return {"dlpack": View.from_dlpack, "cuda_array_interface": View.from_cuda_array_interface}


# ---- what arrayport.libraries reads -----------------------------------------------------------

make = device_sample
routes = _arrayport_cuda_routes


def via_arrayport(x):
    import arrayport
    return arrayport.view(x)


def writable(x):
    return not x.readonly
