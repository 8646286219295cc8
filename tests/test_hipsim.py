"""The HIP runtime simulator (tests/hipsim/hipsim.c): its numbers held to AMD's own
bindings, each rule it keeps broken on purpose and seen failing, and arrayport's HIP half
(gpu/hip.py, through gpu/vendor.py and the memory policy) run over it — the first time that
half runs against a HIP runtime at all (issue 54). No AMD GPU is needed."""

import ctypes
import subprocess
import sys
import time

import numpy as np
import pytest

import arrayport as ap
from hipsim import Simulator, library, unavailable, wired
from optional import optional_module

PATH = library()
pytestmark = pytest.mark.skipif(PATH is None, reason=f"HIP simulator: {unavailable()}")
bindings = optional_module("rocm.bindings.hip")
VOIDP = ctypes.c_void_p


@pytest.fixture(scope="module")
def sim():
    simulator = Simulator(PATH)
    for name, argtypes in {
            "hipMalloc": [ctypes.POINTER(VOIDP), ctypes.c_size_t], "hipFree": [VOIDP],
            "hipHostMalloc": [ctypes.POINTER(VOIDP), ctypes.c_size_t, ctypes.c_uint],
            "hipHostFree": [VOIDP], "hipSetDevice": [ctypes.c_int],
            "hipStreamCreate": [ctypes.POINTER(VOIDP)], "hipStreamDestroy": [VOIDP],
            "hipStreamSynchronize": [VOIDP], "hipDeviceSynchronize": [],
            "hipEventCreateWithFlags": [ctypes.POINTER(VOIDP), ctypes.c_uint],
            "hipEventRecord": [VOIDP, VOIDP], "hipEventQuery": [VOIDP],
            "hipEventDestroy": [VOIDP], "hipEventSynchronize": [VOIDP],
            "hipStreamWaitEvent": [VOIDP, VOIDP, ctypes.c_uint],
            "hipMemcpyAsync": [VOIDP, VOIDP, ctypes.c_size_t, ctypes.c_int, VOIDP],
            "hipMemcpyPeerAsync": [VOIDP, ctypes.c_int, VOIDP, ctypes.c_int, ctypes.c_size_t,
                                   VOIDP],
            "hipPointerGetAttributes": [VOIDP, VOIDP]}.items():
        getattr(simulator.hip, name).argtypes = argtypes
    simulator.set_delay_us(2000)
    return simulator


def call(status):
    assert status == 0, f"HIP error {status}"


def new(function, *args):
    out = VOIDP()
    call(function(ctypes.byref(out), *args))
    return out.value


# ---- its numbers are HIP's ----------------------------------------------------------------------

@pytest.mark.skipif(bindings is None, reason="needs rocm-bindings-hip (Linux test dependency)")
def test_the_numbers_it_answers_with_are_hips(sim):
    enums = [bindings.hipError_t, bindings.hipMemoryType, bindings.hipMemcpyKind,
             bindings.hipDeviceAttribute_t]
    names = ["hipSuccess", "hipErrorInvalidValue", "hipErrorOutOfMemory",
             "hipErrorInvalidDevice", "hipErrorInvalidHandle", "hipErrorNotReady",
             "hipErrorNotSupported", "hipMemoryTypeHost", "hipMemoryTypeDevice",
             "hipMemoryTypeManaged", "hipMemcpyHostToHost", "hipMemcpyHostToDevice",
             "hipMemcpyDeviceToHost", "hipMemcpyDeviceToDevice", "hipMemcpyDefault",
             "hipDeviceAttributeMaxPitch", "hipStreamNonBlocking", "hipEventDisableTiming",
             "hipHostMallocPortable", "hipMemAttachGlobal"]
    for name in names:
        theirs = next((getattr(enum, name) for enum in enums if hasattr(enum, name)), None)
        theirs = getattr(bindings, name) if theirs is None else theirs
        assert sim.fact(name) == int(theirs), name
    assert sim.fact("sizeof(hipPointerAttribute_t)") == \
        bindings.hipPointerAttribute_t().c_sizeof()
    assert sim.fact("no such name") == -1


# ---- the rules it keeps, each broken on purpose ----------------------------------------------

def test_device_memory_is_not_host_memory():
    """A host read of a hipMalloc address is a SIGSEGV, as on a GPU."""
    program = (f"import ctypes; hip = ctypes.CDLL({PATH!r}); p = ctypes.c_void_p(); "
               "hip.hipMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]; "
               "assert hip.hipMalloc(ctypes.byref(p), 64) == 0; "
               "print('read', ctypes.string_at(p.value, 8))")
    outcome = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60)
    assert outcome.returncode == -11 and b"read" not in outcome.stdout


