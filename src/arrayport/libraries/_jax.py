"""JAX: the converter (narrowing refused, strides JAX cannot hold copied, alignment checked),
its arrays in the matrix, its unusual arrays (deleted, sharded…)."""

from __future__ import annotations

import numpy as np

from arrayport import _core
from arrayport.libraries.toolkit import Kind, NotOffered, call, module
from arrayport.convert_steps import (
    check_copy,
    copied,
    device_name,
    ImmutableConsumerExport,
    placed,
    no_type_for,
)
from arrayport.devices import DeviceType


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
        if copy is False:
            raise BufferError(f"to(jax): JAX's DLPack import cannot take {view.dtype.name}, "
                              f"so it needs a copy, but copy=False")
        try:
            return jnp.asarray(_core.to_numpy(view, copy=True))
        except jax.errors.JaxRuntimeError as error:   # XLA's CPU has no float6
            raise no_type_for("to(jax)", "JAX's backend", view.dtype) from error
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
    if copy is False and view.device.type is DeviceType.CPU and view.ptr % 64:
        raise BufferError("to(jax): JAX shares only 64-byte aligned host memory and would "
                          "copy this, but copy=False")
    array = jnp.from_dlpack(ImmutableConsumerExport(view), copy=copy)
    if copy is False and view.size and array.unsafe_buffer_pointer() != view.ptr:
        raise BufferError("to(jax): JAX copied the data, but copy=False")
    return array


def _make_jax(base, layout):
    import jax.numpy as jnp
    # JAX arrays are immutable and always laid out row-major: they are read-only by nature and
    # have no transposed, sliced or negative-stride form to hand over.
    if layout not in ("contiguous", "0-d", "size-0", "read-only"):
        raise NotOffered(f"JAX arrays have no {layout} memory layout")
    array = jnp.asarray(base)
    if array.dtype != base.dtype:
        raise NotOffered(f"JAX without jax_enable_x64 has no {base.dtype}")
    return {"0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0]}.get(layout, lambda a: a)(array)


def _jax_kinds() -> list[Kind]:
    def deleted():
        import jax.numpy as jnp
        array = jnp.arange(3.0)
        array.delete()
        return array

    def sharded():
        import jax
        import jax.numpy as jnp
        devices = jax.devices("cpu")
        if len(devices) < 2:
            raise LookupError("one CPU device only (XLA_FLAGS="
                              "--xla_force_host_platform_device_count=2 gives two)")
        mesh = jax.sharding.Mesh(np.array(devices[:2]), ("x",))
        spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
        return jax.device_put(jnp.arange(8.0, dtype=jnp.float32), spec)

    def plain():
        import jax.numpy as jnp
        return jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)

    def flag():
        import jax.numpy as jnp
        return jnp.array([True, False])

    def bfloat16():
        import jax.numpy as jnp
        return jnp.arange(4.0, dtype=jnp.bfloat16)

    def reference(array):
        return np.asarray(array)

    return [Kind("jax", "plain", plain, reference, False),
            Kind("jax", "bool", flag, reference, False),
            Kind("jax", "bfloat16", bfloat16, reference, False, needs=("ml_dtypes",)),
            Kind("jax", "sharded", sharded, reference, False),
            Kind("jax", "deleted", deleted, None, False)]


# ---- what arrayport.libraries reads -----------------------------------------------------------

TARGETS = {"jax": _to_jax}
make = _make_jax
kinds = _jax_kinds


def routes():
    return {"dlpack": call("jax.numpy", "from_dlpack"),
            "__array__": call("jax.numpy", "asarray")}



# JAX arrays are immutable: read-only by nature.
CHECK = (lambda a: module("jax.numpy").asarray(a), lambda x: module("jax.numpy").from_dlpack(x),
         lambda a: module("jax.numpy").asarray(a))


def address_of(x):
    return x.unsafe_buffer_pointer()


def writable(x):
    return False


def host_values(x):
    return np.array(x)
