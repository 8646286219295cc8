"""The Arrow C device interface on the CUDA driver simulator (issue 35, `pytest -m gpu`):
an ArrowDeviceArray of CUDA memory whose write is still pending, with the sync event its
producer recorded after the write — and a View's own device export, with the event
arrayport records when work is pending on it.

What must hold, as on a GPU: the consumer's stream waits for the producer's event on the
GPU (no host synchronization), so the values read are the written ones — and they are not
when synchronization is off (the race is real); the event arrayport hands out lives until
the consumer releases the array and is then destroyed; device memory is never read on the
host (a device validity bitmap is not counted, it is refused)."""

import ctypes
import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from arrow_structs import DeviceArray as DeviceArrayStruct  # noqa: E402
from arrow_structs import Made, device_capsules  # noqa: E402
from on_simulator import (SIMULATED, needs_simulator, nothing_leaks,  # noqa: E402,F401
                          producer_stream, simulator, slow_streams)
from sim_arrays import Context, DeviceArray, Stream, check, cuda  # noqa: E402

VALUES = np.arange(24, dtype=np.float32)
CUDA, CUDA_HOST = 2, 3

_pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
_pointer_of.restype = ctypes.c_void_p
_pointer_of.argtypes = [ctypes.py_object, ctypes.c_char_p]


class ArrowOnDevice:
    """A CUDA array offered only through ``__arrow_c_device_array__``: its values written
    by an asynchronous copy on ``stream`` (late: ``busy`` items of work before it), and a
    sync event recorded on ``stream`` after the write, as an Arrow producer does."""

    def __init__(self, stream, *, null_count=0, validity=False, busy=3, device=0):
        self.device = device
        self.memory = DeviceArray(VALUES, stream=stream, busy=busy, device=device)
        buffers = [self.memory.ptr if validity else None, self.memory.ptr]
        self.made = Made("f", None, length=VALUES.size, null_count=null_count,
                         buffers=buffers)
        self.driver, self.event = _recorded_event(stream, device)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return device_capsules(self.made, device_type=CUDA, device_id=self.device,
                               sync_event=ctypes.addressof(self.event))

    def close(self):
        gc.collect()
        with Context(self.device):
            check(self.driver.cuEventDestroy_v2(self.event), "cuEventDestroy")
        self.memory.free()


def _recorded_event(stream, device):
    """(driver, event): a new event recorded on ``stream`` (of ``device``) now, after the
    work enqueued on it so far — what an Arrow producer hands over as its sync event."""
    driver = cuda()
    driver.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    driver.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    driver.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]
    event = ctypes.c_void_p()
    with Context(device):
        check(driver.cuEventCreate(ctypes.byref(event), 0), "cuEventCreate")
        check(driver.cuEventRecord(event, stream.handle), "cuEventRecord")
    return driver, event


class PinnedWithPendingBitmap:
    """A pinned (cuda_host) Arrow device array of VALUES whose validity bitmap reads "all
    valid" until an asynchronous write on ``stream`` — queued behind ``busy`` items —
    makes every element null; the sync event is recorded after that write. The null count
    is -1 (not counted): the consumer must count the bitmap, after the event.
    ``bitmap=False``: no bitmap (null count 0), and the values themselves are the write
    still pending on ``stream``."""

    def __init__(self, stream, *, busy=2, bitmap=True):
        self.bitmap = DeviceArray(np.full(3, 0xFF, np.uint8), kind="pinned")
        self.bitmap.read()             # written: the legacy stream's work is done
        if not bitmap:
            self.values = DeviceArray(VALUES, kind="pinned", stream=stream, busy=busy)
            self.made = Made("f", None, length=VALUES.size, null_count=0,
                             buffers=[None, self.values.ptr])
            self.driver, self.event = _recorded_event(stream, 0)
            return
        self.values = DeviceArray(VALUES, kind="pinned")
        self.values.read()
        driver = cuda()
        with Context(0):
            for _ in range(busy + 1):  # the last write is the one that matters: all null
                check(driver.cuMemsetD8Async(self.bitmap.ptr, 0, 3, stream.handle),
                      "cuMemsetD8Async")
        self.made = Made("f", None, length=VALUES.size, null_count=-1,
                         buffers=[self.bitmap.ptr, self.values.ptr])
        self.driver, self.event = _recorded_event(stream, 0)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return device_capsules(self.made, device_type=CUDA_HOST, device_id=0,
                               sync_event=ctypes.addressof(self.event))

    def close(self):
        gc.collect()
        with Context(0):
            check(self.driver.cuEventDestroy_v2(self.event), "cuEventDestroy")
        self.values.free()
        self.bitmap.free()


