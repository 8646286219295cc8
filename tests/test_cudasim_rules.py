"""The CUDA driver simulator's own tests (issue 32): each rule it keeps, broken on purpose,
gives the error the Driver API documentation names — a stand-in that always succeeds
would prove nothing. The simulator is built from tests/cudasim/cudasim.c against NVIDIA's
cuda.h (tests/helpers/cudasim.py) and called here through ctypes, as a driver is."""

import ctypes
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import cudasim

PATH = cudasim.library()
pytestmark = pytest.mark.skipif(PATH is None, reason=cudasim.unavailable())

SUCCESS, INVALID_VALUE, NOT_INITIALIZED = 0, 1, 3
INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 101, 201, 400, 600
LEGACY, PER_THREAD, NON_BLOCKING = 1, 2, 1
MEMORYTYPE_HOST, MEMORYTYPE_DEVICE = 1, 2
ATTR_MEMORY_TYPE, ATTR_IS_MANAGED, ATTR_DEVICE_ORDINAL = 2, 8, 9

u64, handle = ctypes.c_uint64, ctypes.c_void_p
# A child process's start: the simulator loaded, device 0's primary context current.
CHILD_ON_DEVICE_0 = f"""
import ctypes, sys
cuda = ctypes.CDLL({PATH!r})
cuda.cuInit(0)
context = ctypes.c_void_p()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0)
cuda.cuCtxPushCurrent_v2(context)
"""


@pytest.fixture(scope="module")
def sim():
    simulator = cudasim.Simulator(PATH)
    cuda = simulator.cuda
    for name in ("cuStreamCreate", "cuEventCreate", "cuDevicePrimaryCtxRetain",
                 "cuCtxPopCurrent_v2"):
        getattr(cuda, name).argtypes = [ctypes.POINTER(handle), ctypes.c_uint]
    cuda.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(handle)]
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(handle), ctypes.c_int]
    for name in ("cuCtxPushCurrent_v2", "cuStreamSynchronize", "cuStreamDestroy_v2",
                 "cuEventSynchronize", "cuEventQuery", "cuEventDestroy_v2", "cuStreamQuery",
                 "cuCtxSetCurrent"):
        getattr(cuda, name).argtypes = [handle]
    cuda.cuEventRecord.argtypes = [handle, handle]
    cuda.cuStreamWaitEvent.argtypes = [handle, handle, ctypes.c_uint]
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
    cuda.cuMemAllocManaged.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemHostAlloc.argtypes = [ctypes.POINTER(handle), ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemFree_v2.argtypes = [u64]
    cuda.cuMemFreeHost.argtypes = [handle]
    cuda.cuMemcpyHtoDAsync_v2.argtypes = [u64, handle, ctypes.c_size_t, handle]
    cuda.cuMemcpyDtoHAsync_v2.argtypes = [handle, u64, ctypes.c_size_t, handle]
    cuda.cuMemcpyHtoD_v2.argtypes = [u64, handle, ctypes.c_size_t]
    cuda.cuMemcpyDtoH_v2.argtypes = [handle, u64, ctypes.c_size_t]
    cuda.cuMemcpyAsync.argtypes = [u64, u64, ctypes.c_size_t, handle]
    cuda.cuMemsetD8Async.argtypes = [u64, ctypes.c_ubyte, ctypes.c_size_t, handle]
    cuda.cuPointerGetAttribute.argtypes = [handle, ctypes.c_int, u64]
    cuda.cuPointerGetAttributes.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_int),
                                            ctypes.POINTER(handle), u64]
    assert cuda.cuInit(0) == SUCCESS
    return simulator


@pytest.fixture
def cuda(sim):
    return sim.cuda


@pytest.fixture
def on_device(cuda):
    """Device ``n``'s primary context current on this thread during the test."""
    pushed = []

    def push(n=0):
        context = handle()
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), n) == SUCCESS
        assert cuda.cuCtxPushCurrent_v2(context) == SUCCESS
        pushed.append(n)
        return context
    yield push
    for n in reversed(pushed):
        assert cuda.cuCtxPopCurrent_v2(ctypes.byref(handle())) == SUCCESS
        assert cuda.cuDevicePrimaryCtxRelease_v2(n) == SUCCESS


def in_fresh_thread(call):
    result = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    thread.join()
    return result[0]


def reset_after_fault(cuda, device):
    """After a deliberate fault: the fault is sticky (every call in the context fails with
    it, as on a GPU), so the test resets the device's primary context — its memory, streams,
    events and modules gone with it — and the next test finds it usable."""
    assert cuda.cuDevicePrimaryCtxReset_v2(device) == SUCCESS


def alloc(cuda, nbytes=64):
    address = u64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(address), nbytes) == SUCCESS
    return address.value


def test_calls_before_cuinit_are_not_initialized():
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import ctypes
        cuda = ctypes.CDLL({PATH!r})
        count = ctypes.c_int()
        print(cuda.cuDeviceGetCount(ctypes.byref(count)), cuda.cuInit(0),
              cuda.cuDeviceGetCount(ctypes.byref(count)), count.value)
    """)], capture_output=True, text=True, timeout=60)
    assert child.stdout.split() == [str(NOT_INITIALIZED), "0", "0", "2"]


@pytest.mark.parametrize("call", [
    lambda c: c.cuMemAlloc_v2(ctypes.byref(u64()), 16),
    lambda c: c.cuMemHostAlloc(ctypes.byref(handle()), 16, 1),
    lambda c: c.cuMemAllocManaged(ctypes.byref(u64()), 16, 1),
    lambda c: c.cuStreamCreate(ctypes.byref(handle()), 0),
    lambda c: c.cuEventCreate(ctypes.byref(handle()), 0),
    lambda c: c.cuCtxGetDevice(ctypes.byref(ctypes.c_int())),
    lambda c: c.cuCtxSynchronize(),
    lambda c: c.cuStreamSynchronize(None),
    lambda c: c.cuMemFreeHost(None),
    lambda c: c.cuMemFree_v2(0),
    lambda c: c.cuPointerGetAttributes(
        1, (ctypes.c_int * 1)(ATTR_MEMORY_TYPE),
        (handle * 1)(ctypes.addressof(ctypes.c_uint())), 4096),
], ids=["cuMemAlloc", "cuMemHostAlloc", "cuMemAllocManaged", "cuStreamCreate",
        "cuEventCreate", "cuCtxGetDevice", "cuCtxSynchronize", "cuStreamSynchronize(NULL)",
        "cuMemFreeHost", "cuMemFree", "cuPointerGetAttributes"])
def test_calls_that_need_a_context_fail_without_one(cuda, call):
    assert in_fresh_thread(lambda: call(cuda)) == INVALID_CONTEXT


def test_a_freed_pinned_block_needs_its_context_too(cuda, on_device):
    on_device(0)
    pinned = handle()
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), 64, 1) == SUCCESS
    assert in_fresh_thread(lambda: cuda.cuMemFreeHost(pinned)) == INVALID_CONTEXT
    assert cuda.cuMemFreeHost(pinned) == SUCCESS
    assert cuda.cuMemFreeHost(pinned) == INVALID_VALUE      # freed once only


def test_context_stack_is_per_thread_and_pops_in_order(cuda, on_device):
    zero, one = on_device(0), on_device(1)
    current, device = handle(), ctypes.c_int()
    assert cuda.cuCtxGetCurrent(ctypes.byref(current)) == SUCCESS and current.value == one.value
    assert cuda.cuCtxGetDevice(ctypes.byref(device)) == SUCCESS and device.value == 1
    assert in_fresh_thread(lambda: cuda.cuCtxGetDevice(ctypes.byref(ctypes.c_int()))) \
        == INVALID_CONTEXT
    assert cuda.cuCtxPushCurrent_v2(handle(12345)) == INVALID_CONTEXT   # not a context
    assert zero.value != one.value


def test_devices_past_the_count_are_invalid(cuda):
    assert cuda.cuDeviceGet(ctypes.byref(ctypes.c_int()), 2) == INVALID_DEVICE
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(handle()), -1) == INVALID_DEVICE


def test_an_event_records_only_on_its_own_contexts_streams(cuda, on_device):
    on_device(0)
    event, stream0 = handle(), handle()
    assert cuda.cuEventCreate(ctypes.byref(event), 0) == SUCCESS
    assert cuda.cuStreamCreate(ctypes.byref(stream0), NON_BLOCKING) == SUCCESS
    on_device(1)
    stream1 = handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream1), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventRecord(event, stream1) == INVALID_HANDLE   # context 0's event
    assert cuda.cuEventRecord(event, stream0) == SUCCESS
    assert cuda.cuStreamWaitEvent(stream1, event, 0) == SUCCESS   # waits may cross
    assert cuda.cuStreamSynchronize(stream1) == SUCCESS
    for stream in (stream0, stream1):
        assert cuda.cuStreamDestroy_v2(stream) == SUCCESS
    assert cuda.cuEventDestroy_v2(event) == SUCCESS
    assert cuda.cuEventDestroy_v2(event) == INVALID_HANDLE


def test_device_memory_cannot_be_read_by_the_host():
    # As on a GPU, a host read of a device pointer is a crash, not a value; pinned and
    # managed memory read fine.
    code = CHILD_ON_DEVICE_0 + textwrap.dedent("""
        managed, device = ctypes.c_uint64(), ctypes.c_uint64()
        cuda.cuMemAllocManaged(ctypes.byref(managed), 8, 1)
        print("managed", ctypes.c_uint64.from_address(managed.value).value, flush=True)
        cuda.cuMemAlloc_v2(ctypes.byref(device), 8)
        print("device", ctypes.c_uint64.from_address(device.value).value, flush=True)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert child.stdout.splitlines() == ["managed 0"]
    assert child.returncode < 0, "reading device memory on the host did not fault"


