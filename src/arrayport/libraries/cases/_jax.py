"""JAX: the converter (narrowing refused, strides JAX cannot hold copied, alignment
checked), its arrays in the matrix — on its CPU (the jax record) and on a GPU (the jax-gpu
record: the ``gpu_`` names below) — and its unusual arrays (deleted, sharded…).

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._jax``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered, call, module


def _on_cpu():
    """JAX's first CPU device: this record's arrays are host arrays wherever JAX's default
    device is a GPU (its GPU arrays are the jax-gpu record's)."""
    import jax
    return jax.default_device(jax.devices("cpu")[0])


def _make_jax(base, layout):
    import jax.numpy as jnp
    # JAX arrays are immutable and always laid out row-major: they are read-only by nature and
    # have no transposed, sliced or negative-stride form to hand over.
    if layout not in ("contiguous", "0-d", "size-0", "read-only"):
        raise NotOffered(f"JAX arrays have no {layout} memory layout")
    with _on_cpu():
        array = jnp.asarray(base)
    if array.dtype != base.dtype:
        raise NotOffered(f"JAX without jax_enable_x64 has no {base.dtype}")
    return {"0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0]}.get(layout, lambda a: a)(array)


def _jax_kinds() -> list[Kind]:
    def deleted():
        import jax.numpy as jnp
        with _on_cpu():
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
        with _on_cpu():
            return jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)

    def flag():
        import jax.numpy as jnp
        with _on_cpu():
            return jnp.array([True, False])

    def bfloat16():
        import jax.numpy as jnp
        with _on_cpu():
            return jnp.arange(4.0, dtype=jnp.bfloat16)

    def reference(array):
        return np.asarray(array)

    return [Kind("jax", "plain", plain, reference, False),
            Kind("jax", "bool", flag, reference, False),
            Kind("jax", "bfloat16", bfloat16, reference, False, needs=("ml_dtypes",)),
            Kind("jax", "sharded", sharded, reference, False),
            Kind("jax", "deleted", deleted, None, False)]


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


# ---- the jax-gpu record: JAX arrays on a GPU, exercised where JAX has a CUDA backend (the
# jax[cuda] plugin); not on the CUDA driver simulator, where JAX runs on its CPU.

def _gpu():
    jax = module("jax")
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        raise NotOffered(f"JAX {jax.__version__} has no GPU backend") from None


def gpu_unavailable():
    try:
        _gpu()
    except NotOffered as why:
        return str(why)
    return None


def gpu_make(base, layout):
    return module("jax").device_put(_make_jax(base, layout), _gpu())


def gpu_routes():
    def from_dlpack(x):
        return module("jax").dlpack.from_dlpack(x, device=_gpu())
    return {"dlpack": from_dlpack}


def gpu_via_arrayport(x):
    import arrayport
    return module("jax").device_put(arrayport.to(x, "jax"), _gpu())
