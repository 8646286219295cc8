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
    distribution: str | tuple[str, ...]  # where its version comes from (first installed)
    make: Callable[[np.ndarray, str], Any] | None = None   # (base, layout) -> its array
    # Direct routes as a consumer: protocol -> function taking what the protocol hands over.
    routes: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    via_arrayport: Callable[[Any], Any] | None = None      # the same target through arrayport
    note: str = ""                 # why a known library is not exercised
    # Where its arrays live: "host", or "cuda" (exercised only where a CUDA driver answers;
    # the matrix pairs a producer only with consumers of the same memory).
    memory: str = "host"


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


def _make_tensorflow(base, layout):
    import tensorflow as tf
    # TensorFlow tensors are immutable and row-major: read-only by nature, no strided form.
    if layout not in ("contiguous", "0-d", "size-0", "read-only"):
        raise NotOffered(f"TensorFlow tensors have no {layout} memory layout")
    try:
        tensor = tf.constant(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"TensorFlow: {exc}") from None
    return {"0-d": lambda t: t[1, 2], "size-0": lambda t: t[:0]}.get(layout, lambda t: t)(tensor)


_MLX_INDEXING = {
    "contiguous": lambda a: a, "transposed": lambda a: a.T, "sliced": lambda a: a[1:, 1:],
    "negative": lambda a: a[::-1], "0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0],
}


def _make_mlx(base, layout):
    import mlx.core as mx
    if layout not in _MLX_INDEXING:
        raise NotOffered(f"MLX arrays cannot be {layout}")
    try:
        array = mx.array(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"MLX: {exc}") from None
    if array.dtype.size != base.dtype.itemsize or (base.dtype.kind == "f" and array.dtype
                                                   not in (mx.float16, mx.float32,
                                                           mx.float64, mx.bfloat16)):
        raise NotOffered(f"MLX has no {base.dtype}")
    return _MLX_INDEXING[layout](array)


def _make_paddle(base, layout):
    import arrayport
    if layout not in _TORCH_INDEXING:
        raise NotOffered(f"PaddlePaddle tensors cannot be {layout}")
    try:
        tensor = arrayport.to(base, "paddle", copy=True)
    except TypeError as exc:
        raise NotOffered(str(exc)) from None
    return _TORCH_INDEXING[layout](tensor)


def _make_warp(base, layout):
    import arrayport
    if layout in ("0-d", "read-only"):
        raise NotOffered(f"Warp arrays cannot be {layout}")
    try:
        return arrayport.to(numpy_layout(base, layout), "warp")
    except TypeError as exc:
        raise NotOffered(str(exc)) from None


# The layouts of the 3 x 4 sample, made on a device by indexing device memory (a View, a
# numba device array): the host layout classes, but "read-only", which each library marks
# its own way (or not at all).
_DEVICE_INDEXING = {
    "contiguous": lambda a: a, "transposed": lambda a: a.T, "sliced": lambda a: a[1:, 1:],
    "negative": lambda a: a[::-1], "0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0],
}


def _make_arrayport_cuda(base, layout):
    import arrayport
    on_device = arrayport.view(base).copy(device="cuda:0")
    if layout == "read-only":
        return on_device.as_readonly()
    return _DEVICE_INDEXING[layout](on_device)


def _make_numba(base, layout):
    from numba import cuda
    if layout not in _DEVICE_INDEXING or layout == "0-d":   # numba indexes to a host scalar
        raise NotOffered(f"numba device arrays cannot be {layout}")
    try:
        if layout == "transposed":   # numba transposes device arrays with a kernel: copy the
            return cuda.to_device(base.T)   # F-ordered host layout across instead
        return _DEVICE_INDEXING[layout](cuda.to_device(base))
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise NotOffered(f"numba: {exc}") from None


def _make_cuda_core(base, layout):
    """A cuda-core StridedMemoryView of device memory (cuda-core's array-like: it exports
    DLPack, with the C exchange API, and the CUDA Array Interface)."""
    from cuda.core.utils import StridedMemoryView
    return StridedMemoryView.from_dlpack(_make_arrayport_cuda(base, layout), stream_ptr=1)


def _make_xarray(base, layout):
    import xarray as xr
    return xr.DataArray(numpy_layout(base, layout))


def _make_dask(base, layout):
    import dask.array as da
    # A lazy array over the NumPy layout: no memory of its own until computed.
    return da.from_array(numpy_layout(base, layout), chunks=-1)


# --- consumers --------------------------------------------------------------------------------

def _numpy_routes():
    return {"dlpack": lambda x: np.from_dlpack(x), "array_interface": np.asarray,
            "buffer": np.asarray, "__array__": np.asarray}