def test_pointer_attributes_answer_per_allocation(cuda, on_device):
    on_device(1)
    device = alloc(cuda)
    pinned, managed = handle(), u64()
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), 64, 1) == SUCCESS
    assert cuda.cuMemAllocManaged(ctypes.byref(managed), 64, 1) == SUCCESS

    def attributes(ptr):
        values = [ctypes.c_uint(), ctypes.c_uint(), ctypes.c_int()]
        status = cuda.cuPointerGetAttributes(
            3, (ctypes.c_int * 3)(ATTR_MEMORY_TYPE, ATTR_IS_MANAGED, ATTR_DEVICE_ORDINAL),
            (handle * 3)(*(ctypes.addressof(v) for v in values)), ptr)
        return status, tuple(v.value for v in values)

    assert attributes(device + 10) == (SUCCESS, (MEMORYTYPE_DEVICE, 0, 1))
    assert attributes(pinned.value) == (SUCCESS, (MEMORYTYPE_HOST, 0, 0))
    assert attributes(managed.value)[1][1] == 1
    pageable = np.zeros(8)
    assert attributes(pageable.ctypes.data) == (SUCCESS, (0, 0, -2))   # defaults, no error
    assert cuda.cuPointerGetAttribute(ctypes.byref(ctypes.c_uint()), ATTR_MEMORY_TYPE,
                                      pageable.ctypes.data) == INVALID_VALUE

    def allocation_range(ptr):   # CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, _RANGE_SIZE
        start, size = u64(), ctypes.c_size_t()
        assert cuda.cuPointerGetAttributes(
            2, (ctypes.c_int * 2)(11, 12),
            (handle * 2)(ctypes.addressof(start), ctypes.addressof(size)), ptr) == SUCCESS
        return start.value, size.value

    assert allocation_range(device + 10) == (device, 64)
    assert allocation_range(pinned.value + 63) == (pinned.value, 64)
    # One past the end is not the allocation's (the next one may start there), whichever
    # allocation was asked about last
    assert allocation_range(device + 64)[0] != device
    assert allocation_range(device + 63) == (device, 64)
    assert allocation_range(device + 64)[0] != device
    for status in (cuda.cuMemFree_v2(device), cuda.cuMemFreeHost(pinned),
                   cuda.cuMemFree_v2(managed.value)):
        assert status == SUCCESS


def test_copies_stay_inside_their_allocations(cuda, on_device):
    on_device(0)
    device = alloc(cuda, 64)
    host = np.zeros(128, np.uint8)
    assert cuda.cuMemcpyHtoD_v2(device, host.ctypes.data, 64) == SUCCESS
    assert cuda.cuMemcpyHtoD_v2(device, host.ctypes.data, 65) == INVALID_VALUE
    assert cuda.cuMemcpyDtoH_v2(host.ctypes.data, device + 32, 33) == INVALID_VALUE
    assert cuda.cuMemFree_v2(device) == SUCCESS
    assert cuda.cuMemFree_v2(device) == INVALID_VALUE


class Memcpy2D(ctypes.Structure):
    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
                ("srcMemoryType", ctypes.c_int), ("srcHost", handle), ("srcDevice", u64),
                ("srcArray", handle), ("srcPitch", ctypes.c_size_t),
                ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", handle), ("dstDevice", u64),
                ("dstArray", handle), ("dstPitch", ctypes.c_size_t),
                ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]


def test_two_d_copies_keep_the_pitch_rules(cuda, on_device):
    on_device(0)
    device = alloc(cuda, 4 * 8)
    host = np.arange(4 * 16, dtype=np.uint8)
    back = np.zeros(4 * 8, np.uint8)
    unified = 4

    def copy(dst, dst_pitch, src, src_pitch, width, height):
        descriptor = Memcpy2D(srcMemoryType=unified, srcDevice=src, srcPitch=src_pitch,
                              dstMemoryType=unified, dstDevice=dst, dstPitch=dst_pitch,
                              WidthInBytes=width, Height=height)
        status = cuda.cuMemcpy2DAsync_v2(ctypes.byref(descriptor), None)
        cuda.cuStreamSynchronize(None)
        return status

    assert copy(device, 8, host.ctypes.data, 16, 8, 4) == SUCCESS      # every other 8 bytes
    assert copy(back.ctypes.data, 8, device, 8, 8, 4) == SUCCESS
    assert back.reshape(4, 8).tolist() == host.reshape(4, 16)[:, :8].tolist()
    assert copy(device, 8, host.ctypes.data, 16, 9, 4) == INVALID_VALUE     # width > pitch
    assert copy(device, 2**31, host.ctypes.data, 16, 8, 2) == INVALID_VALUE  # > MAX_PITCH
    assert cuda.cuMemFree_v2(device) == SUCCESS


def race(cuda, sim, wait):
    """The producer writes device memory on stream P; the consumer reads it back on a
    non-blocking stream C, waiting on an event recorded on P or not at all."""
    sim.set_delay_us(20000)
    device = alloc(cuda, 8)
    producer, consumer, event = handle(), handle(), handle()
    cuda.cuStreamCreate(ctypes.byref(producer), NON_BLOCKING)
    cuda.cuStreamCreate(ctypes.byref(consumer), NON_BLOCKING)
    cuda.cuEventCreate(ctypes.byref(event), 2)
    out = np.zeros(8, np.uint8)
    for _ in range(3):   # earlier work: the write of 7s runs 80 ms from now, the read 20
        assert cuda.cuMemsetD8Async(device, 0, 8, producer) == SUCCESS
    assert cuda.cuMemsetD8Async(device, 7, 8, producer) == SUCCESS
    if wait:
        assert cuda.cuEventRecord(event, producer) == SUCCESS
        assert cuda.cuStreamWaitEvent(consumer, event, 0) == SUCCESS
    assert cuda.cuMemcpyDtoHAsync_v2(out.ctypes.data, device, 8, consumer) == SUCCESS
    assert cuda.cuStreamSynchronize(consumer) == SUCCESS
    cuda.cuStreamSynchronize(producer)
    for stream in (producer, consumer):
        cuda.cuStreamDestroy_v2(stream)
    cuda.cuEventDestroy_v2(event)
    cuda.cuMemFree_v2(device)
    sim.set_delay_us(2000)
    return out.tolist()


def test_streams_are_asynchronous_so_a_missing_wait_reads_stale_data(cuda, sim, on_device):
    on_device(0)
    assert race(cuda, sim, wait=False) == [0] * 8      # read before the write ran
    assert race(cuda, sim, wait=True) == [7] * 8


def test_the_legacy_stream_waits_for_blocking_streams_and_the_per_thread_one_does_not(
        cuda, sim, on_device):
    on_device(0)
    sim.set_delay_us(20000)
    blocking = handle()
    cuda.cuStreamCreate(ctypes.byref(blocking), 0)
    outcomes = {}
    for name, reader in (("legacy", LEGACY), ("per-thread", PER_THREAD)):
        device = alloc(cuda, 4)
        out = np.zeros(4, np.uint8)
        for _ in range(3):   # earlier work: the write of 9s runs 80 ms from now, the read 20
            cuda.cuMemsetD8Async(device, 0, 4, blocking)
        cuda.cuMemsetD8Async(device, 9, 4, blocking)
        cuda.cuMemcpyDtoHAsync_v2(out.ctypes.data, device, 4, reader)
        cuda.cuStreamSynchronize(reader)
        cuda.cuStreamSynchronize(blocking)
        outcomes[name] = out.tolist()
        cuda.cuMemFree_v2(device)
    cuda.cuStreamDestroy_v2(blocking)
    sim.set_delay_us(2000)
    assert outcomes == {"legacy": [9] * 4, "per-thread": [0] * 4}


