"""The policy the compiled core calls up to, installed into it once at import.

arrayport._core offers primitives (validate, import, export, host copies, stream hooks) and
imports nothing above itself. Where a primitive needs a decision that belongs to a Python
layer — which GPU driver serves a device, how to copy between devices, the device=/copy=
rules of from_dlpack, the converters' general paths, NumPy dispatch beyond the host fast
path — it calls the function installed here. The layers, who calls whom and where each
fact is declared: docs/architecture.md.
"""

from __future__ import annotations

from arrayport import _core, _import_rules, convert, copies, gpu, numpy_dispatch

_core.install_hooks(
    copy_view=copies.copy_view,
    driver_for=gpu.driver_for,
    from_dlpack_with_options=_import_rules.from_dlpack_with_options,
    ndarray_dlpack_fallback=_import_rules.ndarray_dlpack_fallback,
    to_numpy_general=convert.to_numpy_general,
    to_torch_general=convert.to_torch_general,
    array_ufunc=numpy_dispatch.array_ufunc,
    array_function=numpy_dispatch.array_function,
)
