"""AMD's own Python bindings (hip-python, the ``rocm-bindings-hip`` wheel) as a peer on the
HIP runtime simulator (issue 54), as cuda-core and numba-cuda are for CUDA: memory, streams
and events made by them, read by arrayport, and arrayport's memory and streams used by
them. hip-python opens the process's libamdhip64.so, which ``pytest -m gpu`` makes the
simulator, so both sides talk to one runtime.

What hip-python speaks: the CUDA Array Interface for HIP memory (its ``DeviceArray``), with
NumPy's type spellings ("float32"); its functions take a pointer, a buffer or an object
with that interface — the buffer first, which a device View refuses, so they are handed
``view.ptr``."""

import ctypes
import gc

import numpy as np
import pytest

import arrayport as ap
from optional import optional_module

pytestmark = pytest.mark.gpu

from vendors import ROCM, leaks  # noqa: E402

hip = optional_module("rocm.bindings.hip")
if hip is None:
    pytest.skip("needs rocm-bindings-hip (AMD's HIP bindings, a Linux test dependency)",
                allow_module_level=True)
if ROCM.available() is not None:
    pytest.skip(ROCM.available(), allow_module_level=True)

VALUES = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) + 1
TO_DEVICE = hip.hipMemcpyKind.hipMemcpyHostToDevice
TO_HOST = hip.hipMemcpyKind.hipMemcpyDeviceToHost


def ok(answer):
    """hip-python answers (error, results...): the results, the error raised."""
    error, *results = answer if isinstance(answer, tuple) else (answer,)
    assert error == hip.hipError_t.hipSuccess, f"HIP error {error}"
    return results[0] if len(results) == 1 else results


@pytest.fixture
def slow():
    simulator = ROCM.simulator
    if simulator is None:
        pytest.skip("delays are the simulator's")
    before = leaks(ROCM)
    simulator.set_delay_us(30000)
    yield
    simulator.set_delay_us(2000)
    assert leaks(ROCM) == before, "device memory, events or streams left behind"


def test_a_hip_python_array_written_on_its_stream_is_read_after_the_write(slow):
    stream = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    consumer = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    memory = ok(hip.hipMalloc(VALUES.nbytes)).configure(typestr="float32", shape=VALUES.shape)
    zeros = np.zeros_like(VALUES)
    for _ in range(3):   # earlier work on the stream: the write comes late
        ok(hip.hipMemcpyAsync(memory, zeros, VALUES.nbytes, TO_DEVICE, stream))
    ok(hip.hipMemcpyAsync(memory, VALUES, VALUES.nbytes, TO_DEVICE, stream))
    # hip-python says no stream in its interface: its user names it, as with any producer
    # that orders nothing (the interface's stream entry, here: its handle)
    interface = dict(memory.__cuda_array_interface__, stream=int(stream))
    holder = type("Holder", (), {"__cuda_array_interface__": interface, "keep": memory})()
    view = ap.view(holder, stream=int(consumer))
    assert view.device == (10, 0) and view.dtype == "float32" and view.shape == (4, 6)
    assert view.ptr == int(memory)
    np.testing.assert_array_equal(ROCM.read_on(int(consumer), view), VALUES)
    del view, holder
    gc.collect()
    for made in (stream, consumer):
        ok(hip.hipStreamSynchronize(made))
        ok(hip.hipStreamDestroy(made))
    ok(hip.hipFree(memory))


def test_hip_pythons_own_array_is_a_rocm_view_not_host_memory():
    """Its DeviceArray offers the buffer protocol over device memory too: arrayport takes
    the interface that says device memory, never the buffer."""
    memory = ok(hip.hipMalloc(VALUES.nbytes)).configure(typestr="float32", shape=VALUES.shape)
    ok(hip.hipMemcpy(memory, VALUES, VALUES.nbytes, TO_DEVICE))
    view = ap.view(memory)
    assert view.protocol == "cuda_array_interface" and view.device == (10, 0)
    assert ap.to_numpy(view, copy=True).tolist() == VALUES.tolist()
    del view
    gc.collect()
    ok(hip.hipFree(memory))


def test_hip_python_reads_an_arrayport_copy_after_it_was_made_on_its_stream(slow):
    """arrayport's copy, pending on a hip-python stream; hip-python's event recorded after
    it and waited on by another of its streams: that stream reads the values."""
    producer = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    consumer = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    on_device = ap.view(VALUES).copy(device="rocm:0", stream=int(producer))
    event = ok(hip.hipEventCreateWithFlags(hip.hipEventDisableTiming))
    ok(hip.hipEventRecord(event, producer))
    ok(hip.hipStreamWaitEvent(consumer, event, 0))
    out = np.zeros_like(VALUES)
    ok(hip.hipMemcpyAsync(out, on_device.ptr, VALUES.nbytes, TO_HOST, consumer))
    ok(hip.hipStreamSynchronize(consumer))
    np.testing.assert_array_equal(out, VALUES)
    # and arrayport's export to hip-python's stream orders it by itself
    capsule_view = ap.from_dlpack(on_device.__dlpack__(stream=int(consumer)))
    np.testing.assert_array_equal(ROCM.read_on(int(consumer), capsule_view), VALUES)
    del on_device, capsule_view
    gc.collect()
    ok(hip.hipEventDestroy(event))
    for made in (producer, consumer):
        ok(hip.hipStreamSynchronize(made))
        ok(hip.hipStreamDestroy(made))


def test_a_device_view_refuses_hip_pythons_buffer_request_and_its_pointer_serves():
    on_device = ap.view(VALUES).copy(device="rocm:0")
    out = np.zeros_like(VALUES)
    with pytest.raises(BufferError, match="buffer protocol"):
        hip.hipMemcpy(out, on_device, VALUES.nbytes, TO_HOST)
    ok(hip.hipMemcpy(out, on_device.ptr, VALUES.nbytes, TO_HOST))
    np.testing.assert_array_equal(out, VALUES)
    del on_device
    gc.collect()


def test_memory_hip_python_pins_is_rocm_host_memory_read_in_place():
    pinned = ok(hip.hipHostMalloc(VALUES.nbytes, 0))
    ctypes.memmove(int(pinned), VALUES.ctypes.data, VALUES.nbytes)
    interface = {"version": 3, "shape": VALUES.shape, "typestr": "<f4",
                 "data": (int(pinned), False), "strides": None, "stream": None}
    holder = type("Holder", (), {"__cuda_array_interface__": interface})()
    view = ap.view(holder)
    assert view.device == (11, 0)
    array = ap.to_numpy(view)
    assert array.ctypes.data == int(pinned) and array.tolist() == VALUES.tolist()
    del view, array, holder
    gc.collect()
    ok(hip.hipHostFree(pinned))