def test_event_query_says_not_ready_until_the_work_ran(cuda, sim, on_device):
    on_device(0)
    sim.set_delay_us(20000)
    stream, event = handle(), handle()
    cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    cuda.cuEventCreate(ctypes.byref(event), 0)
    device = alloc(cuda, 4)
    cuda.cuMemsetD8Async(device, 1, 4, stream)
    cuda.cuEventRecord(event, stream)
    assert cuda.cuEventQuery(event) == NOT_READY
    assert cuda.cuStreamQuery(stream) == NOT_READY
    assert cuda.cuEventSynchronize(event) == SUCCESS
    assert cuda.cuEventQuery(event) == SUCCESS
    cuda.cuStreamDestroy_v2(stream)
    cuda.cuEventDestroy_v2(event)
    cuda.cuMemFree_v2(device)
    sim.set_delay_us(2000)


def test_an_event_outlives_the_stream_it_was_recorded_on(cuda, on_device):
    """A driver keeps an event usable after its stream is destroyed: the record completes with
    the stream's last work. The simulator once freed the stream and read the event's stream
    through the dangling pointer: once another stream took the freed memory, a query said
    NOT_READY for ever and arrayport's staging drain hung at exit (CI, hardware mode)."""
    on_device(0)
    gone, event = handle(), handle()
    assert cuda.cuStreamCreate(ctypes.byref(gone), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), 0) == SUCCESS
    device = alloc(cuda, 8)
    for _ in range(3):                          # a record past the first work item
        assert cuda.cuMemsetD8Async(device, 1, 8, gone) == SUCCESS
    assert cuda.cuEventRecord(event, gone) == SUCCESS
    assert cuda.cuStreamDestroy_v2(gone) == SUCCESS
    fresh = [handle() for _ in range(8)]        # what the freed stream's memory would go to
    for stream in fresh:
        assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    try:
        assert cuda.cuEventQuery(event) == SUCCESS
        waiter = fresh[0]
        assert cuda.cuStreamWaitEvent(waiter, event, 0) == SUCCESS
        synchronized = []
        thread = threading.Thread(target=lambda: synchronized.append(
            (cuda.cuEventSynchronize(event), cuda.cuStreamSynchronize(waiter))), daemon=True)
        thread.start()
        thread.join(timeout=10)
        assert synchronized == [(SUCCESS, SUCCESS)], "a wait for a destroyed stream's work hung"
        assert cuda.cuEventRecord(event, gone) == INVALID_HANDLE   # the handle itself is dead
    finally:
        for stream in fresh:
            cuda.cuStreamDestroy_v2(stream)
        cuda.cuEventDestroy_v2(event)
        cuda.cuMemFree_v2(device)


def test_counters_count_calls_and_host_synchronizations(cuda, sim, on_device):
    on_device(0)
    before = sim.counters()
    cuda.cuStreamSynchronize(None)
    after = sim.counters()
    assert after["cuStreamSynchronize"] == before["cuStreamSynchronize"] + 1
    assert after["host_synchronizations"] == before["host_synchronizations"] + 1


def test_what_was_never_released_is_reported_at_exit(tmp_path):
    report = tmp_path / "report.txt"
    code = CHILD_ON_DEVICE_0 + textwrap.dedent("""
        cuda.cuMemAlloc_v2(ctypes.byref(ctypes.c_uint64()), 16)
        cuda.cuEventCreate(ctypes.byref(ctypes.c_void_p()), 0)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env={"CUDASIM_REPORT": str(report), "PATH": "/usr/bin"})
    assert child.returncode == 0, child.stderr
    assert report.read_text() == ("cudasim: at exit, never released: 1 allocations, 1 events, "
                                  "0 streams, 0 modules\n")


def test_nothing_is_left_alive_by_these_tests(sim):
    assert sim.live() == (0, 0, 0)


# ---- pageable host memory: the API synchronization rules ------------------------------------

@pytest.fixture
def slow_stream(cuda, sim, on_device):
    """(a non-blocking stream of device 0, 8 bytes of its memory), work taking 20 ms."""
    on_device(0)
    sim.set_delay_us(20000)
    stream = handle()
    cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    device = alloc(cuda, 8)
    yield stream, device
    cuda.cuStreamSynchronize(stream)
    cuda.cuStreamDestroy_v2(stream)
    cuda.cuMemFree_v2(device)
    sim.set_delay_us(2000)


def test_a_copy_into_pageable_memory_returns_only_once_done(cuda, sim, slow_stream):
    # "For transfers from device memory to pageable host memory, the function will return
    # only once the copy has completed" — even the Async variant (numba-cuda relies on it).
    stream, device = slow_stream
    out = np.zeros(8, np.uint8)
    cuda.cuMemsetD8Async(device, 5, 8, stream)
    before = sim.counters()["host_synchronizations"]
    assert cuda.cuMemcpyDtoHAsync_v2(out.ctypes.data, device, 8, stream) == SUCCESS
    assert out.tolist() == [5] * 8                      # no synchronize needed
    assert sim.counters()["host_synchronizations"] == before + 1


def test_a_copy_from_pageable_memory_is_staged_at_once(cuda, sim, slow_stream):
    # "host memory is copied to a staging buffer immediately": the caller may reuse its
    # source as soon as the call returns, though the copy itself runs later.
    stream, device = slow_stream
    host = np.full(8, 3, np.uint8)
    before = sim.counters()["host_synchronizations"]
    assert cuda.cuMemcpyHtoDAsync_v2(device, host.ctypes.data, 8, stream) == SUCCESS
    assert sim.counters()["host_synchronizations"] == before   # did not wait
    host[:] = 9                                                # reused at once
    cuda.cuStreamSynchronize(stream)
    out = np.zeros(8, np.uint8)
    cuda.cuMemcpyDtoH_v2(out.ctypes.data, device, 8)
    assert out.tolist() == [3] * 8


def test_pinned_memory_is_not_staged(cuda, sim, slow_stream):
    # Pinned memory is read by the copy itself, when it runs: changed before then, the new
    # bytes are what arrives (the hazard pinned buffers carry, and pageable ones do not).
    stream, device = slow_stream
    pinned = handle()
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), 8, 0) == SUCCESS
    host = np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(pinned.value))
    host[:] = 3
    cuda.cuMemcpyHtoDAsync_v2(device, pinned, 8, stream)
    host[:] = 9
    cuda.cuStreamSynchronize(stream)
    out = np.zeros(8, np.uint8)
    cuda.cuMemcpyDtoH_v2(out.ctypes.data, device, 8)
    assert out.tolist() == [9] * 8
    cuda.cuMemFreeHost(pinned)


def test_memset_of_pageable_memory_is_refused(cuda, on_device):
    on_device(0)
    host = np.zeros(8, np.uint8)
    assert cuda.cuMemsetD8Async(host.ctypes.data, 1, 8, None) == INVALID_VALUE


def test_the_per_thread_stream_is_ordered_after_the_legacy_stream(cuda, sim, on_device):
    # "The per-thread default stream is not a non-blocking stream and will synchronize
    # with the legacy default stream."
    on_device(0)
    sim.set_delay_us(20000)
    device = alloc(cuda, 4)
    for _ in range(3):
        cuda.cuMemsetD8Async(device, 0, 4, LEGACY)
    cuda.cuMemsetD8Async(device, 6, 4, LEGACY)
    out = np.zeros(4, np.uint8)
    cuda.cuMemcpyDtoHAsync_v2(out.ctypes.data, device, 4, PER_THREAD)
    assert out.tolist() == [6] * 4
    cuda.cuMemFree_v2(device)
    sim.set_delay_us(2000)


# ---- freed memory: frees do not wait, and what touches freed memory faults --------------------

ILLEGAL_ADDRESS = 700


def pinned_bytes(cuda, nbytes, fill):
    pinned = handle()
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), nbytes, 0) == SUCCESS
    host = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pinned.value))
    host[:] = fill
    return pinned, host


@pytest.mark.parametrize("wait_first", [False, True], ids=["freed under the work", "waited"])
def test_a_free_does_not_wait_for_work_that_reads_the_memory(cuda, sim, slow_stream,
                                                             wait_first):
    # cuMemFree "may" synchronize: the simulator does not, so that work queued on a stream
    # which reads memory freed before it ran faults (CUDA_ERROR_ILLEGAL_ADDRESS at the next
    # synchronization, a sticky error) instead of reading what was there — the use after
    # free a waiting free would hide. Waiting for the work first is the correct program.
    # The fault is sticky: the context runs nothing more (the copy queued behind the faulted
    # memset is dropped) and refuses every call, the free of the pinned buffer included,
    # until it is reset — which frees that buffer with everything else of the context.
    stream, _ = slow_stream
    victim = alloc(cuda, 8)
    pinned, host = pinned_bytes(cuda, 8, 1)
    assert cuda.cuMemsetD8Async(victim, 7, 8, stream) == SUCCESS
    assert cuda.cuMemcpyDtoHAsync_v2(pinned, victim, 8, stream) == SUCCESS   # runs in ~40 ms
    if wait_first:
        assert cuda.cuStreamSynchronize(stream) == SUCCESS
    before = sim.counters()
    assert cuda.cuMemFree_v2(victim) == SUCCESS
    assert sim.counters()["host_synchronizations"] == before["host_synchronizations"]
    status = cuda.cuStreamSynchronize(stream)
    faults = sim.counters()["freed_memory_accesses"] - before["freed_memory_accesses"]
    if wait_first:
        assert (status, host.tolist(), faults) == (SUCCESS, [7] * 8, 0)
        assert cuda.cuMemFreeHost(pinned) == SUCCESS
    else:
        assert (status, host.tolist(), faults) == (ILLEGAL_ADDRESS, [1] * 8, 1)  # the set
        assert cuda.cuCtxSynchronize() == ILLEGAL_ADDRESS                      # sticky
        assert cuda.cuMemFreeHost(pinned) == ILLEGAL_ADDRESS
        reset_after_fault(cuda, 0)


def test_freed_pinned_memory_is_poisoned_for_the_gpu(cuda, sim, slow_stream):
    # cuMemFreeHost promises no wait either: a transfer queued from pinned memory that is
    # freed before it runs faults, and the destination keeps what it had (managed memory:
    # the host reads it without a driver call, which the faulted context would refuse).
    stream, _ = slow_stream
    managed = u64()
    assert cuda.cuMemAllocManaged(ctypes.byref(managed), 8, 1) == SUCCESS
    assert cuda.cuMemsetD8Async(managed.value, 2, 8, stream) == SUCCESS
    pinned, _ = pinned_bytes(cuda, 8, 9)
    assert cuda.cuMemcpyHtoDAsync_v2(managed.value, pinned, 8, stream) == SUCCESS
    before = sim.counters()
    assert cuda.cuMemFreeHost(pinned) == SUCCESS
    assert sim.counters()["host_synchronizations"] == before["host_synchronizations"]
    assert cuda.cuStreamSynchronize(stream) == ILLEGAL_ADDRESS
    assert sim.counters()["copy_faults"] - before["copy_faults"] == 1
    assert (ctypes.c_uint8 * 8).from_address(managed.value)[:] == [2] * 8
    reset_after_fault(cuda, 0)   # sticky: the context is usable again only once reset


def test_freed_pinned_memory_cannot_be_read_by_the_host():
    # Its pages are dropped and made inaccessible (the simulator's poison): a host read after
    # cuMemFreeHost is a crash, as reading unmapped memory is, never the old bytes.
    code = CHILD_ON_DEVICE_0 + textwrap.dedent("""
        pinned = ctypes.c_void_p()
        cuda.cuMemHostAlloc(ctypes.byref(pinned), 8, 0)
        ctypes.c_uint64.from_address(pinned.value).value = 5
        print("before", ctypes.c_uint64.from_address(pinned.value).value, flush=True)
        print("free", cuda.cuMemFreeHost(pinned), flush=True)
        print("after", ctypes.c_uint64.from_address(pinned.value).value, flush=True)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert child.stdout.splitlines() == ["before 5", "free 0"]
    assert child.returncode < 0, "reading freed pinned memory on the host did not fault"


# ---- how NVIDIA's libraries find the driver ---------------------------------------------------

GET_PROC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(handle), ctypes.c_int,
                            u64, ctypes.POINTER(ctypes.c_int))