def test_a_consumer_that_does_not_wait_reads_stale_data_and_one_that_waits_does_not(sim):
    hip = sim.hip
    call(hip.hipSetDevice(0))
    device = new(hip.hipMalloc, 8)
    producer, consumer = new(hip.hipStreamCreate), new(hip.hipStreamCreate)
    pinned = new(hip.hipHostMalloc, 8, 1)
    ctypes.memset(pinned, 0, 8)
    source = (ctypes.c_char * 8).from_buffer_copy(b"new data")
    scratch = new(hip.hipMalloc, 8)
    for _ in range(9):   # work ahead of the write: it runs 10 delays from now, the read 1
        call(hip.hipMemcpyAsync(scratch, ctypes.addressof(source), 8, 4, producer))
    call(hip.hipMemcpyAsync(device, ctypes.addressof(source), 8, 4, producer))
    call(hip.hipMemcpyAsync(pinned, device, 8, 4, consumer))        # no wait: races
    call(hip.hipStreamSynchronize(consumer))
    assert ctypes.string_at(pinned, 8) == bytes(8)                  # stale
    event = new(hip.hipEventCreateWithFlags, 2)
    call(hip.hipEventRecord(event, producer))
    call(hip.hipStreamWaitEvent(consumer, event, 0))
    call(hip.hipMemcpyAsync(pinned, device, 8, 4, consumer))
    call(hip.hipStreamSynchronize(consumer))
    assert ctypes.string_at(pinned, 8) == b"new data"
    for stream in (producer, consumer):
        call(hip.hipStreamDestroy(stream))
    call(hip.hipEventDestroy(event))
    call(hip.hipFree(device))
    call(hip.hipFree(scratch))
    call(hip.hipHostFree(pinned))


def test_the_null_stream_waits_for_the_devices_other_streams(sim):
    hip = sim.hip
    call(hip.hipSetDevice(0))
    device = new(hip.hipMalloc, 8)
    pinned = new(hip.hipHostMalloc, 8, 1)
    stream = new(hip.hipStreamCreate)
    source = (ctypes.c_char * 8).from_buffer_copy(b"blocking")
    call(hip.hipMemcpyAsync(device, ctypes.addressof(source), 8, 4, stream))
    call(hip.hipMemcpyAsync(pinned, device, 8, 4, None))            # the null stream
    call(hip.hipStreamSynchronize(None))
    assert ctypes.string_at(pinned, 8) == b"blocking"
    call(hip.hipStreamDestroy(stream))
    call(hip.hipFree(device))
    call(hip.hipHostFree(pinned))


def test_pointer_attributes_use_hip_6s_numbering_and_refuse_pageable_memory(sim):
    hip = sim.hip
    call(hip.hipSetDevice(1))
    device = new(hip.hipMalloc, 16)
    call(hip.hipSetDevice(0))
    pinned = new(hip.hipHostMalloc, 16, 1)
    attributes = (ctypes.c_uint * 8)()
    call(hip.hipPointerGetAttributes(attributes, device + 4))
    assert (attributes[0], attributes[1]) == (2, 1)                 # device memory, device 1
    call(hip.hipPointerGetAttributes(attributes, pinned))
    assert attributes[0] == 1
    pageable = ctypes.create_string_buffer(16)
    assert hip.hipPointerGetAttributes(attributes, ctypes.addressof(pageable)) == 1
    call(hip.hipFree(device))
    call(hip.hipHostFree(pinned))
    assert hip.hipPointerGetAttributes(attributes, device) == 1     # freed: unknown


def test_copies_keep_bounds_directions_and_handles(sim):
    hip = sim.hip
    call(hip.hipSetDevice(0))
    device = new(hip.hipMalloc, 8)
    host = ctypes.create_string_buffer(16)
    before = sim.counters()
    assert hip.hipMemcpyAsync(device, ctypes.addressof(host), 16, 4, None) == 1   # past it
    assert hip.hipMemcpyAsync(device, ctypes.addressof(host), 8, 2, None) == 1    # D->H?
    stream = new(hip.hipStreamCreate)
    call(hip.hipStreamDestroy(stream))
    assert hip.hipMemcpyAsync(device, ctypes.addressof(host), 8, 4, stream) == 400
    event = new(hip.hipEventCreateWithFlags, 2)
    call(hip.hipEventDestroy(event))
    assert hip.hipEventRecord(event, None) == 400
    after = sim.counters()
    assert after["out_of_bounds"] > before["out_of_bounds"]
    assert after["stale_handles"] >= before["stale_handles"] + 2
    call(hip.hipFree(device))
    assert hip.hipFree(device) == 1                                 # twice: refused