def _call(module: str, function: str, prepare: Callable[[Any], Any] = lambda x: x):
    """A consumer entry point, ``module.function(prepare(x))``, its module imported at the
    call (only the isolation worker calls it). ``function`` may be a dotted path."""
    def call(x):
        target: Any = importlib.import_module(module)
        for name in function.split("."):
            target = getattr(target, name)
        return target(prepare(x))
    return call


def warp_runtime():
    """Warp, its runtime started and quiet: wp.from_dlpack does not start it."""
    warp = importlib.import_module("warp")
    warp.config.quiet = True
    warp.init()
    return warp


def _warp_from_dlpack(x):
    return warp_runtime().from_dlpack(x)


_ROUTES = {
    "torch": {"dlpack": _call("torch", "from_dlpack")},
    "jax": {"dlpack": _call("jax.numpy", "from_dlpack"),
            "__array__": _call("jax.numpy", "asarray")},
    "tvm_ffi": {"dlpack": _call("tvm_ffi", "from_dlpack")},
    "array_api_strict": {"dlpack": _call("array_api_strict", "from_dlpack"),
                         "__array__": _call("array_api_strict", "asarray")},
    # TensorFlow's DLPack import takes capsules, not objects.
    "tensorflow": {"dlpack": _call("tensorflow", "experimental.dlpack.from_dlpack",
                                   lambda x: x.__dlpack__()),
                   "__array__": _call("tensorflow", "convert_to_tensor")},
    "mlx": {"dlpack": _call("mlx.core", "from_dlpack"), "__array__": _call("mlx.core", "array")},
    "paddle": {"dlpack": _call("paddle", "from_dlpack")},
    "warp": {"dlpack": _warp_from_dlpack},
    "xarray": {"__array__": _call("xarray", "DataArray")},
}


def _numba_cuda_array(x):
    from numba import cuda
    return cuda.as_cuda_array(x)


def _cuda_core_routes():
    """cuda-core's consumers, on the legacy default stream (1): the producer orders its
    pending work before it."""
    def from_dlpack(x):
        from cuda.core.utils import StridedMemoryView
        return StridedMemoryView.from_dlpack(x, stream_ptr=1)

    def from_cuda_array_interface(x):
        from cuda.core.utils import StridedMemoryView
        return StridedMemoryView.from_cuda_array_interface(x, stream_ptr=1)
    return {"dlpack": from_dlpack, "cuda_array_interface": from_cuda_array_interface}


def _arrayport_cuda_routes():
    from arrayport import View
    return {"dlpack": View.from_dlpack, "cuda_array_interface": View.from_cuda_array_interface}


def _arrayport_routes():
    from arrayport import View
    return {"dlpack": View.from_dlpack, "array_interface": View.from_array_interface,
            "buffer": View.from_buffer, "__array__": View.from_array}


def _to(target):
    def convert(x):
        import arrayport
        return arrayport.to(x, target)
    return convert


def _view(x):
    import arrayport
    return arrayport.view(x)


def _xarray_via_view(x):
    import xarray as xr

    import arrayport
    return xr.DataArray(arrayport.to_numpy(x))


CUDA_ONLY = "CUDA-only: arrayport has no CuPy adapter for the matrix yet"

LIBRARIES = [
    Library("numpy", "numpy", "numpy", _make_numpy, _numpy_routes(), _to("numpy")),
    Library("arrayport", "arrayport", "arrayport", _make_arrayport, _arrayport_routes(), _view),
    Library("torch", "torch", "torch", _make_torch, _ROUTES["torch"], _to("torch")),
    Library("jax", "jax", "jax", _make_jax, _ROUTES["jax"], _to("jax")),
    Library("pyarrow", "pyarrow", "pyarrow", _make_pyarrow, {}, _to("pyarrow.Tensor")),
    Library("tvm_ffi", "tvm_ffi", "apache-tvm-ffi", _make_tvm_ffi, _ROUTES["tvm_ffi"],
            _to("tvm_ffi")),
    Library("array_api_strict", "array_api_strict", "array-api-strict", _make_array_api_strict,
            _ROUTES["array_api_strict"], _call("array_api_strict", "from_dlpack", _view)),
    Library("ml_dtypes", "ml_dtypes", "ml_dtypes", note="dtypes for NumPy, not an array type"),
    Library("cupy", "cupy", "cupy", note=CUDA_ONLY),
    # CUDA memory: arrayport's own device Views, numba-cuda and cuda-core.
    Library("arrayport-cuda", "arrayport", "arrayport", _make_arrayport_cuda,
            _arrayport_cuda_routes(), _view, memory="cuda"),
    Library("numba", "numba.cuda", "numba-cuda", _make_numba,
            {"cuda_array_interface": _numba_cuda_array}, _to("numba"), memory="cuda"),
    Library("cuda_core", "cuda.core", "cuda-core", _make_cuda_core, _cuda_core_routes(),
            _to("cuda.core"), memory="cuda"),
    # PaddlePaddle before TensorFlow: imported after it, it kills the process (3.3 / 2.21);
    # the isolation worker would reorder them anyway, at the cost of a restart.
    Library("paddle", "paddle", "paddlepaddle", _make_paddle, _ROUTES["paddle"],
            _to("paddle")),
    Library("tensorflow", "tensorflow", ("tensorflow", "tensorflow-cpu"), _make_tensorflow,
            _ROUTES["tensorflow"],
            _to("tensorflow")),
    Library("mlx", "mlx.core", "mlx", _make_mlx, _ROUTES["mlx"], _to("mlx")),
    Library("warp", "warp", "warp-lang", _make_warp, _ROUTES["warp"], _to("warp")),
    Library("xarray", "xarray", "xarray", _make_xarray, _ROUTES["xarray"],
            _xarray_via_view),
    Library("dask", "dask.array", "dask", _make_dask,
            note="lazy arrays: a producer only (arrayport refuses them until computed)"),
]
BY_NAME = {library.name: library for library in LIBRARIES}


