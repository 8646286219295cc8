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
import warnings

from arrayport import _core, errors
from arrayport.devices import Device, DeviceType
from arrayport.dtypes import DTypeCode

__all__ = ["ReadOnlySharedWarning", "TARGETS", "to", "to_numpy", "to_torch"]

# The public converters; their common case is decided in C (_core_convert.pxi), which calls
# the *_general functions below for everything else.
to_numpy = _core.to_numpy
to_torch = _core.to_torch

View = _core.View
_READONLY_POLICIES = ("copy", "share")


ReadOnlySharedWarning = errors.ReadOnlySharedWarning


# ---- shared steps ------------------------------------------------------------------------

def _check_copy(copy, who):
    if copy is not None and type(copy) is not bool:
        raise TypeError(f"{who}: copy must be True, False or None, got {copy!r}")


def _check_readonly_policy(readonly, who):
    if readonly not in _READONLY_POLICIES:
        raise ValueError(f"{who}: readonly must be 'copy' or 'share', got {readonly!r}")


def _copied(view, copy, who, why):
    """A contiguous copy of ``view`` on its own device, because the target cannot hold
    ``view`` as it is (``why``)."""
    if copy is False:
        raise BufferError(f"{who}: {why}, so sharing needs a copy, but copy=False")
    return view.copy()


def _unpacked(view, copy, who):
    """``view`` with packed sub-byte elements (float4, float6: several to a byte) unpacked
    one per byte into a copy, for a target that holds only whole-byte elements; any other
    View as it is."""
    if view.itemsize is not None:
        return view
    if copy is False:
        raise BufferError(f"{who}: packed {view.dtype.name} elements must be unpacked one per "
                          f"byte for this target, which needs a copy, but copy=False")
    return _core.unpacked_copy(view)


def no_type_for(who, library, dtype, what="type"):
    """The refusal of a target ``library`` that has no ``what`` for ``dtype``."""
    packed = "packed " if dtype.is_subbyte and not dtype.padded else ""
    return errors.TypeNotHeld(f"{who}: {library} has no {what} for {packed}{dtype.name}")


def _placed(view, device, copy):
    """``view`` on ``device`` (copying only where needed), then copied if copy=True."""
    if device is not None:
        target = Device(device)
        if view.device != target:
            from arrayport._import_rules import from_dlpack_with_options
            return from_dlpack_with_options(view, target, copy)
    if copy:
        return view.copy()
    return view


def _writable_for(view, readonly, copy, who, library):
    """Apply the read-only policy for a ``library`` whose arrays are always writable."""
    if not view.readonly:
        return view
    if readonly == "share":
        warnings.warn(f"{who}: sharing read-only memory with {library}, whose arrays are "
                      f"always writable; do not write to the result", ReadOnlySharedWarning,
                      stacklevel=_caller_stacklevel())
        return view
    return _copied(view, copy, who, f"the data is read-only and {library} arrays are "
                      f"always writable (pass readonly='share' to share it anyway)")


def _caller_stacklevel():
    """The stack level of the first frame outside arrayport (the user's call)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("arrayport"):
        frame, level = frame.f_back, level + 1
    return level


def _device_name(device):
    """Accept torch.device / jax devices by their string form."""
    return device if device is None or isinstance(device, (str, tuple, Device)) else str(device)


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
    _check_copy(copy, "to_numpy")
    view = x if type(x) is View else _core.view_or_copy(x, copy=copy)
    if view.device.type is not DeviceType.CPU:
        if not view.device.type.is_host_accessible:
            raise BufferError(f"to_numpy: the data is on {view.device}; NumPy reads host "
                              f"memory only")
        view = _core.from_dlpack(view, device="cpu")  # pinned memory: relabelled, shared
    if copy:
        view = view.host_copy()
    view = _unpacked(view, copy, "to_numpy")     # ml_dtypes holds float4/6 one per byte
    dtype = view.dtype
    if dtype.numpy_native:
        return _core.numpy_array_of(view)
    import numpy as np
    target = dtype.to_numpy()
    return np.asarray(_ArrayInterfaceHolder(view, target.itemsize)).view(target)


# ---- PyTorch ---------------------------------------------------------------------------------

def to_torch_general(x, *, device=None, copy=None, stream=None, readonly="copy"):
    """``arrayport.to_torch`` beyond its fast path (which lives in _core_convert.pxi)."""
    torch = sys.modules.get("torch")
    if (torch is not None and type(x) is torch.Tensor and device is None and not copy
            and stream is None):
        return x
    _check_copy(copy, "to_torch")
    _check_readonly_policy(readonly, "to_torch")
    view = _placed(_core.view_or_copy(x, stream=stream, copy=copy), _device_name(device), copy)
    dtype = view.dtype
    if not _core.torch_holds(dtype) or dtype.padded:
        raise no_type_for("to_torch", "PyTorch", dtype)
    if _core.has_negative_stride(view):
        view = _copied(view, copy, "to_torch", "PyTorch cannot hold negative strides "
                          "(torch.from_dlpack aborts the process on them)")
    view = _writable_for(view, readonly, copy, "to_torch", "PyTorch")
    return _core.torch_tensor_of(view)


# ---- JAX -------------------------------------------------------------------------------------

class _ImmutableConsumerExport:
    """Hands JAX a legacy capsule even for read-only memory: JAX asks for legacy capsules
    (no READ_ONLY flag), and its arrays are immutable, so it never writes through them."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def __dlpack_device__(self):
        return self._view.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _core.legacy_capsule_for_immutable_consumer(self._view, stream)


