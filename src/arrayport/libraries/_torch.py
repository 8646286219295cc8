"""PyTorch at run time: the converter beyond the core's fast path (to_torch). Its cases for
the command and the tests: ``arrayport.libraries.cases._torch``."""

from __future__ import annotations

import sys

from arrayport import _core
from arrayport.convert_steps import (
    check_copy,
    check_readonly_policy,
    copied,
    device_name,
    placed,
    writable_for,
    no_type_for,
)


def to_torch_general(x, *, device=None, copy=None, stream=None, readonly="copy"):
    """``arrayport.to_torch`` beyond its fast path (which lives in _core_convert.pxi)."""
    torch = sys.modules.get("torch")
    if (torch is not None and type(x) is torch.Tensor and device is None and not copy
            and stream is None):
        return x
    check_copy(copy, "to_torch")
    check_readonly_policy(readonly, "to_torch")
    view = placed(_core.view_or_copy(x, stream=stream, copy=copy), device_name(device), copy)
    dtype = view.dtype
    if not _core.torch_holds(dtype) or dtype.padded:
        raise no_type_for("to_torch", "PyTorch", dtype)
    if _core.has_negative_stride(view):
        view = copied(view, copy, "to_torch", "PyTorch cannot hold negative strides "
                          "(torch.from_dlpack aborts the process on them)")
    view = writable_for(view, readonly, copy, "to_torch", "PyTorch")
    return _core.torch_tensor_of(view)


TARGETS = {"torch": _core.to_torch}
