"""The array libraries arrayport knows: how to find them without importing them, and, for the
ones the matrix exercises, how each makes arrays (producer) and takes them in (consumer).

Adapters import their library inside each function: only the isolation worker calls them,
after it has imported the library itself (and survived doing so).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .samples import numpy_layout


class NotOffered(Exception):
    """The producer cannot make this dtype or layout class: the cell does not exist."""


@dataclass(frozen=True)
class Library:
    name: str                      # what reports call it
    module: str                    # what to import
    distribution: str              # where its version comes from
    make: Callable[[np.ndarray, str], Any] | None = None   # (base, layout) -> its array
    # Direct routes as a consumer: protocol -> function taking what the protocol hands over.
    routes: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    via_arrayport: Callable[[Any], Any] | None = None      # the same target through arrayport
    note: str = ""                 # why a known library is not exercised


# --- producers --------------------------------------------------------------------------------

def _make_numpy(base, layout):
    return numpy_layout(base, layout)


def _make_arrayport(base, layout):
    import arrayport
    return arrayport.view(numpy_layout(base, layout))


_TORCH_INDEXING = {
    "contiguous": lambda t: t, "transposed": lambda t: t.T, "sliced": lambda t: t[1:, 1:],
    "0-d": lambda t: t[1, 2], "size-0": lambda t: t[:0],
}


def _make_torch(base, layout):
    import arrayport
    if layout not in _TORCH_INDEXING:
        raise NotOffered(f"PyTorch tensors cannot be {layout}")
    # arrayport carries bfloat16/float8/unsigned types NumPy's own bridge refuses.
    tensor = arrayport.to_torch(base, copy=True)
    return _TORCH_INDEXING[layout](tensor)


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


def _make_pyarrow(base, layout):
    import pyarrow as pa
    # pyarrow.Tensor is Arrow's n-d array: immutable, so read-only by nature.
    if base.dtype == np.bool_:
        raise NotOffered("pyarrow.Tensor has no bool type (it stores NumPy bools as uint8)")
    try:
        return pa.Tensor.from_numpy(numpy_layout(base, layout))
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise NotOffered(f"pyarrow.Tensor: {exc}") from None


def _make_tvm_ffi(base, layout):
    import arrayport
    import tvm_ffi
    if layout == "read-only":
        raise NotOffered("tvm-ffi tensors have no read-only form")
    return tvm_ffi.from_dlpack(arrayport.view(numpy_layout(base, layout)))


def _make_array_api_strict(base, layout):
    import array_api_strict as xp
    try:
        array = xp.asarray(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"array-api-strict: {exc}") from None
    ops = {"contiguous": lambda a: a, "transposed": lambda a: a.T,
           "sliced": lambda a: a[1:, 1:], "negative": lambda a: xp.flip(a, axis=0),
           "0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0]}
    if layout not in ops:
        raise NotOffered(f"array-api-strict arrays cannot be {layout}")
    return ops[layout](array)


# --- consumers --------------------------------------------------------------------------------

def _numpy_routes():
    return {"dlpack": lambda x: np.from_dlpack(x), "array_interface": np.asarray,
            "buffer": np.asarray, "__array__": np.asarray}


def _torch_routes():
    def from_dlpack(x):
        import torch
        return torch.from_dlpack(x)
    return {"dlpack": from_dlpack}


def _jax_routes():
    def from_dlpack(x):
        import jax.numpy as jnp
        return jnp.from_dlpack(x)

    def asarray(x):
        import jax.numpy as jnp
        return jnp.asarray(x)
    return {"dlpack": from_dlpack, "__array__": asarray}


def _tvm_ffi_routes():
    def from_dlpack(x):
        import tvm_ffi
        return tvm_ffi.from_dlpack(x)
    return {"dlpack": from_dlpack}


def _array_api_strict_routes():
    def from_dlpack(x):
        import array_api_strict as xp
        return xp.from_dlpack(x)

    def asarray(x):
        import array_api_strict as xp
        return xp.asarray(x)
    return {"dlpack": from_dlpack, "__array__": asarray}


def _arrayport_routes():
    from arrayport import View
    return {"dlpack": View.from_dlpack, "array_interface": View.from_array_interface,
            "buffer": View.from_buffer, "__array__": View.from_array}


def _to(target):
    def convert(x):
        import arrayport
        return arrayport.to(x, target)
    return convert


def _via_view(module, function):
    def convert(x):
        import importlib

        import arrayport
        return getattr(importlib.import_module(module), function)(arrayport.view(x))
    return convert


def _view(x):
    import arrayport
    return arrayport.view(x)


CUDA_ONLY = "CUDA-only: exercised by the GPU matrix, which comes with the device layer"
NO_ADAPTER = "detected, not exercised yet (no adapter)"

LIBRARIES = [
    Library("numpy", "numpy", "numpy", _make_numpy, _numpy_routes(), _to("numpy")),
    Library("arrayport", "arrayport", "arrayport", _make_arrayport, _arrayport_routes(), _view),
    Library("torch", "torch", "torch", _make_torch, _torch_routes(), _to("torch")),
    Library("jax", "jax", "jax", _make_jax, _jax_routes(), _to("jax")),
    Library("pyarrow", "pyarrow", "pyarrow", _make_pyarrow, {}, _to("pyarrow.Tensor")),
    Library("tvm_ffi", "tvm_ffi", "apache-tvm-ffi", _make_tvm_ffi, _tvm_ffi_routes(),
            _to("tvm_ffi")),
    Library("array_api_strict", "array_api_strict", "array-api-strict", _make_array_api_strict,
            _array_api_strict_routes(), _via_view("array_api_strict", "from_dlpack")),
    Library("ml_dtypes", "ml_dtypes", "ml_dtypes", note="dtypes for NumPy, not an array type"),
    Library("cupy", "cupy", "cupy", note=CUDA_ONLY),
    Library("numba", "numba", "numba", note=CUDA_ONLY),
    Library("tensorflow", "tensorflow", "tensorflow", note=NO_ADAPTER),
    Library("mlx", "mlx", "mlx", note=NO_ADAPTER),
    Library("dask", "dask", "dask", note=NO_ADAPTER),
]
BY_NAME = {library.name: library for library in LIBRARIES}


def installed_version(library: Library) -> str | None:
    """The installed version, found without importing the library (None when absent)."""
    try:
        if importlib.util.find_spec(library.module) is None:
            return None
    except (ImportError, ValueError):  # a broken parent package or a bad __spec__
        return None
    try:
        return importlib.metadata.version(library.distribution)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def installed() -> list[tuple[Library, str]]:
    found = []
    for library in LIBRARIES:
        version = installed_version(library)
        if version is not None:
            found.append((library, version))
    return found


# --- looking at a result ----------------------------------------------------------------------

def element0_address(x) -> int:
    """The address of element [0, ..., 0] of any array a library above returns."""
    interface = getattr(x, "__array_interface__", None)
    if isinstance(x, np.ndarray) and interface is not None:
        return interface["data"][0]
    if hasattr(x, "data_ptr") and callable(x.data_ptr):  # torch
        return x.data_ptr()
    if hasattr(x, "unsafe_buffer_pointer"):              # jax
        return x.unsafe_buffer_pointer()
    import arrayport
    return arrayport.view(x).ptr


def is_writable(x) -> bool:
    """Whether a consumer's result lets the user write its memory."""
    if isinstance(x, np.ndarray):
        return bool(x.flags.writeable)
    module = type(x).__module__.split(".")[0]
    if module in ("jax", "jaxlib", "pyarrow"):
        return False
    if module == "arrayport":
        return not x.readonly
    if module == "array_api_strict":
        return bool(np.asarray(x._array).flags.writeable)
    return True  # torch and tvm-ffi tensors have no read-only state


def to_host_numpy(x) -> np.ndarray:
    """A NumPy copy of a result, for checking its values."""
    import arrayport
    if isinstance(x, np.ndarray):
        return np.array(x)
    module = type(x).__module__.split(".")[0]
    if module in ("jax", "jaxlib"):
        return np.array(x)
    if module == "array_api_strict":
        return np.array(x._array)
    if module == "pyarrow" and hasattr(x, "to_numpy"):
        return np.array(x.to_numpy())
    return np.array(arrayport.to_numpy(x, copy=True))
