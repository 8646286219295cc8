"""The policy the compiled core calls up to, installed into it once at import.

arrayport._core offers primitives (validate, import, export, host copies, stream hooks) and
imports nothing above itself. Where a primitive needs a decision that belongs to a Python
layer — which GPU driver serves a device, how to copy between devices, the device=/copy=
rules of from_dlpack, the converters' general paths, NumPy dispatch beyond the host fast
path — it calls the function installed here. The layers, who calls whom and where each
fact is declared: docs/architecture.md.
"""

from __future__ import annotations

from arrayport import _core, convert, gpu, libraries

# copies, _import_rules, numpy_dispatch, contracts, pickling, shared and the torch adapter
# are imported on their first use, so that
# ``import arrayport`` stays as light as before the hooks: each hook below is the policy
# function itself once its module is loaded.


def _copy_view(view, device=None, stream=None, who="copy"):
    from arrayport.gpu.copies import copy_view
    return copy_view(view, device, stream, who)


def _from_dlpack_with_options(x, device, copy, stream=None):
    from arrayport._import_rules import from_dlpack_with_options
    return from_dlpack_with_options(x, device, copy, stream)


def _to_torch_general(x, **options):
    from arrayport.libraries._torch import to_torch_general
    return to_torch_general(x, **options)


def _ndarray_dlpack_fallback(x):
    from arrayport._import_rules import ndarray_dlpack_fallback
    return ndarray_dlpack_fallback(x)


def _array_ufunc(ufunc, method, inputs, kwargs):
    from arrayport.numpy_dispatch import array_ufunc
    return array_ufunc(ufunc, method, inputs, kwargs)


def _array_function(func, types, args, kwargs):
    from arrayport.numpy_dispatch import array_function
    return array_function(func, types, args, kwargs)


def _require_fix(view, spec, failure, copy, stream, name, why=None):
    from arrayport.contracts import require_fix
    return require_fix(view, spec, failure, copy, stream, name, why)


def _reduce_view(view, protocol):
    from arrayport.pickling import reduce_view
    return reduce_view(view, protocol)


def _share(view, readonly=None):
    from arrayport.shared import share
    return share(view, readonly)


def _from_shared(handle):
    from arrayport.shared import from_shared
    return from_shared(handle)


def _unasked_copy(who, why, by_nature, stand_in=False):
    from arrayport.copy_watch import unasked_core_copy
    return unasked_core_copy(who, why, by_nature, stand_in)


# What each library's arrays need put back, from its record (arrayport.libraries).
_core.install_producer_quirks(libraries.producer_quirks())

_core.install_hooks(
    copy_view=_copy_view,
    driver_for=gpu.driver_for,
    from_dlpack_with_options=_from_dlpack_with_options,
    ndarray_dlpack_fallback=_ndarray_dlpack_fallback,
    to_numpy_general=convert.to_numpy_general,
    to_torch_general=_to_torch_general,
    array_ufunc=_array_ufunc,
    array_function=_array_function,
    require_fix=_require_fix,
    reduce_view=_reduce_view,
    share=_share,
    from_shared=_from_shared,
    unasked_copy=_unasked_copy,
)
