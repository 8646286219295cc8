"""JAX arrays on a GPU as a library of the matrix (its CPU arrays are the ``jax``
record's): exercised where JAX has a CUDA backend (the jax[cuda] plugin) — not on the CUDA
driver simulator, where JAX runs on its CPU.

The cases half (the command's and the tests'); the converters are the ``jax`` record's."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import NotOffered, module


def _gpu():
    import jax
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        raise NotOffered(f"JAX {jax.__version__} has no GPU backend") from None


def unavailable():
    try:
        _gpu()
    except NotOffered as why:
        return str(why)
    return None


def _make_jax_gpu(base, layout):
    import jax
    import jax.numpy as jnp
    device = _gpu()
    # JAX arrays are immutable and row-major (see the jax record's cases)
    if layout not in ("contiguous", "0-d", "size-0", "read-only"):
        raise NotOffered(f"JAX arrays have no {layout} memory layout")
    array = jax.device_put(jnp.asarray(base), device)
    if array.dtype != base.dtype:
        raise NotOffered(f"JAX without jax_enable_x64 has no {base.dtype}")
    return {"0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0]}.get(layout, lambda a: a)(array)


def _jax_gpu_routes():
    def from_dlpack(x):
        import jax
        return jax.dlpack.from_dlpack(x, device=_gpu())
    return {"dlpack": from_dlpack}


make = _make_jax_gpu
routes = _jax_gpu_routes


def via_arrayport(x):
    import jax

    import arrayport
    return jax.device_put(arrayport.to(x, "jax"), _gpu())


def address_of(x):
    return x.unsafe_buffer_pointer()


def writable(x):
    return False   # JAX arrays are immutable


def host_values(x):
    return np.array(module("jax").device_get(x))