def _is_dense_permutation(view):
    """Whether the View's elements fill their memory without gaps in some axis order (a
    transposition of a C-contiguous array: all JAX's DLPack import takes)."""
    axes = sorted((abs(s), n) for s, n in zip(view.element_strides, view.shape) if n > 1)
    expected = 1
    for stride, extent in axes:
        if stride != expected:
            return False
        expected *= extent
    return True


def _to_jax(x, *, device=None, copy=None, stream=None):
    import jax
    import jax.numpy as jnp

    _check_copy(copy, "to(jax)")
    view = _placed(_core.view_or_copy(x, stream=stream, copy=copy), _device_name(device), copy)
    if view.dtype.is_subbyte:
        # JAX's DLPack import takes no float4/float6 (packed: "only default layout"; a
        # legacy capsule cannot say padded), not even its own export: in through NumPy.
        if copy is False:
            raise BufferError(f"to(jax): JAX's DLPack import cannot take {view.dtype.name}, "
                              f"so it needs a copy, but copy=False")
        try:
            return jnp.asarray(to_numpy(view, copy=True))
        except jax.errors.JaxRuntimeError as error:   # XLA's CPU has no float6
            raise no_type_for("to(jax)", "JAX's backend", view.dtype) from error
    numpy_dtype = view.dtype.to_numpy()
    if jax.dtypes.canonicalize_dtype(numpy_dtype) != numpy_dtype:
        raise TypeError(f"to(jax): JAX would narrow {view.dtype.name} to "
                        f"{jax.dtypes.canonicalize_dtype(numpy_dtype)} (enable "
                        f"jax_enable_x64, or convert explicitly)")
    if any(s <= 0 for s, n in zip(view.element_strides, view.shape) if n > 1):
        view = _copied(view, copy, "to(jax)", "JAX cannot hold negative or zero strides")
    elif not _is_dense_permutation(view):
        view = _copied(view, copy, "to(jax)", "JAX holds only strides that permute a "
                       "contiguous layout (its import raises on gaps between elements)")
    if copy is False and view.device.type is DeviceType.CPU and view.ptr % 64:
        raise BufferError("to(jax): JAX shares only 64-byte aligned host memory and would "
                          "copy this, but copy=False")
    array = jnp.from_dlpack(_ImmutableConsumerExport(view), copy=copy)
    if copy is False and view.size and array.unsafe_buffer_pointer() != view.ptr:
        raise BufferError("to(jax): JAX copied the data, but copy=False")
    return array


# ---- tvm-ffi, CuPy, pyarrow ------------------------------------------------------------------

def _to_tvm_ffi(x, *, copy=None, stream=None, readonly="copy"):
    import tvm_ffi

    _check_copy(copy, "to(tvm_ffi)")
    _check_readonly_policy(readonly, "to(tvm_ffi)")
    view = _placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    return tvm_ffi.from_dlpack(_writable_for(view, readonly, copy, "to(tvm_ffi)", "tvm-ffi"))


def _to_cupy(x, *, copy=None, stream=None, readonly="copy"):
    import cupy

    _check_copy(copy, "to(cupy)")
    _check_readonly_policy(readonly, "to(cupy)")
    view = _core.view_or_copy(x, stream=stream, copy=copy)
    if view.device.type in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        view = _placed(view, None, copy)
        return cupy.from_dlpack(_writable_for(view, readonly, copy, "to(cupy)", "CuPy"))
    if copy is False:
        raise BufferError(f"to(cupy): the data is on {view.device}; CuPy arrays live in "
                          f"CUDA memory, so this needs a copy, but copy=False")
    return cupy.asarray(to_numpy(view))


def _on_cuda(view, copy, stream, who, library):
    """``view`` in CUDA device memory: as it is, or copied to the current CUDA device."""
    if view.device.type in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        return _placed(view, None, copy)
    if copy is False:
        raise BufferError(f"{who}: the data is on {view.device}; {library} arrays live in "
                          f"CUDA memory, so this needs a copy, but copy=False")
    from arrayport import gpu
    ordinal = gpu.driver_for(DeviceType.CUDA).current_device()
    return view.copy(device=Device(DeviceType.CUDA, ordinal), stream=stream)


