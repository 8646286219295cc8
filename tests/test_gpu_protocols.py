"""The CUDA Array Interface against a real driver and real GPU libraries (`pytest -m gpu`).
Skipped, with the reason, on machines without an NVIDIA GPU and PyTorch with CUDA."""

import numpy as np
import pytest

import arrayport as ap
from arrayport import _cuda_driver

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (PyTorch sees none)", allow_module_level=True)


def last_device():
    return torch.device("cuda", torch.cuda.device_count() - 1)


class CAIObject:
    def __init__(self, interface, keep):
        self.__cuda_array_interface__ = interface
        self.keep = keep


def test_driver_locates_device_memory_on_its_own_gpu():
    tensor = torch.arange(6, device=last_device(), dtype=torch.float32)
    assert _cuda_driver.locate_pointer(tensor.data_ptr()) == (2, tensor.device.index)


def test_driver_locates_pinned_host_memory():
    pinned = torch.zeros(16, pin_memory=True)
    assert _cuda_driver.locate_pointer(pinned.data_ptr()) == (3, 0)


def test_driver_refuses_pageable_host_memory():
    pageable = np.zeros(16)
    with pytest.raises(BufferError, match="is not memory CUDA knows"):
        _cuda_driver.locate_pointer(pageable.__array_interface__["data"][0])


def test_managed_memory_is_cuda_managed():
    cupy = pytest.importorskip("cupy")
    managed = cupy.cuda.malloc_managed(64)
    assert _cuda_driver.locate_pointer(managed.ptr) == (13, 0)


def test_pytorch_cai_export_imports_on_the_right_device():
    tensor = torch.arange(12, device=last_device(), dtype=torch.int32).reshape(3, 4)[:, ::2]
    view = ap.View.from_cuda_array_interface(tensor)
    assert view.device == (2, tensor.device.index)
    assert view.ptr == tensor.data_ptr() and view.shape == (3, 2)
    assert view.strides == tuple(s * 4 for s in tensor.stride())


def test_pytorch_consumes_the_view_export_zero_copy():
    tensor = torch.zeros(8, device=last_device())
    view = ap.view(tensor)
    again = torch.as_tensor(CAIObject(view.__cuda_array_interface__, view),
                            device=tensor.device)
    again[3] = 7
    assert tensor[3].item() == 7


def test_cupy_and_numba_consume_the_view():
    tensor = torch.arange(5, device="cuda:0", dtype=torch.float64)
    view = ap.view(tensor)
    cupy = pytest.importorskip("cupy")
    as_cupy = cupy.asarray(view)
    assert as_cupy.data.ptr == tensor.data_ptr()
    numba_cuda = pytest.importorskip("numba.cuda")
    as_numba = numba_cuda.as_cuda_array(view)
    assert as_numba.__cuda_array_interface__["data"][0] == tensor.data_ptr()


def test_producer_stream_wait_enqueues_without_error():
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    tensor = torch.ones(4, device="cuda:0")
    d = dict(tensor.__cuda_array_interface__, stream=producer.cuda_stream)
    view = ap.view(CAIObject(d, tensor), stream=consumer.cuda_stream)
    assert view.__cuda_array_interface__["stream"] == producer.cuda_stream
    consumer.synchronize()


def test_no_host_pointer_arithmetic_on_device_views():
    view = ap.view(torch.zeros(3, device="cuda:0"))
    with pytest.raises(BufferError):
        memoryview(view)
    with pytest.raises(BufferError):
        np.asarray(view)  # never a silent device-to-host copy
