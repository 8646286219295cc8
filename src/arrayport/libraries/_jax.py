"""JAX at run time: the converter (narrowing refused, strides JAX cannot hold copied,
alignment checked). Its cases for the command and the tests:
``arrayport.libraries.cases._jax``."""

from __future__ import annotations

from arrayport import _core
from arrayport.copy_watch import unasked_copy
from arrayport.convert_steps import (
    check_copy,
    copied,
    device_name,
    ImmutableConsumerExport,
    placed,
    no_type_for,
)
from arrayport.devices import DeviceType
from arrayport.dtypes import DTypeCode


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

    check_copy(copy, "to(jax)")
    view = placed(_core.view_or_copy(x, stream=stream, copy=copy), device_name(device), copy)
    if view.dtype.is_subbyte:
        # JAX's DLPack import takes no float4/float6 (packed: "only default layout"; a
        # legacy capsule cannot say padded), not even its own export: in through NumPy.
        why = f"JAX's DLPack import cannot take {view.dtype.name}"
        unasked_copy(copy, "to(jax)", why, f"to(jax): {why}, so it needs a copy, but copy=False")
        try:
            return jnp.asarray(_core.to_numpy(view, copy=True))
        except jax.errors.JaxRuntimeError as error:   # XLA's CPU has no float6
            raise no_type_for("to(jax)", "JAX's backend", view.dtype) from error
    if view.dtype.code == DTypeCode.BCOMPLEX:
        # JAX has no complex of bfloat16 (its DLPack import: "unknown type code 18"; NumPy's
        # ml_dtypes array of it is not a JAX value either).
        raise no_type_for("to(jax)", "JAX", view.dtype)
    numpy_dtype = view.dtype.to_numpy()
    if jax.dtypes.canonicalize_dtype(numpy_dtype) != numpy_dtype:
        raise TypeError(f"to(jax): JAX would narrow {view.dtype.name} to "
                        f"{jax.dtypes.canonicalize_dtype(numpy_dtype)} (enable "
                        f"jax_enable_x64, or convert explicitly)")
    if any(s <= 0 for s, n in zip(view.element_strides, view.shape) if n > 1):
        view = copied(view, copy, "to(jax)", "JAX cannot hold negative or zero strides")
    elif not _is_dense_permutation(view):
        view = copied(view, copy, "to(jax)", "JAX holds only strides that permute a "
                       "contiguous layout (its import raises on gaps between elements)")
    if view.device.type is DeviceType.CPU and view.ptr % 64:
        unasked_copy(copy, "to(jax)", "JAX shares only 64-byte aligned host memory",
                     "to(jax): JAX shares only 64-byte aligned host memory and would copy "
                     "this, but copy=False")
    array = jnp.from_dlpack(ImmutableConsumerExport(view), copy=copy)
    if copy is False and view.size and array.unsafe_buffer_pointer() != view.ptr:
        raise BufferError("to(jax): JAX copied the data, but copy=False")
    return array


TARGETS = {"jax": _to_jax}
