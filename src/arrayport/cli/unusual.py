"""Each library's unusual arrays — the kinds a fast path is most likely to get wrong — with
what they hold, told by the library itself.

A kind is one array a library can make (PyTorch's conjugate and negative views, grad,
sparse, meta, nested and quantized tensors; a deleted or sharded JAX array; NumPy's
broadcasts, structured, object and datetime arrays; pyarrow's nulls and chunks…), with its
``reference``: the library's own conversion to NumPy with every lazy bit resolved
(``t.detach().resolve_conj().resolve_neg().numpy()`` and friends), or None when the array
has no faithful strided form at all — its memory is not its values (masked elements,
nulls, lazy storage) — so no exchange may share it. NumPy arrays DLPack cannot describe
(structured, object, datetime, byte-swapped) do have a reference: NumPy holds them, and
arrayport must refuse them, not misread them. ``writable`` says whether writing through a
zero-copy alias is allowed.

Used by the differential test (tests/test_unusual_kinds.py: every arrayport route against
the reference), by ``arrayport check`` (the library's own DLPack export against it) and by
``arrayport matrix`` (producer cases). Factories import their library when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Kind:
    library: str                          # the module that makes it
    name: str
    make: Callable[[], Any]
    reference: Callable[[Any], np.ndarray] | None   # None: no faithful strided form
    writable: bool = True                 # may a zero-copy alias be written?
    needs: tuple[str, ...] = ()           # other modules it needs (ml_dtypes…)

    @property
    def label(self) -> str:
        return f"{self.library}:{self.name}"


# ---- PyTorch -----------------------------------------------------------------------------------

def _torch_reference(t) -> np.ndarray:
    return t.detach().resolve_conj().resolve_neg().numpy()


def _torch_kinds() -> list[Kind]:
    def torch():
        import torch as module
        return module

    def quiet(make):
        def made():
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return make()
        return made

    def bfloat16_reference(t):
        import ml_dtypes
        return t.detach().view(torch().int16).numpy().view(ml_dtypes.bfloat16)

    def inference():
        with torch().inference_mode():
            return torch().arange(6.0).reshape(2, 3)

    def parameter():
        return torch().nn.Parameter(torch().arange(4.0))

    kinds = [
        ("plain", lambda: torch().arange(6.0).reshape(2, 3), _torch_reference, True),
        ("conj", lambda: torch().conj(torch().tensor([-1 + 1j, -2 + 2j, 3 - 3j])),
         _torch_reference, True),
        ("neg", lambda: torch()._neg_view(torch().tensor([1.0, 2.0, 3.0])),
         _torch_reference, True),
        ("conj-imag", lambda: torch().tensor([1 + 2j, 3 - 4j]).conj().imag,
         _torch_reference, True),
        ("conj-detached", lambda: torch().tensor([1 + 2j, 3 - 4j]).conj().detach(),
         _torch_reference, True),
        ("requires-grad", lambda: torch().arange(4.0, requires_grad=True),
         _torch_reference, False),
        ("parameter", parameter, _torch_reference, False),
        ("expanded", lambda: torch().arange(3.0).reshape(3, 1).expand(3, 4),
         _torch_reference, False),
        ("channels-last", lambda: torch().arange(24.0).reshape(1, 2, 3, 4).to(
            memory_format=torch().channels_last), _torch_reference, True),
        ("transposed", lambda: torch().arange(6.0).reshape(2, 3).T, _torch_reference, True),
        ("inference-mode", inference, _torch_reference, True),
        ("0-d", lambda: torch().tensor(3.5), _torch_reference, True),
        ("size-0", lambda: torch().zeros(0, 3), _torch_reference, True),
        ("bool", lambda: torch().tensor([True, False, True]), _torch_reference, True),
        ("sparse-coo", lambda: torch().eye(3).to_sparse(), None, False),
        ("sparse-csr", quiet(lambda: torch().eye(3).to_sparse_csr()), None, False),
        ("meta", lambda: torch().zeros(3, device="meta"), None, False),
        ("nested", quiet(lambda: torch().nested.nested_tensor(
            [torch().zeros(2), torch().zeros(3)])), None, False),
        ("quantized", quiet(lambda: torch().quantize_per_tensor(
            torch().zeros(3), 0.1, 0, torch().quint8)), None, False),
    ]
    result = [Kind("torch", name, make, reference, writable)
              for name, make, reference, writable in kinds]
    result.append(Kind("torch", "bfloat16", lambda: torch().arange(4.0).to(torch().bfloat16),
                       bfloat16_reference, True, needs=("ml_dtypes",)))
    return result


# ---- JAX ---------------------------------------------------------------------------------------

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


# ---- NumPy -------------------------------------------------------------------------------------

def _numpy_kinds() -> list[Kind]:
    def as_strided_writable():
        return np.lib.stride_tricks.as_strided(np.arange(3.0), shape=(4, 3), strides=(0, 8))

    def unaligned():
        return np.frombuffer(bytearray(33), dtype=np.float64, count=4, offset=1)

    def byteswapped():
        return np.arange(4, dtype=">i4")

    def masked_clean():
        return np.ma.masked_array(np.arange(3.0), mask=[False, False, False])

    def masked():
        return np.ma.masked_array(np.arange(3.0), mask=[False, True, False])

    def matrix():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asmatrix(np.arange(4.0).reshape(2, 2))

    def bfloat16():
        import ml_dtypes
        return np.arange(4.0).astype(ml_dtypes.bfloat16)

    def int4():
        import ml_dtypes
        return np.arange(4).astype(ml_dtypes.int4)

    def same(array):
        return np.asarray(array)

    kinds = [
        ("broadcast", lambda: np.broadcast_to(np.arange(3.0), (4, 3)), same, False),
        ("as-strided-writable", as_strided_writable, same, True),
        ("negative", lambda: np.arange(6.0)[::-1], same, True),
        ("fortran", lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)), same, True),
        ("read-only", lambda: np.frombuffer(bytes(16), dtype=np.float64), same, False),
        ("unaligned", unaligned, same, True),
        ("byteswapped", byteswapped, same, True),
        ("structured", lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]), same, True),
        ("structured-field", lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])["b"],
         same, True),
        ("object", lambda: np.array([1, "a", None], dtype=object), same, True),
        ("datetime", lambda: np.array([0, 1, 2], dtype="datetime64[s]"), same, True),
        ("masked-clean", masked_clean, lambda a: np.asarray(a.data), True),
        ("masked", masked, None, False),
        ("matrix", matrix, same, True),
        ("0-d", lambda: np.array(2.5), same, True),
        ("size-0", lambda: np.zeros((0, 3)), same, True),
    ]
    result = [Kind("numpy", name, make, reference, writable)
              for name, make, reference, writable in kinds]
    result += [Kind("numpy", "bfloat16", bfloat16, same, True, needs=("ml_dtypes",)),
               Kind("numpy", "int4", int4, same, True, needs=("ml_dtypes",))]
    return result


# ---- pyarrow -----------------------------------------------------------------------------------

def _pyarrow_kinds() -> list[Kind]:
    def pa():
        import pyarrow as module
        return module

    def zero_copy_numpy(array):
        return array.to_numpy(zero_copy_only=True)

    return [
        Kind("pyarrow", "plain", lambda: pa().array([1, 2, 3], type=pa().int64()),
             zero_copy_numpy, False),
        Kind("pyarrow", "sliced", lambda: pa().array(list(range(10)), type=pa().int32()).slice(3, 4),
             zero_copy_numpy, False),
        Kind("pyarrow", "nulls", lambda: pa().array([1, None, 3]), None, False),
        Kind("pyarrow", "bool", lambda: pa().array([True, False, True]), None, False),
        Kind("pyarrow", "chunked", lambda: pa().chunked_array([[1, 2], [3]]),
             lambda a: a.to_numpy(), False),
        Kind("pyarrow", "tensor", lambda: pa().Tensor.from_numpy(np.arange(6.0).reshape(2, 3)),
             lambda t: t.to_numpy(), False),
        Kind("pyarrow", "timestamps", lambda: pa().array([0, 1], type=pa().timestamp("s")),
             None, False),
    ]


# ---- tvm-ffi -----------------------------------------------------------------------------------

def _tvm_ffi_kinds() -> list[Kind]:
    def tensor(array):
        def make():
            import tvm_ffi
            return tvm_ffi.from_dlpack(array())
        return make

    def reference(t):
        return np.from_dlpack(t)

    return [Kind("tvm_ffi", "plain", tensor(lambda: np.arange(6.0).reshape(2, 3)), reference),
            Kind("tvm_ffi", "transposed", tensor(lambda: np.arange(6.0).reshape(2, 3).T),
                 reference),
            Kind("tvm_ffi", "size-0", tensor(lambda: np.zeros((0, 2))), reference)]


KINDS_BY_LIBRARY: dict[str, Callable[[], list[Kind]]] = {
    "numpy": _numpy_kinds,
    "torch": _torch_kinds,
    "jax": _jax_kinds,
    "pyarrow": _pyarrow_kinds,
    "tvm_ffi": _tvm_ffi_kinds,
}
# Frameworks that can kill each other in one process: their kinds are tested one framework
# per process (tests/test_frameworks.py), never beside the others.
FRAMEWORK_MODULES = ("tensorflow", "mlx.core", "paddle", "warp")


def _register_frameworks() -> None:
    from . import unusual_frameworks as frameworks
    KINDS_BY_LIBRARY.update({
        "tensorflow": frameworks.tensorflow_kinds, "mlx.core": frameworks.mlx_kinds,
        "paddle": frameworks.paddle_kinds, "warp": frameworks.warp_kinds,
        "dask.array": frameworks.dask_kinds, "xarray": frameworks.xarray_kinds})


def kinds_of(library: str) -> list[Kind]:
    """The unusual kinds ``library`` (a module name) can make; [] for one not listed."""
    factory = KINDS_BY_LIBRARY.get(library)
    return factory() if factory is not None else []


def kind(label: str) -> Kind:
    """The kind called ``library:name``."""
    library, _, name = label.partition(":")
    for candidate in kinds_of(library):
        if candidate.name == name:
            return candidate
    raise KeyError(f"no unusual kind {label!r}")


_register_frameworks()
