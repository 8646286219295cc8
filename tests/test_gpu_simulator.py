"""arrayport's CUDA half on the CUDA driver simulator (issue 32), `pytest -m gpu`: device
memory the host cannot read, contexts per thread, streams that run asynchronously, events
per context. Producers are device arrays made through the driver API
(tests/helpers/sim_arrays.py). On a machine with a GPU, ARRAYPORT_GPU=hardware runs the
same tests on the real driver. The main suite runs this file in a process of its own
(tests/test_gpu_suite.py)."""

import threading

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from on_simulator import (SIMULATED, needs_simulator, nothing_leaks,  # noqa: E402,F401
                          simulator, slow_streams, without_kernels)
from sim_arrays import Context, DeviceArray, Stream  # noqa: E402

VALUES = np.arange(24, dtype=np.float32).reshape(4, 6)


def in_fresh_thread(call):
    """``call()`` on a thread that has never touched CUDA (no current context)."""
    outcome = []

    def run():
        try:
            outcome.append(("returned", call()))
        except Exception as error:   # the caller judges
            outcome.append(("raised", error))
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    kind, value = outcome[0]
    if kind == "raised":
        raise value
    return value


# ---- where memory lives -------------------------------------------------------------------------

@pytest.mark.parametrize("kind, expected", [
    pytest.param("device", (2, 1), marks=needs_two_devices), ("pinned", (3, 0)),
    ("managed", (13, 0))])
def test_the_driver_locates_memory_from_a_thread_without_a_context(kind, expected,
                                                                   nothing_leaks):
    # Class 1: a pointer lookup on a thread that never touched CUDA.
    array = DeviceArray(VALUES, device=1 if kind == "device" else 0, kind=kind)
    try:
        assert in_fresh_thread(lambda: cuda_driver.driver.locate_pointer(array.ptr)) \
            == expected
    finally:
        array.free()


def test_pageable_host_memory_is_not_cuda_memory():
    with pytest.raises(BufferError, match="is not memory CUDA knows"):
        in_fresh_thread(lambda: cuda_driver.driver.locate_pointer(VALUES.ctypes.data))


def test_the_host_cannot_read_device_memory_without_a_copy(nothing_leaks):
    array = DeviceArray(VALUES, device=0)
    try:
        view = ap.view(array)
        assert str(view.device) == "cuda:0"
        with pytest.raises((BufferError, TypeError), match="cuda"):
            np.asarray(view)
        with pytest.raises(BufferError):
            memoryview(view)
        np.testing.assert_array_equal(ap.to_numpy(view.copy(device="cpu")), VALUES)
    finally:
        array.free()


# ---- copies -----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("device", ["cuda:0", pytest.param("cuda:1", marks=needs_two_devices)])
def test_host_to_device_and_back(layout, device, nothing_leaks):
    source = {"contiguous": VALUES, "transposed": VALUES.T, "strided": VALUES[::2, ::-3]}[layout]
    on_device = ap.view(source).copy(device=device)
    assert str(on_device.device) == device
    np.testing.assert_array_equal(ap.to_numpy(on_device.copy(device="cpu")), source)
    del on_device


def test_pinned_copies_from_a_thread_without_a_context(nothing_leaks):
    # Class 1: cuMemHostAlloc with no current context is error 201 on the driver.
    pinned = in_fresh_thread(lambda: ap.view(VALUES).copy(device="cuda_host"))
    assert str(pinned.device) == "cuda_host"
    np.testing.assert_array_equal(ap.to_numpy(pinned), VALUES)
    in_fresh_thread(lambda: pinned.copy(device="cpu"))   # and freed from anywhere
    del pinned


@needs_two_devices
def test_peer_copy_of_a_source_with_pending_work(slow_streams, nothing_leaks):
    # Class 2: the event must belong to the source's context, where it is recorded; and
    # the destination's default stream (not the source device's) must be the one waiting.
    stream = Stream(0)
    array = DeviceArray(VALUES, device=0, stream=stream, busy=3)
    try:
        copied = ap.view(array).copy(device="cuda:1")
        np.testing.assert_array_equal(ap.to_numpy(copied.copy(device="cpu")), VALUES)
        del copied
    finally:
        stream.synchronize()
        array.free()
        stream.close()


@needs_two_devices
def test_work_pending_on_device_0s_default_stream_is_waited_for_by_device_1s(slow_streams,
                                                                           nothing_leaks):
    # Issue 40 (a bug the suite missed): the legacy default stream (1) of device 0 and
    # that of device 1 are two streams; a copy on cuda:1's must wait for cuda:0's work.
    array = DeviceArray(VALUES, device=0, busy=3)      # written on device 0's stream 1
    try:
        view = ap.view(array)
        assert view.__cuda_array_interface__["stream"] == 1
        copied = view.copy(device="cuda:1")            # on device 1's stream 1
        np.testing.assert_array_equal(ap.to_numpy(copied.copy(device="cpu")), VALUES)
        del copied, view
    finally:
        array.read()
        array.free()


