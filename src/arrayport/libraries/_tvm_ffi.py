"""tvm-ffi at run time: the converter (its tensors are always writable: the read-only policy
applies). Its cases for the command and the tests: ``arrayport.libraries.cases._tvm_ffi``."""

from __future__ import annotations

from arrayport import _core
from arrayport.convert_steps import check_copy, check_readonly_policy, placed, writable_for


def _to_tvm_ffi(x, *, copy=None, stream=None, readonly="copy"):
    import tvm_ffi

    check_copy(copy, "to(tvm_ffi)")
    check_readonly_policy(readonly, "to(tvm_ffi)")
    view = placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    return tvm_ffi.from_dlpack(writable_for(view, readonly, copy, "to(tvm_ffi)", "tvm-ffi"))


TARGETS = {"tvm_ffi": _to_tvm_ffi}