PROC_SUCCESS, PROC_SYMBOL_NOT_FOUND, PROC_VERSION_NOT_SUFFICIENT = 0, 1, 2
NOT_FOUND = 500


@pytest.mark.parametrize("symbol, version, exported, status", [
    ("cuMemAlloc", 12000, "cuMemAlloc_v2", PROC_SUCCESS),
    ("cuStreamDestroy", 12000, "cuStreamDestroy_v2", PROC_SUCCESS),
    ("cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", PROC_SUCCESS),   # a variant by name
    ("cuDeviceGetUuid", 11000, "cuDeviceGetUuid", PROC_SUCCESS),      # ... older callers
    ("cuMemAlloc", 3000, None, PROC_VERSION_NOT_SUFFICIENT),          # only the 64-bit ABI
    ("cuGraphLaunch", 12000, None, PROC_SYMBOL_NOT_FOUND),            # not simulated
    ("cuDevicePrimaryCtxReset", 12000, "cuDevicePrimaryCtxReset_v2", PROC_SUCCESS),
    ("cuDeviceCanAccessPeer", 12000, "cuDeviceCanAccessPeer", PROC_SUCCESS),
    ("cuCtxEnablePeerAccess", 3020, None, PROC_VERSION_NOT_SUFFICIENT),   # from 4.0
    ("cuMemPoolSetAccess", 11020, "cuMemPoolSetAccess", PROC_SUCCESS),
])
def test_get_proc_address_answers_by_name_and_version(sim, symbol, version, exported, status):
    lookup = GET_PROC(("cuGetProcAddress_v2", sim.cuda))
    pointer, found = handle(), ctypes.c_int(-1)
    result = lookup(symbol.encode(), ctypes.byref(pointer), version, 0, ctypes.byref(found))
    assert found.value == status
    if exported is None:
        assert (result, pointer.value) == (NOT_FOUND, None)
    else:
        expected = ctypes.cast(getattr(sim.cuda, exported), handle).value
        assert (result, pointer.value) == (SUCCESS, expected)


def test_get_proc_address_refuses_unknown_flags(sim):
    lookup = GET_PROC(("cuGetProcAddress_v2", sim.cuda))
    pointer = handle()
    assert lookup(b"cuInit", ctypes.byref(pointer), 12000, 1 << 8, None) == INVALID_VALUE
    assert lookup(None, ctypes.byref(pointer), 12000, 0, None) == INVALID_VALUE


def test_stream_priorities_are_clamped_to_the_context_range(cuda, on_device):
    least, greatest = ctypes.c_int(), ctypes.c_int()
    assert cuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) \
        == INVALID_CONTEXT
    on_device(0)
    assert cuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) \
        == SUCCESS
    assert greatest.value < least.value
    stream, priority, flags = handle(), ctypes.c_int(), ctypes.c_uint()
    cuda.cuStreamCreateWithPriority.argtypes = [ctypes.POINTER(handle), ctypes.c_uint,
                                                ctypes.c_int]
    assert cuda.cuStreamCreateWithPriority(ctypes.byref(stream), NON_BLOCKING, -100) == SUCCESS
    cuda.cuStreamGetPriority.argtypes = cuda.cuStreamGetFlags.argtypes = [handle, handle]
    assert cuda.cuStreamGetPriority(stream, ctypes.byref(priority)) == SUCCESS
    assert cuda.cuStreamGetFlags(stream, ctypes.byref(flags)) == SUCCESS
    assert (priority.value, flags.value) == (greatest.value, NON_BLOCKING)
    cuda.cuStreamDestroy_v2(stream)


def test_address_ranges_answer_for_driver_allocations_only(cuda, on_device):
    on_device(0)
    device = alloc(cuda, 100)
    base, size = u64(), ctypes.c_size_t()
    cuda.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(u64), ctypes.POINTER(ctypes.c_size_t),
                                             u64]
    assert cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), device + 40) \
        == SUCCESS
    assert (base.value, size.value) == (device, 100)
    host = np.zeros(4)
    assert cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                        host.ctypes.data) == NOT_FOUND
    assert cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                        device + 100) == NOT_FOUND
    cuda.cuMemFree_v2(device)


# ---- stream-ordered allocation: the device's memory pool ------------------------------------

@pytest.fixture
def pool(cuda, on_device):
    on_device(0)
    cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle]
    cuda.cuMemFreeAsync.argtypes = [u64, handle]
    cuda.cuMemPoolTrimTo.argtypes = [handle, ctypes.c_size_t]
    return cuda


def alloc_async(cuda, nbytes, stream):
    address = u64()
    assert cuda.cuMemAllocAsync(ctypes.byref(address), nbytes, stream) == SUCCESS
    return address.value