def test_devices_and_pitches_are_checked(sim):
    hip = sim.hip
    assert hip.hipSetDevice(2) == 101                               # hipErrorInvalidDevice
    hip.hipMemcpy2DAsync.argtypes = [VOIDP, ctypes.c_size_t, VOIDP, ctypes.c_size_t,
                                     ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, VOIDP]
    device = new(hip.hipMalloc, 64)
    host = ctypes.create_string_buffer(64)
    assert hip.hipMemcpy2DAsync(device, 8, ctypes.addressof(host), 4, 8, 4, 4, None) == 1
    call(hip.hipMemcpy2DAsync(device, 16, ctypes.addressof(host), 16, 8, 4, 4, None))
    call(hip.hipDeviceSynchronize())
    call(hip.hipFree(device))


def test_out_of_memory_is_hips_error(sim):
    sim.set_device_memory(1 << 20)
    try:
        out = VOIDP()
        assert sim.hip.hipMalloc(ctypes.byref(out), 2 << 20) == 2
    finally:
        sim.set_device_memory(0)


def test_hipmemcpy_is_done_when_it_returns_and_follows_the_blocking_streams(sim):
    """hipMemcpy runs on the null stream (after the device's blocking streams' work) and
    returns when done: the host reads the result at once — where a hipMemcpyAsync into
    pinned memory, not waited for, is still stale."""
    hip = sim.hip
    hip.hipMemcpy.argtypes = [VOIDP, VOIDP, ctypes.c_size_t, ctypes.c_int]
    call(hip.hipSetDevice(0))
    blocking = new(hip.hipStreamCreate)
    device = new(hip.hipMalloc, 8)
    pinned = new(hip.hipHostMalloc, 8, 0)
    source = (ctypes.c_char * 8).from_buffer_copy(b"blocking")
    sim.set_delay_us(20000)
    try:
        call(hip.hipMemcpyAsync(device, ctypes.addressof(source), 8, 4, blocking))
        call(hip.hipMemcpyAsync(pinned, device, 8, 4, None))        # not waited for
        assert ctypes.string_at(pinned, 8) != b"blocking"
        call(hip.hipMemcpy(pinned, device, 8, 4))
        assert ctypes.string_at(pinned, 8) == b"blocking"
    finally:
        sim.set_delay_us(2000)
        call(hip.hipDeviceSynchronize())
        for free, address in ((hip.hipFree, device), (hip.hipHostFree, pinned)):
            call(free(address))
        call(hip.hipStreamDestroy(blocking))


def test_a_stream_names_its_device_and_a_destroyed_one_none(sim):
    """hipStreamGetDevice: a stream's own device (not the current one), the null stream the
    current device's, a destroyed stream hipErrorInvalidHandle."""
    hip = sim.hip
    hip.hipStreamGetDevice.argtypes = [VOIDP, ctypes.POINTER(ctypes.c_int)]
    device = ctypes.c_int(-1)
    call(hip.hipSetDevice(1))
    on_one = new(hip.hipStreamCreate)
    call(hip.hipSetDevice(0))
    call(hip.hipStreamGetDevice(on_one, ctypes.byref(device)))
    assert device.value == 1
    call(hip.hipStreamGetDevice(None, ctypes.byref(device)))
    assert device.value == 0
    call(hip.hipStreamDestroy(on_one))
    assert hip.hipStreamGetDevice(on_one, ctypes.byref(device)) == 400   # invalid handle


def test_a_free_waits_for_its_own_devices_work_only(sim):
    """hipFree synchronizes the memory's device; a peer copy queued on another device's
    stream finds the memory gone when it runs (counted, not run)."""
    hip = sim.hip
    call(hip.hipSetDevice(0))
    source = new(hip.hipMalloc, 8)
    call(hip.hipSetDevice(1))
    target = new(hip.hipMalloc, 8)
    stream = new(hip.hipStreamCreate)                                # device 1's
    before = sim.counters()["freed_memory_accesses"]
    call(hip.hipMemcpyPeerAsync(target, 1, source, 0, 8, stream))
    call(hip.hipSetDevice(0))
    call(hip.hipFree(source))                                       # waits for device 0 only
    call(hip.hipStreamSynchronize(stream))
    assert sim.counters()["freed_memory_accesses"] == before + 1
    call(hip.hipStreamDestroy(stream))
    call(hip.hipSetDevice(1))
    call(hip.hipFree(target))
    call(hip.hipSetDevice(0))