# ---- stream order ------------------------------------------------------------------------------

def copy_to_host_of_pending(sync):
    """A device array whose values are still being written on the producer's stream,
    copied to the host by arrayport, with implicit synchronization on or off."""
    stream = Stream(0)
    array = DeviceArray(VALUES, device=0, stream=stream, busy=3)
    try:
        view = ap.view(array)
        if sync:
            host = view.copy(device="cpu")
        else:
            with ap.no_implicit_sync():
                host = view.copy(device="cpu")
        return ap.to_numpy(host).copy()
    finally:
        stream.synchronize()
        array.free()
        stream.close()


def test_the_race_is_lost_without_synchronization_and_won_with_events(slow_streams,
                                                                      nothing_leaks):
    np.testing.assert_array_equal(copy_to_host_of_pending(sync=True), VALUES)
    if SIMULATED:   # on hardware, the race may be won by luck
        assert not np.array_equal(copy_to_host_of_pending(sync=False), VALUES)


@needs_simulator
def test_a_cai_import_with_a_stream_needs_no_host_synchronization(nothing_leaks):
    producer, consumer = Stream(0), Stream(0)
    array = DeviceArray(VALUES, device=0, stream=producer)
    try:
        before = simulator.counters()
        view = ap.view(array, stream=int(consumer))
        after = simulator.counters()
        assert after["host_synchronizations"] == before["host_synchronizations"]
        assert after["cuStreamWaitEvent"] == before["cuStreamWaitEvent"] + 1
        del view
    finally:
        producer.synchronize()
        array.free()
        producer.close()
        consumer.close()


def test_the_producer_stream_waits_for_copies_of_what_it_handed_over(slow_streams,
                                                                      nothing_leaks):
    # Class 3: after ap.view(obj, stream=C) the View remembered only C; a copy on stream X
    # made C wait, never the producer's stream P, which could then overwrite the data
    # while X still read it.
    producer, consumer, copier = Stream(0), Stream(0), Stream(0)
    array = DeviceArray(VALUES, device=0, stream=producer)
    busy = DeviceArray(np.zeros(4, np.uint8), device=0, stream=copier, busy=2)  # X is late
    try:
        view = ap.view(array, stream=int(consumer))
        copied = view.copy(stream=int(copier))               # enqueued behind X's work
        with Context(0):                                     # the producer writes again
            array.driver.cuMemsetD8Async(array.ptr, 0xFF, array.nbytes, producer.handle)
        copier.synchronize()
        np.testing.assert_array_equal(ap.to_numpy(copied.copy(device="cpu")), VALUES)
        del copied, view
    finally:
        producer.synchronize()
        busy.free()
        array.free()
        for stream in (producer, consumer, copier):
            stream.close()


@needs_simulator
def test_rows_farther_apart_than_the_device_allows_are_copied_row_by_row(nothing_leaks,
                                                                         without_kernels):
    # Class 4: a 2-D transfer whose pitch passes CU_DEVICE_ATTRIBUTE_MAX_PITCH is refused
    # by the driver (CUDA_ERROR_INVALID_VALUE); such rows go one transfer each (the DMA
    # path: where the strided-copy kernel runs, it packs them instead).
    # One row a transfer has no pitch: a plain transfer, which no pitch limit bounds — rows
    # wider than the largest pitch too (a 2-D transfer of them, pitch = width, was refused).
    wide = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    on_device = ap.view(wide).copy(device="cuda:0")
    strided = on_device[:, :16]
    for max_pitch in (128, 32):                   # rows 256 bytes apart, 64 bytes wide
        simulator.set_max_pitch(max_pitch)
        try:
            before = simulator.counters()
            np.testing.assert_array_equal(ap.to_numpy(strided.copy(device="cpu")),
                                          wide[:, :16])
            after = simulator.counters()
            assert after["cuMemcpyAsync"] - before["cuMemcpyAsync"] == 8
            assert after["cuMemcpy2DAsync"] == before["cuMemcpy2DAsync"]
        finally:
            simulator.set_max_pitch(0)
    del on_device, strided


@needs_two_devices
def test_a_strided_peer_copy_on_the_destination_s_stream(slow_streams, nothing_leaks):
    # Class 4: a strided source on device 0, still being written, copied to device 1 on a
    # stream of device 1: packed on device 0 after the pending work, then sent across.
    producer, destination = Stream(0), Stream(1)
    array = DeviceArray(VALUES, device=0, stream=producer, busy=2)
    try:
        strided = ap.view(array)[:, ::2]
        copied = strided.copy(device="cuda:1", stream=int(destination))
        assert str(copied.device) == "cuda:1"
        np.testing.assert_array_equal(ap.to_numpy(copied.copy(device="cpu")), VALUES[:, ::2])
        del copied, strided
    finally:
        producer.synchronize()
        destination.synchronize()
        array.free()
        producer.close()
        destination.close()