def installed_version(library: Library) -> str | None:
    """The installed version, found without importing the library (None when absent)."""
    try:  # the top-level package: finding a submodule would import its parent
        if importlib.util.find_spec(library.module.partition(".")[0]) is None:
            return None
    except (ImportError, ValueError):  # a broken parent package or a bad __spec__
        return None
    names = (library.distribution if isinstance(library.distribution, tuple)
             else (library.distribution,))
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed"


def cuda_devices() -> int:
    """How many CUDA devices the driver reports (0 without one): the libraries of CUDA
    memory are exercised only where it answers (a GPU, or the CUDA driver simulator)."""
    from arrayport import gpu
    from arrayport.devices import DeviceType
    try:
        return gpu.driver_for(DeviceType.CUDA).device_count()
    except BufferError:
        return 0


def exercisable(library: Library) -> bool:
    """Whether the matrix can run this library's cells on this machine."""
    return library.make is not None and (library.memory == "host" or cuda_devices() > 0)


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
    if type(x).__module__.startswith("cuda.core"):       # a StridedMemoryView
        return x.ptr
    import arrayport
    return arrayport.view(x).ptr


def is_writable(x) -> bool:
    """Whether a consumer's result lets the user write its memory."""
    if isinstance(x, np.ndarray):
        return bool(x.flags.writeable)
    module = type(x).__module__.split(".")[0]
    if module in ("jax", "jaxlib", "pyarrow", "tensorflow"):
        return False
    if module == "xarray":
        return is_writable(x.data)
    if module == "arrayport":
        return not x.readonly
    if module == "array_api_strict":
        return bool(np.asarray(x._array).flags.writeable)
    if module == "cuda":                                 # a cuda-core StridedMemoryView
        return not x.readonly
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
    if module == "xarray":
        return to_host_numpy(x.data)
    if module == "tensorflow":
        return _tensorflow_values(x)
    view = _strided_memory_view(x) if module == "cuda" else arrayport.view(x)
    if not view.device.type.is_host_accessible:          # device memory: copied across
        view = view.copy(device="cpu")
    return np.array(arrayport.to_numpy(view, copy=True))


def _strided_memory_view(x):
    """A View of a cuda-core StridedMemoryView, read from its fields: its own exports
    refuse the types it holds but cannot name in DLPack (bfloat16, float8), and the matrix
    judges the result, not the result's exports."""
    import arrayport
    from arrayport import _core
    strides = None if x.strides is None else tuple(s * x.dtype.itemsize for s in x.strides)
    device = (2, x.device_id) if x.is_device_accessible else (1, 0)
    return _core.view_from_pointer(x.ptr, tuple(x.shape), strides, arrayport.DType(x.dtype),
                                   readonly=x.readonly, owner=x, device=device,
                                   protocol="cuda.core")


def _tensorflow_values(x) -> np.ndarray:
    """A TensorFlow tensor's values, read through an operation (a gather), not only copied:
    TensorFlow imports memory of any alignment and aborts at the first operation on memory
    that is not 64-byte aligned — a result that kills its user is not a working exchange."""
    import tensorflow as tf
    try:
        flat = tf.gather(tf.reshape(x, [-1]), tf.range(tf.size(x)))
    except (tf.errors.OpError, TypeError):  # no gather kernel for the type (float8)
        return np.array(x.numpy())
    return np.array(flat.numpy()).reshape(tuple(x.shape))
