# Included by _core.pyx. The policy the core calls *up* to, installed by the Python
# layer at import (arrayport/_policy.py calls install_hooks): the core imports nothing above
# itself — not the GPU wing (gpu/: copies, drivers), _import_rules, convert, the library
# adapters or numpy_dispatch — so the layers stay a tree (tests/test_architecture.py greps
# for it). Each hook is a plain Python callable; until arrayport's __init__ has installed
# them (it does so before returning), a call raises RuntimeError naming the hook.

cdef object _copy_view_hook = None            # gpu.copies.copy_view(view, device, stream, who)
cdef object _driver_for_hook = None           # gpu.driver_for(device_type) -> driver or None
cdef object _from_dlpack_options_hook = None  # _import_rules.from_dlpack_with_options
cdef object _ndarray_fallback_hook = None     # _import_rules.ndarray_dlpack_fallback(x)
cdef object _to_numpy_general_hook = None     # convert.to_numpy_general(x, copy=)
cdef object _to_torch_general_hook = None     # libraries._torch.to_torch_general(x, **opts)
cdef object _array_ufunc_hook = None          # numpy_dispatch.array_ufunc
cdef object _array_function_hook = None       # numpy_dispatch.array_function
cdef object _require_fix_hook = None          # contracts.require_fix(view, spec, failure, ...)
cdef object _reduce_view_hook = None          # pickling.reduce_view(view, protocol)
cdef object _share_hook = None                # shared.share(view, readonly)
cdef object _from_shared_hook = None          # shared.from_shared(handle)
cdef object _unasked_copy_hook = None         # copy_watch.unasked_core_copy(who, why), watched


def install_hooks(*, copy_view, driver_for, from_dlpack_with_options, ndarray_dlpack_fallback,
                  to_numpy_general, to_torch_general, array_ufunc, array_function,
                  require_fix, reduce_view, share, from_shared, unasked_copy):
    """Install the Python layer's policy functions the core calls up to (every one is
    required: the core has no defaults of its own)."""
    global _copy_view_hook, _driver_for_hook, _from_dlpack_options_hook
    global _ndarray_fallback_hook, _to_numpy_general_hook, _to_torch_general_hook
    global _array_ufunc_hook, _array_function_hook, _require_fix_hook, _reduce_view_hook
    global _share_hook, _from_shared_hook, _unasked_copy_hook
    hooks = dict(copy_view=copy_view, driver_for=driver_for,
                 from_dlpack_with_options=from_dlpack_with_options,
                 ndarray_dlpack_fallback=ndarray_dlpack_fallback,
                 to_numpy_general=to_numpy_general, to_torch_general=to_torch_general,
                 array_ufunc=array_ufunc, array_function=array_function,
                 require_fix=require_fix, reduce_view=reduce_view, share=share,
                 from_shared=from_shared, unasked_copy=unasked_copy)
    for name, function in hooks.items():
        if not callable(function):
            raise TypeError(f"install_hooks: {name} must be callable, got "
                            f"{type(function).__name__}")
    _copy_view_hook, _driver_for_hook = copy_view, driver_for
    _from_dlpack_options_hook = from_dlpack_with_options
    _ndarray_fallback_hook = ndarray_dlpack_fallback
    _to_numpy_general_hook, _to_torch_general_hook = to_numpy_general, to_torch_general
    _array_ufunc_hook, _array_function_hook = array_ufunc, array_function
    _require_fix_hook, _reduce_view_hook = require_fix, reduce_view
    _share_hook, _from_shared_hook = share, from_shared
    _unasked_copy_hook = unasked_copy


# Whether anyone watches unasked copies (arrayport.copy_watch owns the rule and sets this):
# off, a copy the core resolves for a converter costs one branch more.
cdef bint _copies_watched = False


def set_copies_watched(bint watched):
    global _copies_watched
    _copies_watched = watched


def copies_watched():
    return _copies_watched


cdef inline object _hook(object function, str name):
    if function is None:
        raise RuntimeError(f"arrayport._core: the {name} hook is not installed (import "
                           f"arrayport, not arrayport._core alone)")
    return function


cdef object _driver_for(int32_t device_type):
    """The GPU driver for ``device_type`` through the Python layer's driver choice."""
    return _hook(_driver_for_hook, "driver_for")(device_type)