def test_a_block_freed_on_a_stream_is_reused_by_it_at_once(pool, sim):
    stream = handle()
    pool.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    first = alloc_async(pool, 256, stream)
    reuses, in_use = sim.counters()["pool_reuses"], sim.live()[0]
    assert pool.cuMemFreeAsync(first, stream) == SUCCESS
    assert sim.live()[0] == in_use - 1   # a freed block is the pool's, not a leak
    assert alloc_async(pool, 200, stream) == first            # stream order: no wait needed
    assert sim.counters()["pool_reuses"] - reuses == 1
    assert pool.cuMemFreeAsync(first, stream) == SUCCESS
    assert pool.cuMemFreeAsync(first, stream) == INVALID_VALUE   # once
    pool.cuStreamSynchronize(stream)
    pool.cuStreamDestroy_v2(stream)


def test_another_stream_reuses_a_block_only_once_its_free_has_run(pool, sim):
    sim.set_delay_us(20000)
    freeing, other = handle(), handle()
    for stream in (freeing, other):
        pool.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    block = alloc_async(pool, 256, freeing)
    pool.cuMemsetD8Async(block, 1, 256, freeing)               # work before the free
    assert pool.cuMemFreeAsync(block, freeing) == SUCCESS
    elsewhere = alloc_async(pool, 256, other)
    assert elsewhere != block                                   # the free has not run yet
    pool.cuStreamSynchronize(freeing)
    assert alloc_async(pool, 256, other) == block               # now it has
    for address in (elsewhere, block):
        pool.cuMemFreeAsync(address, other)
    sim.set_delay_us(2000)
    for stream in (freeing, other):
        pool.cuStreamSynchronize(stream)
        pool.cuStreamDestroy_v2(stream)


def test_only_pool_blocks_are_freed_in_stream_order(pool):
    ordinary = alloc(pool, 64)
    assert pool.cuMemFreeAsync(ordinary, None) == INVALID_VALUE
    pool.cuMemFree_v2(ordinary)


def test_a_block_whose_free_ran_is_no_memory_to_copy_from(pool):
    block = alloc_async(pool, 64, None)
    assert pool.cuMemFreeAsync(block, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS
    out = np.zeros(64, np.uint8)
    assert pool.cuMemcpyDtoH_v2(out.ctypes.data, block, 64) != SUCCESS


class PoolProps(ctypes.Structure):
    """CUmemPoolProps, as the driver reads it (88 bytes)."""
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("locationType", ctypes.c_int), ("locationId", ctypes.c_int),
                ("win32", ctypes.c_void_p), ("reserved", ctypes.c_ubyte * 64)]


def create_pool(cuda, device=0, alloc_type=1, location_type=1):
    pool = handle()
    status = cuda.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(
        PoolProps(allocType=alloc_type, locationType=location_type, locationId=device)))
    return status, pool


def alloc_from(cuda, nbytes, pool, stream):
    address = u64()
    cuda.cuMemAllocFromPoolAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle,
                                             handle]
    assert cuda.cuMemAllocFromPoolAsync(ctypes.byref(address), nbytes, pool, stream) == SUCCESS
    return address.value


@pytest.mark.parametrize("props, status", [
    ({"alloc_type": 0}, INVALID_VALUE),          # CU_MEM_ALLOCATION_TYPE_INVALID
    ({"location_type": 2}, INVALID_VALUE),       # a host pool: not modelled, refused
    ({"device": 7}, INVALID_DEVICE),
], ids=["allocation type", "location", "device"])
def test_a_pool_is_made_only_from_valid_properties(pool, props, status):
    assert create_pool(pool, **props)[0] == status