def read_through_arrayport(obj, sync=True):
    """``obj`` imported by arrayport and copied to the host, synchronization on or off."""
    if sync:
        view = ap.view(obj)
        return ap.to_numpy(view.copy(device="cpu")).copy()
    with ap.no_implicit_sync():
        view = ap.view(obj)
        return ap.to_numpy(view.copy(device="cpu")).copy()


def test_the_sync_event_is_waited_for_and_the_race_is_lost_without_it(
        slow_streams, producer_stream, nothing_leaks):
    on_device = ArrowOnDevice(producer_stream)
    try:
        view = ap.view(on_device)
        assert view.device == (CUDA, 0) and view.readonly
        assert view.__cuda_array_interface__["data"][0] == on_device.memory.ptr
        np.testing.assert_array_equal(ap.to_numpy(view.copy(device="cpu")), VALUES)
        assert on_device.made.released["array"] == 0           # held by the View
        del view
        gc.collect()
        assert on_device.made.released["array"] == 1
    finally:
        producer_stream.synchronize()
        on_device.close()
    if SIMULATED:                         # on hardware the race may be won by luck
        late = ArrowOnDevice(producer_stream)
        try:
            assert not np.array_equal(read_through_arrayport(late, sync=False), VALUES)
        finally:
            producer_stream.synchronize()
            late.close()


@needs_simulator
def test_a_consumer_stream_waits_on_the_gpu_not_the_host(producer_stream, nothing_leaks):
    consumer = Stream(0)
    on_device = ArrowOnDevice(producer_stream, busy=0)
    try:
        before = simulator.counters()
        view = ap.View.from_arrow(on_device, stream=int(consumer))
        after = simulator.counters()
        assert after["host_synchronizations"] == before["host_synchronizations"]
        assert after["cuStreamWaitEvent"] == before["cuStreamWaitEvent"] + 1
        assert after["cuEventRecord"] == before["cuEventRecord"]   # the producer's event
        # The data is ready in the consumer's order: a DLPack export to that stream
        # needs nothing more.
        capsule = view.__dlpack__(stream=int(consumer), max_version=(1, 0))
        assert simulator.counters()["cuStreamWaitEvent"] == after["cuStreamWaitEvent"]
        del view, capsule
    finally:
        producer_stream.synchronize()
        consumer.synchronize()
        consumer.close()
        on_device.close()


def test_device_nulls_are_refused_without_reading_device_memory(producer_stream,
                                                                nothing_leaks):
    # The validity buffer is device memory: reading it on the host would fault.
    for null_count, message in [(3, "has 3 nulls"), (-1, "cannot count its nulls")]:
        on_device = ArrowOnDevice(producer_stream, null_count=null_count, validity=True)
        try:
            with pytest.raises(BufferError, match=message):
                ap.view(on_device)
            gc.collect()
            assert on_device.made.released["array"] == 1
        finally:
            producer_stream.synchronize()
            on_device.close()


def test_a_pinned_bitmap_is_counted_after_the_sync_event(slow_streams, producer_stream,
                                                         nothing_leaks):
    """Issue 40: pinned memory is host memory, so its uncounted nulls are counted on the
    host — after the producer's sync event, not while the GPU is still writing the bitmap
    (every element null: read early, the bitmap said "all valid")."""
    pinned = PinnedWithPendingBitmap(producer_stream)
    try:
        with pytest.raises(BufferError, match="has 24 nulls"):
            ap.view(pinned)
        gc.collect()
        assert pinned.made.released["array"] == 1
    finally:
        producer_stream.synchronize()
        pinned.close()


