"""The compiled HIP floor (src/arrayport/_csrc/hip_floor.h, through the core) on the HIP
runtime simulator (issue 54; the CUDA floor's are tests/test_gpu_floor.py): the process's
HIP driver makes its stream waits, pointer locations and current-device questions there
once the runtime is open, and the core makes its ROCm stream waits there itself, with no
Python call. Held to the ctypes path the tests' other driver instances still take: the same
answers and refusals, the same order."""

import gc
import sys

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import hip as hip_driver

pytestmark = pytest.mark.gpu

from vendors import ROCM, leaks  # noqa: E402

if ROCM.available() is not None or ROCM.simulator is None:
    pytest.skip(f"the HIP simulator: {ROCM.available() or 'not loaded'}",
                allow_module_level=True)

VALUES = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) + 1


@pytest.fixture
def streams():
    simulator = ROCM.simulator
    before = leaks(ROCM)
    made = ROCM.stream(0), ROCM.stream(0)
    simulator.set_delay_us(30000)
    yield made
    simulator.set_delay_us(2000)
    gc.collect()
    for stream in made:
        stream.synchronize()
        stream.close()
    assert leaks(ROCM) == before


def ctypes_driver():
    """Another instance over the same library: not the floor's owner, so its own ctypes
    calls."""
    return hip_driver.HipDriver(hip_driver._LIBRARY, hip_driver._SYMBOLS)


def test_the_process_driver_waits_through_the_floor_and_keeps_one_event(streams):
    producer, consumer = streams
    assert _core.hip_floor_ready() and hip_driver.driver._on_floor()
    hip_driver.driver.make_stream_wait(0, int(consumer), int(producer))
    events, waits = _core.hip_floor_counts()
    hip_driver.driver.make_stream_wait(0, int(consumer), int(producer))
    assert _core.hip_floor_counts() == (events, waits + 1) and events >= 1


def test_the_core_s_rocm_stream_waits_reach_the_floor_without_python(streams):
    producer, consumer = streams
    filler = ROCM.array(VALUES, stream=producer, busy=3)
    pending = ap.view(VALUES).copy(device="rocm:0", stream=int(producer))
    pending.__dlpack__(stream=int(consumer))            # warm
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_filename)

    _, waits = _core.hip_floor_counts()
    sys.setprofile(profile)
    try:
        capsule = pending.__dlpack__(stream=int(consumer))
    finally:
        sys.setprofile(None)
    assert _core.hip_floor_counts()[1] == waits + 1
    assert not [name for name in called if "arrayport" in name], called
    np.testing.assert_array_equal(ROCM.read_on(int(consumer), ap.from_dlpack(capsule)),
                                  VALUES)
    del pending, capsule
    filler.free()


def test_a_stand_in_wait_or_library_takes_the_core_s_waits_back_to_the_driver(streams,
                                                                            monkeypatch):
    producer, consumer = streams
    pending = ap.view(VALUES).copy(device="rocm:0", stream=int(producer))
    seen = []
    real = hip_driver.driver.make_stream_wait
    monkeypatch.setattr(hip_driver.driver, "make_stream_wait",
                        lambda *args: seen.append(args) or real(*args))
    _, waits = _core.hip_floor_counts()
    pending.__dlpack__(stream=int(consumer))
    assert seen == [(0, int(consumer), int(producer))]     # through the stand-in wait
    assert _core.hip_floor_counts()[1] == waits + 1       # which made it on the floor
    monkeypatch.undo()                                     # taken out: from C again
    pending.__dlpack__(stream=int(consumer))
    assert len(seen) == 1 and _core.hip_floor_counts()[1] == waits + 2
    with monkeypatch.context() as patch:                  # on the class, too
        patch.setattr(hip_driver.HipDriver, "make_stream_wait",
                      lambda self, *args: seen.append(args))
        pending.__dlpack__(stream=int(consumer))
        assert len(seen) == 2 and _core.hip_floor_counts()[1] == waits + 2
    pending.__dlpack__(stream=int(consumer))
    assert len(seen) == 2 and _core.hip_floor_counts()[1] == waits + 3
    del pending


@pytest.mark.parametrize("kind", ["device", "pinned", "second device", "pageable"])
def test_the_floor_locates_memory_as_the_ctypes_path_does(kind):
    other = ctypes_driver()
    assert not other._on_floor()
    if kind == "pageable":
        host = np.zeros(4)
        pointer, expected = host.ctypes.data, None
    else:
        array = ROCM.array(VALUES, kind="pinned" if kind == "pinned" else "device",
                           device=1 if kind == "second device" else 0)
        pointer = array.ptr + 8
        expected = {"device": (10, 0), "pinned": (11, 0), "second device": (10, 1)}[kind]
    answers = []
    for driver in (hip_driver.driver, other):
        try:
            answers.append(driver.locate_pointer(pointer))
        except BufferError as error:
            answers.append(str(error))
    if expected is None:
        assert answers[0] == answers[1] == (f"rocm: pointer {pointer:#x} is not memory HIP "
                                            f"knows (not device, pinned or managed memory)")
    else:
        assert answers[0] == answers[1] == expected
        array.free()
    assert hip_driver.driver.current_device() == other.current_device() == 0