def test_a_created_pools_blocks_are_its_own(pool, sim):
    status, own = create_pool(pool)
    assert status == SUCCESS
    keep_everything(pool, own)                      # the synchronizations below release none
    mine = alloc_from(pool, 256, own, None)
    assert pool.cuMemFreeAsync(mine, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS       # the free has run: reusable by any stream
    from_default = alloc_async(pool, 256, None)
    assert from_default != mine                     # the default pool does not take it
    assert alloc_from(pool, 128, own, None) == mine     # its own pool does
    # Destroyed with a block in use: the block stays the application's until freed.
    assert pool.cuMemPoolDestroy(own) == SUCCESS
    assert pool.cuMemPoolDestroy(own) == INVALID_VALUE   # once
    assert pool.cuMemsetD8Async(mine, 7, 128, None) == SUCCESS
    for block in (mine, from_default):
        assert pool.cuMemFreeAsync(block, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS


def test_a_default_pool_cannot_be_destroyed(pool):
    default = handle()
    assert pool.cuDeviceGetDefaultMemPool(ctypes.byref(default), 0) == SUCCESS
    assert pool.cuMemPoolDestroy(default) == INVALID_VALUE


def test_a_created_pool_keeps_its_release_threshold(pool):
    status, own = create_pool(pool, device=0)
    threshold = ctypes.c_uint64(1 << 30)
    assert pool.cuMemPoolSetAttribute(own, 4, ctypes.byref(threshold)) == SUCCESS
    read = ctypes.c_uint64()
    assert pool.cuMemPoolGetAttribute(own, 4, ctypes.byref(read)) == SUCCESS
    assert read.value == 1 << 30
    assert pool.cuMemPoolDestroy(own) == SUCCESS


RELEASE_THRESHOLD, RESERVED_MEM_CURRENT, USED_MEM_CURRENT = 4, 5, 7
CHUNK = 2 << 20    # the simulator's pool granularity: a pool reserves whole chunks


def reserved_by(cuda, pool, attribute=RESERVED_MEM_CURRENT):
    value = ctypes.c_uint64()
    assert cuda.cuMemPoolGetAttribute(pool, attribute, ctypes.byref(value)) == SUCCESS
    return value.value


def set_release_threshold(cuda, pool, nbytes):
    value = ctypes.c_uint64(nbytes)
    assert cuda.cuMemPoolSetAttribute(pool, RELEASE_THRESHOLD, ctypes.byref(value)) == SUCCESS


def keep_everything(cuda, pool):
    """A release threshold no test reaches: synchronizations give nothing back."""
    set_release_threshold(cuda, pool, 1 << 50)


def test_trimming_a_pool_frees_only_blocks_whose_free_has_run(pool, sim):
    status, own = create_pool(pool)
    assert status == SUCCESS
    keep_everything(pool, own)
    slow = handle()
    pool.cuStreamCreate(ctypes.byref(slow), NON_BLOCKING)
    # a chunk each (a block as large as a chunk fills it)
    idle, freeing, live = (alloc_from(pool, n * CHUNK, own, None) for n in (1, 2, 3))
    assert pool.cuMemFreeAsync(idle, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS                 # idle's free has run
    sim.set_delay_us(20000)
    try:
        pool.cuMemsetD8Async(freeing, 1, 2 * CHUNK, slow)
        assert pool.cuMemFreeAsync(freeing, slow) == SUCCESS  # not run yet
        everything = reserved_by(pool, own)
        assert pool.cuMemPoolTrimTo(own, everything) == SUCCESS   # keeps as much: no change
        assert reserved_by(pool, own) == everything
        assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
        after_idle = reserved_by(pool, own)
        assert 0 < after_idle < everything                    # idle went; the others stay
        pool.cuStreamSynchronize(slow)
        assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
        assert 0 < reserved_by(pool, own) < after_idle        # freeing too; live stays
        pool.cuMemsetD8Async(live, 2, 3 * CHUNK, None)        # still the application's
        assert pool.cuMemFreeAsync(live, None) == SUCCESS
        assert pool.cuCtxSynchronize() == SUCCESS
        assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
        assert reserved_by(pool, own) == 0
    finally:
        sim.set_delay_us(2000)
        pool.cuStreamDestroy_v2(slow)
        assert pool.cuMemPoolDestroy(own) == SUCCESS
    assert pool.cuMemPoolTrimTo(own, 0) == INVALID_HANDLE     # a destroyed pool


def test_trimming_a_pool_keeps_at_least_what_it_is_asked_to_keep(pool):
    # "the pool will be guaranteed to have at least minBytesToKeep bytes reserved after the
    # operation" (cuMemPoolTrimTo): a block whose release would go below stays.
    status, own = create_pool(pool)
    assert status == SUCCESS
    keep_everything(pool, own)
    blocks = [alloc_from(pool, CHUNK, own, None) for _ in range(3)]
    for block in blocks:
        assert pool.cuMemFreeAsync(block, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS
    three = reserved_by(pool, own)
    one = three // 3
    assert pool.cuMemPoolTrimTo(own, one + 1) == SUCCESS
    assert reserved_by(pool, own) == 2 * one          # not one block: that is below the keep
    assert pool.cuMemPoolTrimTo(own, one) == SUCCESS
    assert reserved_by(pool, own) == one
    assert pool.cuMemPoolDestroy(own) == SUCCESS


def test_a_device_runs_out_of_memory_counting_its_pools_blocks(pool, sim):
    # Past the device's memory an allocation fails with CUDA_ERROR_OUT_OF_MEMORY (2), as a
    # driver's does; a pool's free block is still the pool's (reserved), until trimmed.
    OUT_OF_MEMORY = 2
    pool.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert pool.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
    used = total.value - free.value
    status, own = create_pool(pool)
    assert status == SUCCESS
    keep_everything(pool, own)
    sim.set_device_memory(used + 3 * CHUNK)
    try:
        assert pool.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
        assert (total.value, free.value) == (used + 3 * CHUNK, 3 * CHUNK)
        # a pooled block of 4 KiB reserves a whole chunk of the device's memory
        first, second = alloc(pool, CHUNK), alloc_from(pool, 4096, own, None)
        assert pool.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
        assert free.value == CHUNK
        out = u64()
        assert pool.cuMemAlloc_v2(ctypes.byref(out), 2 * CHUNK) == OUT_OF_MEMORY
        assert pool.cuMemFreeAsync(second, None) == SUCCESS
        assert pool.cuCtxSynchronize() == SUCCESS
        assert pool.cuMemAlloc_v2(ctypes.byref(out), 2 * CHUNK) == OUT_OF_MEMORY   # the pool's
        assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
        assert pool.cuMemAlloc_v2(ctypes.byref(out), 2 * CHUNK) == SUCCESS
        for block in (first, out.value):
            assert pool.cuMemFree_v2(block) == SUCCESS
    finally:
        sim.set_device_memory(0)
        pool.cuMemPoolDestroy(own)
    assert pool.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
    assert total.value == 16 << 30


def test_a_pooled_block_is_poisoned_once_its_free_has_run(pool, sim):
    # cuMemFreeAsync frees in stream order: work ordered before the free (on its stream)
    # reads the block, and the freeing stream may reuse it at once; work on another stream
    # not ordered before the free, that runs after it, touches freed memory and faults.
    sim.set_delay_us(20000)
    freeing, other = handle(), handle()
    for stream in (freeing, other):
        pool.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    scratch = alloc_async(pool, 8, other)
    pinned, host = pinned_bytes(pool, 8, 0)
    try:
        block = alloc_async(pool, 64, freeing)
        assert pool.cuMemsetD8Async(block, 3, 64, freeing) == SUCCESS       # before the free
        assert pool.cuMemFreeAsync(block, freeing) == SUCCESS
        assert alloc_async(pool, 64, freeing) == block                      # reused in order
        assert pool.cuMemsetD8Async(block, 4, 8, freeing) == SUCCESS
        assert pool.cuMemcpyDtoHAsync_v2(pinned, block, 8, freeing) == SUCCESS
        assert pool.cuStreamSynchronize(freeing) == SUCCESS
        assert host.tolist() == [4] * 8                  # no fault for work in stream order
        before = sim.counters()["freed_memory_accesses"]
        for _ in range(3):                               # the other stream is busy 60 ms
            pool.cuMemsetD8Async(scratch, 0, 8, other)
        assert pool.cuMemsetD8Async(block, 5, 8, other) == SUCCESS   # not ordered after...
        assert pool.cuMemFreeAsync(block, freeing) == SUCCESS        # ...this free: runs first
        assert pool.cuStreamSynchronize(other) == ILLEGAL_ADDRESS
        assert sim.counters()["freed_memory_accesses"] - before == 1
    finally:
        sim.set_delay_us(2000)
        # The fault is sticky: the context refuses every call until it is reset, which takes
        # its streams and pinned memory; the pool's block stays (a pool is its device's).
        reset_after_fault(pool, 0)
        assert pool.cuMemFreeAsync(scratch, None) == SUCCESS
        assert pool.cuCtxSynchronize() == SUCCESS


@pytest.mark.parametrize("synchronize", ["stream", "event", "context"])
def test_a_pool_returns_memory_past_its_release_threshold_at_the_next_synchronization(
        pool, sim, synchronize):
    # "When more than the release threshold bytes of memory are held by the memory pool, the
    # allocator will try to release memory back to the OS on the next call to stream, event
    # or context synchronize" — at that call, not before: frees that have run leave the
    # memory reserved until then; then whole chunks go, down to the threshold.
    status, own = create_pool(pool)
    assert status == SUCCESS
    set_release_threshold(pool, own, CHUNK + CHUNK // 2)
    stream, event = handle(), handle()
    pool.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    pool.cuEventCreate(ctypes.byref(event), 0)
    released = sim.counters()["pool_chunks_released"]
    try:
        blocks = [alloc_from(pool, CHUNK, own, stream) for _ in range(3)]
        for block in blocks:
            assert pool.cuMemFreeAsync(block, stream) == SUCCESS
        while pool.cuStreamQuery(stream) == NOT_READY:   # the frees run; no synchronization
            pass
        assert reserved_by(pool, own) == 3 * CHUNK
        assert reserved_by(pool, own, USED_MEM_CURRENT) == 0
        assert pool.cuEventRecord(event, stream) == SUCCESS
        call = {"stream": lambda: pool.cuStreamSynchronize(stream),
                "event": lambda: pool.cuEventSynchronize(event),
                "context": lambda: pool.cuCtxSynchronize()}[synchronize]
        assert call() == SUCCESS
        # no more than the threshold (a chunk and a half): one chunk kept, whole
        assert reserved_by(pool, own) == CHUNK
        assert sim.counters()["pool_chunks_released"] - released == 2
        set_release_threshold(pool, own, 0)              # the default: nothing kept
        assert call() == SUCCESS
        assert reserved_by(pool, own) == 0
    finally:
        pool.cuStreamDestroy_v2(stream)
        pool.cuEventDestroy_v2(event)
        assert pool.cuMemPoolDestroy(own) == SUCCESS


def test_a_pool_reserves_and_trims_whole_chunks(pool):
    # Physical memory is mapped in chunks: small blocks share one, a trim keeps every chunk
    # that holds a block in use, whole — what a pool reserves is a multiple of the chunk.
    status, own = create_pool(pool)
    assert status == SUCCESS
    keep_everything(pool, own)
    blocks = [alloc_from(pool, CHUNK // 8, own, None) for _ in range(12)]   # a chunk and a half
    assert reserved_by(pool, own) == 2 * CHUNK
    assert reserved_by(pool, own, USED_MEM_CURRENT) == 12 * CHUNK // 8
    for block in blocks[1:]:
        assert pool.cuMemFreeAsync(block, None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS
    assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
    assert reserved_by(pool, own) == CHUNK           # the first chunk holds blocks[0]
    assert pool.cuMemsetD8Async(blocks[0], 1, CHUNK // 8, None) == SUCCESS
    assert pool.cuMemFreeAsync(blocks[0], None) == SUCCESS
    assert pool.cuCtxSynchronize() == SUCCESS
    assert pool.cuMemPoolTrimTo(own, 0) == SUCCESS
    assert reserved_by(pool, own) == 0
    assert pool.cuMemPoolDestroy(own) == SUCCESS


def test_pool_tests_leave_nothing_in_use(sim):
    assert sim.live()[0] == 0


# ---- sticky faults: a context that faulted refuses everything until it is reset ------------

MISALIGNED_ADDRESS = 716
PEER_ACCESS_UNSUPPORTED, PEER_ACCESS_ALREADY_ENABLED, PEER_ACCESS_NOT_ENABLED = 217, 704, 705


def fault_the_context(cuda, stream):
    """A deliberate fault in the current context: a memset, queued on ``stream``, of memory
    freed before it runs (the simulator's poisoned frees); waited for."""
    victim = alloc(cuda, 8)
    assert cuda.cuMemFree_v2(victim) == SUCCESS
    assert cuda.cuMemsetD8Async(victim, 1, 8, stream) == SUCCESS   # enqueued: faults later
    assert cuda.cuStreamSynchronize(stream) == ILLEGAL_ADDRESS


def context_id(cuda, context=None):
    cuda.cuCtxGetId.argtypes = [handle, ctypes.POINTER(ctypes.c_ulonglong)]
    identity = ctypes.c_ulonglong()
    assert cuda.cuCtxGetId(context, ctypes.byref(identity)) == SUCCESS
    return identity.value


def test_a_fault_is_sticky_for_every_call_in_its_context(cuda, sim, on_device):
    # On a GPU a fault of a context's work (an illegal address, a misaligned one, a copy of
    # freed memory) is sticky: every later call that works in that context fails with the
    # same error — the primary context is shared with every library of the process (PyTorch,
    # CuPy), so one fault breaks the device for all of them — until the context is reset.
    context = on_device(0)
    stream, event, pinned, function = handle(), handle(), handle(), handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), 0) == SUCCESS
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), 8, 0) == SUCCESS
    live_memory = alloc(cuda, 8)
    from arrayport.gpu.kernels import ptx_image
    module = handle()
    cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(handle), ctypes.c_char_p]
    cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(handle), handle, ctypes.c_char_p]
    cuda.cuModuleUnload.argtypes = [handle]
    cuda.cuLaunchKernel.argtypes = [handle] + [ctypes.c_uint] * 7 + [
        handle, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    assert cuda.cuModuleLoadData(ctypes.byref(module), ptx_image("strided_copy")) == SUCCESS
    assert cuda.cuModuleGetFunction(ctypes.byref(function), module,
                                    b"arrayport_strided_copy") == SUCCESS
    before_id = context_id(cuda)
    host = np.zeros(8, np.uint8)
    fault_the_context(cuda, stream)
    refused = sim.counters()["sticky_refusals"]
    cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle]
    cuda.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
    cuda.cuStreamGetCtx.argtypes = [handle, ctypes.POINTER(handle)]
    params = (ctypes.c_void_p * 1)(ctypes.addressof(ctypes.create_string_buffer(2048)))
    calls = {
        "cuMemAlloc": lambda: cuda.cuMemAlloc_v2(ctypes.byref(u64()), 8),
        "cuMemAllocManaged": lambda: cuda.cuMemAllocManaged(ctypes.byref(u64()), 8, 1),
        "cuMemHostAlloc": lambda: cuda.cuMemHostAlloc(ctypes.byref(handle()), 8, 0),
        "cuMemAllocAsync": lambda: cuda.cuMemAllocAsync(ctypes.byref(u64()), 8, stream),
        "cuMemFree": lambda: cuda.cuMemFree_v2(live_memory),
        "cuMemFreeHost": lambda: cuda.cuMemFreeHost(pinned),
        "cuMemGetInfo": lambda: cuda.cuMemGetInfo_v2(ctypes.byref(ctypes.c_size_t()),
                                                     ctypes.byref(ctypes.c_size_t())),
        "cuPointerGetAttribute": lambda: cuda.cuPointerGetAttribute(
            ctypes.byref(ctypes.c_uint()), ATTR_MEMORY_TYPE, live_memory),
        "cuMemcpyHtoD": lambda: cuda.cuMemcpyHtoD_v2(live_memory, host.ctypes.data, 8),
        "cuMemcpyDtoHAsync": lambda: cuda.cuMemcpyDtoHAsync_v2(pinned, live_memory, 8, stream),
        "cuMemsetD8Async": lambda: cuda.cuMemsetD8Async(live_memory, 0, 8, None),
        "cuStreamCreate": lambda: cuda.cuStreamCreate(ctypes.byref(handle()), NON_BLOCKING),
        "cuStreamGetCtx": lambda: cuda.cuStreamGetCtx(stream, ctypes.byref(handle())),
        "cuStreamQuery": lambda: cuda.cuStreamQuery(stream),
        "cuStreamSynchronize": lambda: cuda.cuStreamSynchronize(stream),
        "cuStreamWaitEvent": lambda: cuda.cuStreamWaitEvent(stream, event, 0),
        "cuStreamDestroy": lambda: cuda.cuStreamDestroy_v2(stream),
        "cuEventCreate": lambda: cuda.cuEventCreate(ctypes.byref(handle()), 0),
        "cuEventRecord": lambda: cuda.cuEventRecord(event, stream),
        "cuEventQuery": lambda: cuda.cuEventQuery(event),
        "cuEventSynchronize": lambda: cuda.cuEventSynchronize(event),
        "cuEventDestroy": lambda: cuda.cuEventDestroy_v2(event),
        "cuCtxSynchronize": lambda: cuda.cuCtxSynchronize(),
        "cuModuleLoadData": lambda: cuda.cuModuleLoadData(ctypes.byref(handle()),
                                                          ptx_image("strided_copy")),
        "cuModuleGetFunction": lambda: cuda.cuModuleGetFunction(
            ctypes.byref(handle()), module, b"arrayport_strided_copy"),
        "cuLaunchKernel": lambda: cuda.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream,
                                                      params, None),
        "cuModuleUnload": lambda: cuda.cuModuleUnload(module),
    }
    answers = {name: call() for name, call in calls.items()}
    assert answers == {name: ILLEGAL_ADDRESS for name in calls}
    assert sim.counters()["sticky_refusals"] - refused == len(calls)
    # What still answers: the context stack, the devices, the error's own name.
    current, device, name = handle(), ctypes.c_int(), ctypes.c_char_p()
    assert cuda.cuCtxGetCurrent(ctypes.byref(current)) == SUCCESS
    assert current.value == context.value
    assert cuda.cuCtxGetDevice(ctypes.byref(device)) == SUCCESS and device.value == 0
    assert context_id(cuda) == before_id
    cuda.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    assert cuda.cuGetErrorName(ILLEGAL_ADDRESS, ctypes.byref(name)) == SUCCESS
    assert name.value == b"CUDA_ERROR_ILLEGAL_ADDRESS"
    assert cuda.cuDeviceGetCount(ctypes.byref(ctypes.c_int())) == SUCCESS
    # Another device's context is another context: untouched.
    def on_device_1():
        one, memory = handle(), u64()
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(one), 1) == SUCCESS
        assert cuda.cuCtxPushCurrent_v2(one) == SUCCESS
        try:
            return (cuda.cuMemAlloc_v2(ctypes.byref(memory), 8), cuda.cuMemFree_v2(memory))
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(handle()))
            cuda.cuDevicePrimaryCtxRelease_v2(1)
    assert in_fresh_thread(on_device_1) == (SUCCESS, SUCCESS)
    # Reset: everything of the context went with it, and it works again, a new context.
    reset_after_fault(cuda, 0)
    assert context_id(cuda) != before_id
    assert cuda.cuStreamQuery(stream) == INVALID_HANDLE
    assert cuda.cuEventQuery(event) == INVALID_HANDLE
    assert cuda.cuMemFree_v2(live_memory) == INVALID_VALUE
    assert cuda.cuCtxSynchronize() == SUCCESS
    assert cuda.cuMemFree_v2(alloc(cuda, 8)) == SUCCESS


