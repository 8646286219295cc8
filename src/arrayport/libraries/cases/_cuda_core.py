"""NVIDIA cuda-core: the converter to a StridedMemoryView, its views of device memory in the
matrix and in arrayport check, and reading one.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._cuda_core``."""

from __future__ import annotations

from arrayport import _core
from arrayport.libraries.toolkit import device_sample


def _make_cuda_core(base, layout):
    """A cuda-core StridedMemoryView of device memory (cuda-core's array-like: it exports
    DLPack, with the C exchange API, and the CUDA Array Interface)."""
    from cuda.core.utils import StridedMemoryView
    return StridedMemoryView.from_dlpack(device_sample(base, layout), stream_ptr=1)


def _cuda_core_routes():
    """cuda-core's consumers, on the legacy default stream (1): the producer orders its
    pending work before it."""
    def from_dlpack(x):
        from cuda.core.utils import StridedMemoryView
        return StridedMemoryView.from_dlpack(x, stream_ptr=1)

    def from_cuda_array_interface(x):
        # Unlike from_dlpack, this needs a current context (cuda-core's users make one
        # with Device().set_current() before any work, as its guide says)
        from cuda.core import Device
        from cuda.core.utils import StridedMemoryView
        Device().set_current()
        return StridedMemoryView.from_cuda_array_interface(x, stream_ptr=1)
    return {"dlpack": from_dlpack, "cuda_array_interface": from_cuda_array_interface}


def _strided_memory_view(x):
    """A View of a cuda-core StridedMemoryView, read from its fields: its own exports
    refuse the types it holds but cannot name in DLPack (bfloat16, float8), and the matrix
    judges the result, not the result's exports."""
    import arrayport
    strides = None if x.strides is None else tuple(s * x.dtype.itemsize for s in x.strides)
    device = (2, x.device_id) if x.is_device_accessible else (1, 0)
    return _core.view_from_pointer(x.ptr, tuple(x.shape), strides, arrayport.DType(x.dtype),
                                   readonly=x.readonly, owner=x, device=device,
                                   protocol="cuda.core")


def _cuda_core_view(x):
    from cuda.core.utils import StridedMemoryView
    return StridedMemoryView.from_dlpack(x, stream_ptr=1)


def _cuda_core_from_dlpack(x):
    """cuda-core's consumer: on the legacy default stream for device memory, with no
    stream (-1) for host memory, as cuda-core requires."""
    from cuda.core.utils import StridedMemoryView
    host = int(x.__dlpack_device__()[0]) in (1, 3, 11, 13)
    return StridedMemoryView.from_dlpack(x, stream_ptr=-1 if host else 1)


make = _make_cuda_core
routes = _cuda_core_routes


def _on_device(a, read_only=False):
    import arrayport
    on_device = arrayport.view(a).copy(device="cuda:0")
    return _cuda_core_view(on_device.as_readonly() if read_only else on_device)


CHECK = (_on_device, _cuda_core_from_dlpack, lambda a: _on_device(a, read_only=True))


def address_of(x):
    return x.ptr


def writable(x):
    return not x.readonly


def host_values(x):
    return _strided_memory_view(x)
