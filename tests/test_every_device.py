"""Every device type DLPack names (all 19: 1.3's sixteen and TPU, TPU host and Ascend, added
after its tag) round-trips its metadata through arrayport —
__dlpack_device__, capsules both kinds, repr — even where arrayport cannot touch the
memory; touching it gives a clear error (BufferError, or AttributeError for protocol
attributes that do not apply), never a crash and never a host read of device memory."""

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import hip as hip_driver
from arrayport.gpu.library import NativeLibrary
from producer import spec

DEVICE_TYPES = list(ap.DeviceType)
HOST_READABLE = {ap.DeviceType.CPU, ap.DeviceType.CUDA_HOST, ap.DeviceType.ROCM_HOST,
                 ap.DeviceType.TPU_HOST}
CUDA_KINDS = {ap.DeviceType.CUDA, ap.DeviceType.CUDA_HOST, ap.DeviceType.CUDA_MANAGED}


@pytest.fixture
def without_rocm(monkeypatch):
    monkeypatch.setattr(hip_driver.driver, "library", NativeLibrary(
        "rocm", "the HIP runtime", ("libarrayport-no-such-hip.so",),
        hip_driver.HipUnavailable, {}, lambda library: None))


def device_id(device_type):
    single = {ap.DeviceType.CPU, ap.DeviceType.CUDA_HOST, ap.DeviceType.ROCM_HOST,
              ap.DeviceType.CUDA_MANAGED, ap.DeviceType.TPU_HOST}
    return 0 if device_type in single else 3


@pytest.mark.parametrize("device_type", DEVICE_TYPES, ids=lambda t: t.label)
def test_metadata_round_trips(producer, live, device_type):
    device = (int(device_type), device_id(device_type))
    view = ap.from_dlpack(producer.capsule(spec(shape=(2, 5), device=device)))
    assert view.__dlpack_device__() == device and view.device == device
    assert view.device.type is device_type and str(view.device) in repr(view)
    for max_version in ((1, 3), None):
        again = ap.from_dlpack(view.__dlpack__(max_version=max_version))
        assert again.device == device and again.ptr == view.ptr
        assert again.shape == (2, 5) and again.strides == view.strides
        info = producer.inspect(view.__dlpack__(max_version=max_version))
        assert (info.device_type, info.device_id) == device
    # Exporting to the same device, with or without naming it, shares the memory.
    same = ap.from_dlpack(view.__dlpack__(max_version=(1, 3), dl_device=device))
    assert same.ptr == view.ptr
    del view, again, same
    assert live.delta() == {"producer_deleter_calls": 1}


@pytest.mark.parametrize("device_type", [t for t in DEVICE_TYPES if t not in HOST_READABLE],
                         ids=lambda t: t.label)
def test_touching_memory_arrayport_cannot_reach_is_a_clear_error(
        producer, device_type, without_cuda, without_rocm):
    device = (int(device_type), device_id(device_type))
    view = ap.from_dlpack(producer.capsule(spec(device=device)))
    label = str(view.device)
    with pytest.raises(BufferError, match=label):
        memoryview(view)
    with pytest.raises(BufferError, match=label):
        view.host_copy()
    with pytest.raises(BufferError, match=f"^copy: cannot copy {label} memory to cpu"):
        view.copy(device="cpu")
    with pytest.raises(BufferError):
        view.copy()
    with pytest.raises(AttributeError, match="host memory only"):
        view.__array_interface__
    with pytest.raises((TypeError, BufferError)):
        np.asarray(view)  # never a silent device read
    with pytest.raises(BufferError, match="NumPy reads host memory only"):
        ap.to_numpy(view)
    if device_type in CUDA_KINDS or device_type == ap.DeviceType.ROCM:
        # metadata only (HIP memory too: ROCm's libraries read this interface for it)
        assert view.__cuda_array_interface__["data"][0] == view.ptr
    else:
        with pytest.raises(AttributeError, match="CUDA-accessible memory only"):
            view.__cuda_array_interface__


@pytest.mark.parametrize("device_type", sorted(HOST_READABLE), ids=lambda t: t.label)
def test_host_readable_kinds_are_read_and_copied_on_the_host(producer, device_type):
    view = ap.from_dlpack(producer.capsule(spec(device=(int(device_type), 0))))
    copy = view.copy(device="cpu")
    assert copy.device == (1, 0) and copy.is_copy
    assert bytes(memoryview(copy)) == bytes(memoryview(view.host_copy()))