def test_a_primary_context_reset_destroys_its_state_but_not_its_retain(cuda, sim, on_device):
    # cuDevicePrimaryCtxReset: "destroys and cleans up all resources associated with the
    # current device in the current process" — memory (device, managed, pinned), streams,
    # events, modules; "Resetting the primary context does not release it": the handle stays
    # retained, and its next use is a new context (a new cuCtxGetId). A memory pool's block
    # is its device's, not the context's: it stays (as on a GPU), its owner's to free.
    context = on_device(0)
    before = sim.live()
    modules_before = sim.live_modules()
    stream, event, pinned, module = handle(), handle(), handle(), handle()
    managed = u64()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), 0) == SUCCESS
    assert cuda.cuEventRecord(event, stream) == SUCCESS
    assert cuda.cuMemHostAlloc(ctypes.byref(pinned), 8, 0) == SUCCESS
    assert cuda.cuMemAllocManaged(ctypes.byref(managed), 8, 1) == SUCCESS
    device = alloc(cuda, 8)
    cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle]
    block = u64()
    assert cuda.cuMemAllocAsync(ctypes.byref(block), 64, stream) == SUCCESS
    from arrayport.gpu.kernels import ptx_image
    cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(handle), ctypes.c_char_p]
    cuda.cuModuleUnload.argtypes = [handle]
    assert cuda.cuModuleLoadData(ctypes.byref(module), ptx_image("strided_copy")) == SUCCESS
    assert sim.live() == (before[0] + 4, before[1] + 1, before[2] + 1)
    identity = context_id(cuda)
    assert cuda.cuDevicePrimaryCtxReset_v2(7) == INVALID_DEVICE
    assert cuda.cuDevicePrimaryCtxReset_v2(0) == SUCCESS
    assert sim.live() == (before[0] + 1, *before[1:])          # the pool's block, only
    assert sim.live_modules() == modules_before
    assert context_id(cuda) != identity                        # a new context ...
    again = handle()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(again), 0) == SUCCESS
    assert again.value == context.value                        # ... behind the same handle
    assert cuda.cuDevicePrimaryCtxRelease_v2(0) == SUCCESS     # still retained: the fixture's
    assert cuda.cuStreamSynchronize(stream) == INVALID_HANDLE  # what went is gone
    assert cuda.cuEventDestroy_v2(event) == INVALID_HANDLE
    assert cuda.cuModuleUnload(module) == INVALID_HANDLE
    for free, pointer in ((cuda.cuMemFree_v2, device), (cuda.cuMemFree_v2, managed.value),
                          (cuda.cuMemFreeHost, pinned)):
        assert free(pointer) == INVALID_VALUE
    assert cuda.cuMemsetD8Async(block.value, 1, 64, None) == SUCCESS   # still memory
    assert cuda.cuMemFreeAsync(block.value, None) == SUCCESS
    assert cuda.cuCtxSynchronize() == SUCCESS                  # usable
    assert sim.live() == before
    assert cuda.cuMemFree_v2(alloc(cuda, 8)) == SUCCESS