def test_an_event_is_not_ready_until_its_work_ran(sim):
    hip = sim.hip
    call(hip.hipSetDevice(0))
    device = new(hip.hipMalloc, 8)
    stream = new(hip.hipStreamCreate)
    event = new(hip.hipEventCreateWithFlags, 2)
    host = ctypes.create_string_buffer(8)
    call(hip.hipMemcpyAsync(device, ctypes.addressof(host), 8, 4, stream))
    call(hip.hipEventRecord(event, stream))
    assert hip.hipEventQuery(event) == 600                          # hipErrorNotReady
    call(hip.hipEventSynchronize(event))
    assert hip.hipEventQuery(event) == 0
    call(hip.hipEventDestroy(event))
    call(hip.hipStreamDestroy(stream))
    call(hip.hipFree(device))


# ---- arrayport's HIP half, over it ---------------------------------------------------------------

@pytest.fixture
def driver(sim, monkeypatch):
    """arrayport's HIP driver over the simulator; closed at the end (its reused events
    destroyed, as at exit), before its own library comes back."""
    before = sim.live()
    hip_driver = wired(monkeypatch, PATH)
    yield hip_driver
    hip_driver.close()
    assert sim.live() == before   # what the driver made, released


def test_a_stand_in_runtime_never_installs_the_compiled_floor(driver):
    """Only the process's runtime installs the floor: a stand-in's functions (this one's)
    never become the floor's, which would outlive the stand-in."""
    from arrayport import _core
    before = _core.hip_floor_ready()
    assert driver.device_count() == 2                 # the stand-in opened
    assert _core.hip_floor_ready() == before and not driver._on_floor()


def test_the_hip_driver_counts_devices_and_switches_them(driver):
    assert driver.device_count() == 2
    with driver.on_device(1):
        assert driver.current_device() == 1
    assert driver.current_device() == 0


def test_the_hip_driver_locates_device_pinned_and_pageable_memory(sim, driver):
    device = driver.allocate_device(1, 64)
    pinned = driver.allocate_pinned(64)
    assert driver.locate_pointer(device.address + 8) == (10, 1)     # kDLROCM, device 1
    assert driver.locate_pointer(pinned.address) == (11, 0)         # kDLROCMHost
    with pytest.raises(BufferError, match="not memory HIP knows"):
        driver.locate_pointer(np.zeros(4).ctypes.data)
    del device, pinned
    assert sim.live()[0] == 0                                        # freed at once


def test_views_go_to_a_rocm_device_and_back(sim, driver):
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    for layout in (values, values.T, values[::-1, ::2]):
        on_device = ap.view(layout).copy(device="rocm:0")
        assert on_device.device == (10, 0)
        back = on_device.copy(device="cpu")
        assert ap.to_numpy(back).tobytes() == np.ascontiguousarray(layout).tobytes()
        del on_device, back
    assert sim.live()[0] == 0


def test_a_stream_wait_orders_a_consumer_after_the_producer(sim, driver):
    hip = sim.hip
    call(hip.hipSetDevice(0))
    producer, consumer = new(hip.hipStreamCreate), new(hip.hipStreamCreate)
    device = driver.allocate_device(0, 8)
    pinned = driver.allocate_pinned(8)
    source = (ctypes.c_char * 8).from_buffer_copy(b"in order")
    driver.copy_async(0, device.address, ctypes.addressof(source), 8, producer)
    driver.make_stream_wait(0, consumer, producer)
    driver.copy_async(0, pinned.address, device.address, 8, consumer)
    driver.synchronize(0, consumer)
    assert ctypes.string_at(pinned.address, 8) == b"in order"
    assert sim.counters()["host_synchronizations"] > 0
    del device, pinned
    for stream in (producer, consumer):
        call(hip.hipStreamDestroy(stream))


def test_hip_memory_is_freed_after_its_devices_work(sim, driver):
    """The memory policy frees HIP memory at once (its frees wait for the device): a copy
    still queued when its result dies has run before the memory goes."""
    hip = sim.hip
    stream = new(hip.hipStreamCreate)
    device = driver.allocate_device(0, 8)
    source = (ctypes.c_char * 8).from_buffer_copy(b"12345678")
    before = sim.counters()
    driver.copy_async(0, device.address, ctypes.addressof(source), 8, stream)
    started = time.monotonic()
    del device                                                       # hipFree: waits
    assert time.monotonic() - started >= 0.0015                      # the 2 ms delay ran
    after = sim.counters()
    assert after["freed_memory_accesses"] == before["freed_memory_accesses"]
    assert after["device_synchronizations"] > before["device_synchronizations"]
    call(hip.hipStreamDestroy(stream))
