"""The CUDA Array Interface against a real driver and real GPU libraries (`pytest -m gpu`).
Skipped, with the reason, on machines without an NVIDIA GPU and PyTorch with CUDA."""

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

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
    assert cuda_driver.driver.locate_pointer(tensor.data_ptr()) == (2, tensor.device.index)


def test_driver_locates_pinned_host_memory():
    pinned = torch.zeros(16, pin_memory=True)
    assert cuda_driver.driver.locate_pointer(pinned.data_ptr()) == (3, 0)


def test_driver_refuses_pageable_host_memory():
    pageable = np.zeros(16)
    with pytest.raises(BufferError, match="is not memory CUDA knows"):
        cuda_driver.driver.locate_pointer(pageable.__array_interface__["data"][0])


def test_managed_memory_is_cuda_managed():
    cupy = pytest.importorskip("cupy")
    managed = cupy.cuda.malloc_managed(64)
    assert cuda_driver.driver.locate_pointer(managed.ptr) == (13, 0)


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
    # The consumer's stream waited for the producer's: the data is ready in its order.
    assert view.__cuda_array_interface__["stream"] == consumer.cuda_stream
    consumer.synchronize()


def test_no_host_pointer_arithmetic_on_device_views():
    view = ap.view(torch.zeros(3, device="cuda:0"))
    with pytest.raises(BufferError):
        memoryview(view)
    with pytest.raises(BufferError):
        np.asarray(view)  # never a silent device-to-host copy


# ---- converters on CUDA memory (issue 5) --------------------------------------------------

def test_to_torch_of_device_memory_shares_it_through_torch_from_dlpack():
    source = torch.arange(6, device=last_device(), dtype=torch.float32)
    view = ap.view(source)
    tensor = ap.to_torch(view)
    assert tensor.device == source.device and tensor.data_ptr() == source.data_ptr()
    tensor[0] = 42
    torch.cuda.synchronize()
    assert source[0].item() == 42


def test_to_numpy_refuses_device_memory_without_copying():
    with pytest.raises(BufferError, match="NumPy reads host memory only"):
        ap.to_numpy(torch.zeros(2, device=last_device()))


def test_to_cupy_shares_device_memory_and_copies_host_memory():
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(last_device().index):
        source = torch.arange(4, device=last_device(), dtype=torch.float32)
        array = ap.to(source, "cupy")
        assert array.data.ptr == source.data_ptr()
        host = ap.to(np.arange(3.0), "cupy")
        assert host.get().tolist() == [0.0, 1.0, 2.0]
        with pytest.raises(BufferError, match="CuPy arrays live in CUDA memory"):
            ap.to(np.arange(3.0), "cupy", copy=False)
