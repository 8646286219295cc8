"""Converters from anything ``arrayport.view`` accepts to other libraries' arrays.

``to_numpy``, ``to_torch`` and ``to(x, target)`` share memory whenever the target can hold
the data as it is, and copy only when ``copy=True`` asks or when ``copy=None`` and the
target cannot hold it (``copy=False`` then raises ``BufferError``). They route around the
targets' known traps instead of passing them on:

- PyTorch aborts the whole process on negative strides (a C++ exception nobody catches
  inside ``torch.from_dlpack``): arrayport copies first, or refuses with ``copy=False``.
- PyTorch and tvm-ffi tensors are always writable, and both ignore DLPack's READ_ONLY flag.
  ``readonly="copy"`` (the default) hands them a writable copy of read-only memory;
  ``readonly="share"`` shares it anyway with a ``ReadOnlySharedWarning``.
- NumPy has no bfloat16/float8/float6/float4: those become ``ml_dtypes`` arrays.
- JAX (without ``jax_enable_x64``) silently narrows 64-bit types to 32 bits: refused with
  ``TypeError`` instead; JAX refuses negative and zero strides: copied first; JAX copies
  unaligned memory even with ``copy=False``: detected and refused.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from arrayport import _core, errors, libraries
from arrayport.convert_steps import check_copy, unpacked
from arrayport.copy_watch import held_announcements, watching
from arrayport.devices import DeviceType

__all__ = ["ReadOnlySharedWarning", "TARGETS", "to", "to_numpy", "to_torch"]

# The public converters; their common case is decided in C (_core_convert.pxi), which calls
# to_numpy_general below and the torch adapter's to_torch_general for everything else.
to_numpy = _core.to_numpy
to_torch = _core.to_torch

View = _core.View
ReadOnlySharedWarning = errors.ReadOnlySharedWarning


# ---- NumPy -----------------------------------------------------------------------------------

class _ArrayInterfaceHolder:
    """Presents a View to NumPy as raw bytes and keeps the View alive as the array's base."""

    __slots__ = ("__array_interface__", "view")

    def __init__(self, view, itemsize):
        self.view = view
        self.__array_interface__ = {
            "version": 3,
            "shape": view.shape,
            "strides": view.strides,
            "typestr": f"|V{itemsize}",
            "data": (view.ptr, view.readonly),
        }


def to_numpy_general(x, *, copy=None):
    """``arrayport.to_numpy`` beyond its fast path (which lives in _core_convert.pxi)."""
    np = sys.modules.get("numpy")
    if np is not None and type(x) is np.ndarray and copy in (None, False, True):
        # Already NumPy's: itself, or NumPy's own copy (which holds any NumPy array, even
        # ones no View can describe: structured fields, byte-swapped, object…).
        return x.copy() if copy else x
    check_copy(copy, "to_numpy")
    view = x if type(x) is View else _core.view_or_copy(x, copy=copy)
    if view.device.type is not DeviceType.CPU:
        if view.device.type.is_host_accessible:
            view = _core.from_dlpack(view, device="cpu")  # pinned memory: relabelled, shared
        elif copy:
            view = view.copy(device="cpu")   # asked for: the one copy, device to host
            copy = False
        else:
            raise BufferError(f"to_numpy: the data is on {view.device}; NumPy reads host "
                              f"memory only: pass copy=True to copy it to the host (as "
                              f"PyTorch's .cpu() and CuPy's .get() do; never implicitly)")
    if copy:
        view = view.host_copy()
    view = unpacked(view, copy, "to_numpy")     # ml_dtypes holds float4/6 one per byte
    dtype = view.dtype
    if dtype.numpy_native:
        return _core.numpy_array_of(view)
    import numpy as np
    target = dtype.to_numpy()
    return np.asarray(_ArrayInterfaceHolder(view, target.itemsize)).view(target)



# ---- one entry point -------------------------------------------------------------------------

class _Targets(Mapping):
    """{target name: converter}: the names from the library records (arrayport.libraries),
    each converter read from its library's adapter when first asked for."""

    def __getitem__(self, target):
        library = libraries.for_target(target)
        if library is None:
            raise KeyError(target)
        return library.get("TARGETS")[target]

    def __iter__(self):
        return iter(libraries.target_names())

    def __len__(self):
        return len(libraries.target_names())


TARGETS = _Targets()


def to(x, target, /, **options):
    """``x`` as an array of the library ``target``, zero-copy where that library allows.

    The target library is imported only here.

    Parameters
    ----------
    x : object
        Anything ``arrayport.view`` accepts.
    target : str
        One of ``arrayport.convert.TARGETS``: ``"numpy"``, ``"torch"``, ``"jax"``,
        ``"cupy"``, ``"numba"`` (numba-cuda device arrays), ``"cuda.core"`` (a cuda-core
        ``StridedMemoryView``), ``"tvm_ffi"``, ``"pyarrow"``, ``"pyarrow.Tensor"``,
        ``"tensorflow"``, ``"mlx"``, ``"paddle"``, ``"warp"`` (every record's targets in
        ``arrayport.libraries``).
    **options
        The target converter's own: ``copy``, ``device``, ``stream``, ``readonly`` where the
        target has them.

    Returns
    -------
    object
        The target library's array.

    Raises
    ------
    ValueError
        An unknown ``target``.
    BufferError
        A copy would be needed with ``copy=False``, or the target cannot hold the data.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> b = ap.to(np.arange(3), "numpy")
    >>> b.tolist()
    [0, 1, 2]
    """
    library = libraries.for_target(target)
    if library is None:
        raise ValueError(f"to: unknown target {target!r}; choose one of "
                         f"{', '.join(TARGETS)}") from None
    module = library.module
    if module != "numpy" and sys.modules.get(module) is None:
        try:
            __import__(module)
        except ImportError as error:
            raise ImportError(f"to: target {target!r} needs {module}, which cannot be "
                              f"imported: {error}") from error
    if not watching():
        return library.get("TARGETS")[target](x, **options)
    with held_announcements():       # a refused conversion announces no copy
        return library.get("TARGETS")[target](x, **options)
