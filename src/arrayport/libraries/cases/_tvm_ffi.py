"""tvm-ffi: the converter (its tensors are always writable: the read-only policy applies),
its tensors in the matrix, its unusual tensors.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._tvm_ffi``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered, call, module
from arrayport.libraries.samples import numpy_layout


def _make_tvm_ffi(base, layout):
    import tvm_ffi

    import arrayport
    if layout == "read-only":
        raise NotOffered("tvm-ffi tensors have no read-only form")
    return tvm_ffi.from_dlpack(arrayport.view(numpy_layout(base, layout)))


def _tvm_ffi_kinds() -> list[Kind]:
    def tensor(array):
        def make():
            import tvm_ffi
            return tvm_ffi.from_dlpack(array())
        return make

    def reference(t):
        return np.from_dlpack(t)

    return [Kind("tvm_ffi", "plain", tensor(lambda: np.arange(6.0).reshape(2, 3)), reference),
            Kind("tvm_ffi", "transposed", tensor(lambda: np.arange(6.0).reshape(2, 3).T),
                 reference),
            Kind("tvm_ffi", "size-0", tensor(lambda: np.zeros((0, 2))), reference)]


make = _make_tvm_ffi
kinds = _tvm_ffi_kinds


def routes():
    return {"dlpack": call("tvm_ffi", "from_dlpack")}


def _check_make(a):
    import arrayport
    return module("tvm_ffi").from_dlpack(arrayport.view(a.copy()))


CHECK = (_check_make, lambda x: module("tvm_ffi").from_dlpack(x), None)