# ---- peer access ---------------------------------------------------------------------------

def test_peer_access_is_asked_enabled_and_disabled_as_documented(cuda, sim, on_device):
    can = ctypes.c_int(-1)
    cuda.cuDeviceCanAccessPeer.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                           ctypes.c_int]
    assert cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 1, 0) == SUCCESS and can.value == 1
    assert cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 0, 0) == SUCCESS and can.value == 0
    assert cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 0, 2) == INVALID_DEVICE
    assert cuda.cuDeviceCanAccessPeer(None, 0, 1) == INVALID_VALUE
    cuda.cuCtxEnablePeerAccess.argtypes = [handle, ctypes.c_uint]
    cuda.cuCtxDisablePeerAccess.argtypes = [handle]
    zero = on_device(0)
    assert in_fresh_thread(lambda: cuda.cuCtxEnablePeerAccess(zero, 0)) == INVALID_CONTEXT
    one = on_device(1)                                    # current: device 1's context
    assert cuda.cuCtxEnablePeerAccess(zero, 1) == INVALID_VALUE        # flags must be 0
    assert cuda.cuCtxEnablePeerAccess(one, 0) == INVALID_CONTEXT       # itself
    assert cuda.cuCtxEnablePeerAccess(handle(12345), 0) == INVALID_CONTEXT
    assert cuda.cuCtxDisablePeerAccess(zero) == PEER_ACCESS_NOT_ENABLED
    assert cuda.cuCtxEnablePeerAccess(zero, 0) == SUCCESS
    assert cuda.cuCtxEnablePeerAccess(zero, 0) == PEER_ACCESS_ALREADY_ENABLED
    assert cuda.cuCtxDisablePeerAccess(zero) == SUCCESS
    assert cuda.cuCtxDisablePeerAccess(zero) == PEER_ACCESS_NOT_ENABLED
    sim.set_peer_access(False)                            # a machine without a P2P path
    try:
        assert cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 1, 0) == SUCCESS
        assert can.value == 0
        assert cuda.cuCtxEnablePeerAccess(zero, 0) == PEER_ACCESS_UNSUPPORTED
    finally:
        sim.set_peer_access(True)


def test_peer_access_cannot_be_asked_for_from_the_environment_when_the_machine_has_none():
    code = CHILD_ON_DEVICE_0 + textwrap.dedent("""
        can = ctypes.c_int(-1)
        print(cuda.cuDeviceCanAccessPeer(ctypes.byref(can), 0, 1), can.value)
        one = ctypes.c_void_p()
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(one), 1)
        print(cuda.cuCtxEnablePeerAccess(one, 0))
    """)
    import os
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "CUDASIM_PEER_ACCESS": "0"})
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["0", "0", str(PEER_ACCESS_UNSUPPORTED)]


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class MemAccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


PROT_NONE, PROT_READ, PROT_READWRITE, LOCATION_DEVICE = 0, 1, 3, 1


def pool_access(cuda, pool, device):
    cuda.cuMemPoolGetAccess.argtypes = [ctypes.POINTER(ctypes.c_int), handle,
                                        ctypes.POINTER(MemLocation)]
    flags = ctypes.c_int(-1)
    status = cuda.cuMemPoolGetAccess(ctypes.byref(flags), pool,
                                     ctypes.byref(MemLocation(LOCATION_DEVICE, device)))
    return status, flags.value


def set_pool_access(cuda, pool, *grants):
    cuda.cuMemPoolSetAccess.argtypes = [handle, ctypes.POINTER(MemAccessDesc), ctypes.c_size_t]
    descriptors = (MemAccessDesc * len(grants))(*(
        MemAccessDesc(MemLocation(LOCATION_DEVICE, device), flags) for device, flags in grants))
    return cuda.cuMemPoolSetAccess(pool, descriptors, len(grants))


def test_a_pools_access_is_recorded_per_device(pool, sim):
    status, own = create_pool(pool, device=0)
    assert status == SUCCESS
    try:
        assert pool_access(pool, own, 0) == (SUCCESS, PROT_READWRITE)   # its own device
        assert pool_access(pool, own, 1) == (SUCCESS, PROT_NONE)        # a peer: not yet
        assert pool_access(pool, own, 2)[0] == INVALID_VALUE
        assert set_pool_access(pool, own, (1, PROT_READWRITE)) == SUCCESS
        assert pool_access(pool, own, 1) == (SUCCESS, PROT_READWRITE)
        # refused, and nothing changed: the owner's access, read-only (pools have none), a
        # device past the count
        for grants in ([(1, PROT_NONE), (0, PROT_NONE)], [(1, PROT_NONE), (1, PROT_READ)],
                       [(1, PROT_NONE), (5, PROT_READWRITE)]):
            assert set_pool_access(pool, own, *grants) == INVALID_VALUE
            assert pool_access(pool, own, 1) == (SUCCESS, PROT_READWRITE)
        assert set_pool_access(pool, own, (1, PROT_NONE)) == SUCCESS
        assert pool_access(pool, own, 1) == (SUCCESS, PROT_NONE)
        sim.set_peer_access(False)                         # no P2P path: no peer grant
        try:
            assert set_pool_access(pool, own, (1, PROT_READWRITE)) == INVALID_VALUE
        finally:
            sim.set_peer_access(True)
        default = handle()
        assert pool.cuDeviceGetDefaultMemPool(ctypes.byref(default), 1) == SUCCESS
        assert pool_access(pool, default, 1) == (SUCCESS, PROT_READWRITE)
        assert pool_access(pool, default, 0) == (SUCCESS, PROT_NONE)
    finally:
        assert pool.cuMemPoolDestroy(own) == SUCCESS


def test_a_primary_context_is_active_while_anyone_retains_it(cuda):
    # cuDevicePrimaryCtxGetState: asked without retaining (arrayport's returns of held
    # memory synchronize only the devices at work); active while retained, not after.
    flags, active, context = ctypes.c_uint(9), ctypes.c_int(9), handle()
    count = ctypes.c_int(0)
    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == SUCCESS
    device = count.value - 1      # the last device: no other test retains it
    assert cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags),
                                           ctypes.byref(active)) == SUCCESS
    was_active = active.value
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == SUCCESS
    assert cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags),
                                           ctypes.byref(active)) == SUCCESS
    assert active.value == 1 and flags.value == 0
    assert cuda.cuDevicePrimaryCtxRelease_v2(device) == SUCCESS
    assert cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags),
                                           ctypes.byref(active)) == SUCCESS
    assert active.value == was_active
    assert cuda.cuDevicePrimaryCtxGetState(99, ctypes.byref(flags),
                                           ctypes.byref(active)) == 101   # INVALID_DEVICE


def test_paused_streams_queue_work_and_run_it_once_unpaused(cuda, sim, on_device):
    # The simulator's own control for host-cost benchmarks (not CUDA's): paused, enqueueing
    # wakes no worker and nothing runs; unpaused, what was queued runs in order.
    on_device(0)
    stream = handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    pinned, host = pinned_bytes(cuda, 8, 1)
    sim.set_paused(True)
    try:
        assert cuda.cuMemsetD8Async(pinned.value, 5, 8, stream) == SUCCESS
        assert cuda.cuStreamQuery(stream) == 600              # CUDA_ERROR_NOT_READY
        assert host.tolist() == [1] * 8                        # queued, not run
    finally:
        sim.set_paused(False)
    assert cuda.cuStreamSynchronize(stream) == SUCCESS
    assert host.tolist() == [5] * 8
    assert cuda.cuMemFreeHost(pinned) == SUCCESS
    assert cuda.cuStreamDestroy_v2(stream) == SUCCESS