def _to_numba(x, *, copy=None, stream=None, readonly="copy"):
    """A numba-cuda device array. numba's arrays are always writable (it ignores the CUDA
    Array Interface's read-only flag), so the read-only policy applies."""
    from numba import cuda

    _check_copy(copy, "to(numba)")
    _check_readonly_policy(readonly, "to(numba)")
    view = _on_cuda(_core.view_or_copy(x, stream=stream, copy=copy), copy, stream,
                    "to(numba)", "numba-cuda")
    if not view.dtype.numpy_native:   # numba's arrays would hold raw bytes ('V2')
        raise no_type_for("to(numba)", "numba-cuda", view.dtype)
    return cuda.as_cuda_array(_writable_for(view, readonly, copy, "to(numba)", "numba-cuda"))


def _to_cuda_core(x, *, copy=None, stream=None):
    """A cuda-core ``StridedMemoryView`` (host or device memory; read-only stays read-only),
    ordered for ``stream`` (None: the legacy default stream)."""
    from cuda.core.utils import StridedMemoryView

    _check_copy(copy, "to(cuda.core)")
    view = _placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    on_device = not view.device.type.is_host_accessible
    result = StridedMemoryView.from_dlpack(   # host memory: no stream (-1)
        view, stream_ptr=(1 if stream is None else stream) if on_device else -1)
    try:
        result.dtype   # cuda-core takes some types in that it cannot name (float8)
    except TypeError:
        raise no_type_for("to(cuda.core)", "cuda-core", view.dtype) from None
    return result


def _pyarrow_type(view, who):
    import pyarrow as pa

    dtype = view.dtype
    if dtype.code in (DTypeCode.COMPLEX, DTypeCode.BOOL) or not dtype.numpy_native:
        raise no_type_for(who, "Arrow", dtype, "fixed-width type")
    return pa.from_numpy_dtype(dtype.to_numpy())


def _to_pyarrow(x, *, copy=None):
    """A ``pyarrow.Array`` (one dimension; Arrow arrays are immutable, so read-only memory
    is shared)."""
    import pyarrow as pa

    _check_copy(copy, "to(pyarrow)")
    view = _placed(_core.view_or_copy(x, copy=copy), None, copy)
    if view.ndim != 1:
        raise ValueError(f"to(pyarrow): an Arrow array has one dimension, the data has "
                         f"{view.ndim}; use target 'pyarrow.Tensor'")
    arrow_type = _pyarrow_type(view, "to(pyarrow)")
    if not view.is_c_contiguous:
        view = _copied(view, copy, "to(pyarrow)", "Arrow arrays are contiguous")
    return pa.Array.from_buffers(arrow_type, view.size, [None, pa.py_buffer(view)])


def _to_pyarrow_tensor(x, *, copy=None):
    """A ``pyarrow.Tensor`` (n-dimensional, strided, immutable)."""
    import pyarrow as pa

    _check_copy(copy, "to(pyarrow.Tensor)")
    view = _placed(_core.view_or_copy(x, copy=copy), None, copy)
    _pyarrow_type(view, "to(pyarrow.Tensor)")
    if any(s < 0 for s in view.element_strides):
        view = _copied(view, copy, "to(pyarrow.Tensor)",
                          "Arrow tensors cannot hold negative strides")
    return pa.Tensor.from_numpy(to_numpy(view))


# ---- one entry point -------------------------------------------------------------------------

TARGETS = {
    "numpy": to_numpy,
    "torch": to_torch,
    "jax": _to_jax,
    "cupy": _to_cupy,
    "numba": _to_numba,
    "cuda.core": _to_cuda_core,
    "tvm_ffi": _to_tvm_ffi,
    "pyarrow": _to_pyarrow,
    "pyarrow.Tensor": _to_pyarrow_tensor,
}
# The module each target imports, where it is not the target's first word.
_TARGET_MODULES = {"pyarrow.Tensor": "pyarrow", "mlx": "mlx.core", "numba": "numba.cuda"}


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
        ``"tensorflow"``, ``"mlx"``, ``"paddle"``, ``"warp"``.
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
    try:
        convert = TARGETS[target]
    except (KeyError, TypeError):
        raise ValueError(f"to: unknown target {target!r}; choose one of "
                         f"{', '.join(TARGETS)}") from None
    module = _TARGET_MODULES.get(target, target)
    if module != "numpy" and sys.modules.get(module) is None:
        try:
            __import__(module)
        except ImportError as error:
            raise ImportError(f"to: target {target!r} needs {module}, which cannot be "
                              f"imported: {error}") from error
    return convert(x, **options)


# The frameworks' converters live in their own module (which uses the steps above).
from arrayport import convert_frameworks as _frameworks  # noqa: E402

TARGETS.update({"tensorflow": _frameworks.to_tensorflow, "mlx": _frameworks.to_mlx,
                "paddle": _frameworks.to_paddle, "warp": _frameworks.to_warp})