def test_the_floor_and_the_ctypes_path_order_the_same(streams):
    """The same wait made both ways: each consumer reads the producer's late write."""
    producer, consumer = streams
    other = ctypes_driver()
    for driver in (hip_driver.driver, other):
        array = ROCM.array(VALUES * 2 if driver is other else VALUES, stream=producer,
                           busy=3)
        driver.make_stream_wait(0, int(consumer), int(producer))
        view = ap.view(array)
        with ap.no_implicit_sync():
            np.testing.assert_array_equal(ROCM.read_on(int(consumer), view),
                                          VALUES * 2 if driver is other else VALUES)
        del view
        array.free()
    other.close()


def test_a_wait_across_devices_runs_each_call_on_its_own_device(streams):
    """A producer on device 1, a consumer on device 0's null stream: the record on device
    1, the wait with device 0 current — and the thread's current device as it was."""
    producer, consumer = streams
    other_device = ROCM.stream(1)
    try:
        array = ROCM.array(VALUES, device=1, stream=other_device, busy=3)
        hip_driver.driver.make_stream_wait(0, 0, int(other_device), 1)
        assert hip_driver.driver.current_device() == 0
        view = ap.view(array)
        with ap.no_implicit_sync():
            on_device_0 = view.copy(device="rocm:0", stream=0)
        np.testing.assert_array_equal(ap.to_numpy(on_device_0, copy=True), VALUES)
        del view, on_device_0
        array.free()
    finally:
        other_device.synchronize()
        other_device.close()


def test_a_failed_call_is_the_drivers_error_worded_as_the_ctypes_path_words_it():
    answers = []
    for driver in (hip_driver.driver, ctypes_driver()):
        with pytest.raises(BufferError) as refused:
            driver.make_stream_wait(0, 0, 0xDEAD0000)     # a stream that is none
        answers.append(str(refused.value))
        assert driver.current_device() == 0               # as it was
        if driver is not hip_driver.driver:
            driver.close()
    assert answers[0] == answers[1]
    assert answers[0].startswith("rocm: hipEventRecord failed with error ")
    with pytest.raises(BufferError, match=r"^rocm: hipSetDevice failed with error 101"):
        _core.hip_stream_wait(0, 0, 0, 99)


def test_pinned_memory_written_on_a_second_devices_stream_is_waited_for_there(streams):
    """Pinned memory names no device: the wait is made on the device of the producer's
    stream (hipStreamGetDevice), by the floor and by the ctypes path alike."""
    producer, consumer = streams
    other_device = ROCM.stream(1)
    try:
        for driver in (hip_driver.driver, ctypes_driver()):
            array = ROCM.array(VALUES, device=1, stream=other_device, kind="pinned", busy=3)
            driver.make_stream_wait(-1, 0, int(other_device), -1)
            assert driver.current_device() == 0
            view = ap.view(array, stream=int(other_device))     # the import's wait, too
            assert view.device == (11, 0)
            other_device.synchronize()
            del view
            array.free()
            if driver is not hip_driver.driver:
                driver.close()   # its own reused events
    finally:
        other_device.synchronize()
        other_device.close()


def test_a_cai_import_of_hip_memory_asks_no_python_of_arrayport(streams):
    """hip-python's interface over HIP memory: CUDA's floor says the memory is not CUDA's,
    HIP's floor says where it is and makes the consumer's wait — all from C."""
    producer, consumer = streams
    array = ROCM.array(VALUES, stream=producer, busy=2)
    ap.view(array, stream=int(consumer))            # warm
    for stream in (None, int(consumer)):
        called = []

        def profile(frame, event, arg):
            if event == "call":
                called.append(frame.f_code.co_filename)

        sys.setprofile(profile)
        try:
            view = ap.view(array, stream=stream)
        finally:
            sys.setprofile(None)
        assert view.device == (10, 0)
        assert [name for name in called if "arrayport" in name] == [], called
        del view
    producer.synchronize()
    array.free()


def test_a_rocm_view_is_not_shared_with_other_processes_and_says_the_host_route():
    """HIP device memory has no sharing route yet (gpu.vendor's refusal): share() and
    pickling under "share" refuse with a BufferError naming the host route; empty_shared
    on a ROCm device is refused too. Nothing is kept."""
    import pickle
    view = ap.view(VALUES).copy(device="rocm:0")
    with pytest.raises(BufferError, match=r"cannot be shared with other processes yet.*"
                                          r"copy\(device='cpu'\)\.share\(\)"):
        view.share()
    with ap.device_pickling("share"), pytest.raises(BufferError, match="other processes"):
        pickle.dumps(view)
    with pytest.raises(ValueError, match="empty_shared: device must be 'cpu' or 'cuda:N'"):
        ap.empty_shared((2,), "float32", device="rocm:0")
    from arrayport.gpu import ipc
    assert ipc.live_exports() == 0