def test_a_pinned_array_without_nulls_waits_for_nothing_at_import(slow_streams,
                                                                   producer_stream,
                                                                   nothing_leaks):
    """No bitmap to count: the import orders the consumer's stream (on the GPU), and the
    host waits only when it reads (the host-reader rule) — then for the values' write."""
    pinned = PinnedWithPendingBitmap(producer_stream, bitmap=False)
    try:
        before = simulator.counters() if SIMULATED else None
        view = ap.view(pinned)
        if SIMULATED:
            assert simulator.counters()["host_synchronizations"] == \
                before["host_synchronizations"]
        assert str(view.device) == "cuda_host"
        np.testing.assert_array_equal(np.asarray(view), VALUES)
        del view
    finally:
        producer_stream.synchronize()
        pinned.close()


@needs_two_devices
@pytest.mark.skipif(cuda_driver.driver.device_count() < 2, reason="needs a second GPU")
def test_an_import_on_the_second_device_waits_there(slow_streams, nothing_leaks):
    """Issue 40 (a bug the suite missed): the default stream that waits for the sync
    event is the array's device's, not device 0's — they are different streams."""
    stream = Stream(1)
    on_device = ArrowOnDevice(stream, device=1)
    try:
        view = ap.view(on_device)
        assert str(view.device) == "cuda:1"
        np.testing.assert_array_equal(ap.to_numpy(view.copy(device="cpu")), VALUES)
        del view
    finally:
        stream.synchronize()
        stream.close()
        on_device.close()


# ---- a View's device export ------------------------------------------------------------------

def pending_view(stream):
    """A CUDA View with work pending on ``stream`` (a CUDA Array Interface import)."""
    array = DeviceArray(VALUES, stream=stream, busy=3)
    return ap.view(array), array


@needs_simulator
def test_a_pending_view_exports_an_event_that_lives_until_the_release(
        slow_streams, producer_stream, nothing_leaks):
    view, array = pending_view(producer_stream)
    try:
        before = simulator.counters()
        schema, capsule = view.__arrow_c_device_array__()
        after = simulator.counters()
        assert after["cuEventCreate"] == before["cuEventCreate"] + 1
        assert after["cuEventRecord"] == before["cuEventRecord"] + 1
        assert after["host_synchronizations"] == before["host_synchronizations"]
        struct = DeviceArrayStruct.from_address(_pointer_of(capsule, b"arrow_device_array"))
        assert (struct.device_type, struct.device_id) == (CUDA, 0)
        assert struct.sync_event is not None
        # arrayport as the consumer: same memory, the event waited for, right values.
        again = ap.View.from_arrow((schema, capsule))
        assert again.__cuda_array_interface__["data"][0] == array.ptr
        np.testing.assert_array_equal(ap.to_numpy(again.copy(device="cpu")), VALUES)
        live_events = simulator.live()[1]
        del struct, again, schema, capsule
        gc.collect()
        assert simulator.live()[1] == live_events - 1            # destroyed at the release
        del view
    finally:
        producer_stream.synchronize()
        array.free()


def test_a_view_with_nothing_pending_exports_no_event_and_host_only_forms_refuse(
        producer_stream, nothing_leaks):
    view, array = pending_view(producer_stream)
    try:
        producer_stream.synchronize()
        with ap.no_implicit_sync():
            settled = ap.view(array)
        schema, capsule = settled.__arrow_c_device_array__()
        struct = DeviceArrayStruct.from_address(_pointer_of(capsule, b"arrow_device_array"))
        assert struct.sync_event is None and struct.device_type == CUDA
        with pytest.raises(BufferError, match="use __arrow_c_device_array__"):
            view.__arrow_c_array__()
        with pytest.raises(BufferError, match="describes host memory"):
            view.__arrow_c_stream__()
        del struct, schema, capsule, settled, view
    finally:
        gc.collect()
        array.free()


def test_the_exported_event_is_destroyed_even_after_its_stream_is_gone(nothing_leaks):
    # The producer may destroy its stream before the consumer releases the array (legal):
    # the event is destroyed in the context it was made in, which a dead stream no longer
    # names. (Found by a review: it leaked, silently.)
    stream = Stream(0)
    array = DeviceArray(VALUES, stream=stream, busy=3)
    view = ap.view(array)                                  # work pending on the stream
    capsules = view.__arrow_c_device_array__()
    stream.synchronize()
    stream.close()
    del view
    gc.collect()
    del capsules                                           # the release, after the stream
    gc.collect()
    array.free()
