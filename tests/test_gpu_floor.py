"""The compiled CUDA floor (src/arrayport/_csrc/cuda_floor.h, through the core) on the CUDA
driver simulator: the stream waits of the process's driver are made there, with no Python
between the core and the driver, and they are held to the ctypes path they replace (which
still serves the other driver instances, the tests' stand-in libraries and a fork's child):
the same driver calls, the same order on the GPU, the same errors."""

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks, run_on_the_simulator,  # noqa: E402,F401
                          simulator, simulator_resets_contexts, slow_streams, streams)
from sim_arrays import DeviceArray  # noqa: E402

VALUES = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) + 1


def test_the_process_driver_waits_through_the_floor(streams):
    producer, consumer = streams
    assert _core.cuda_floor_ready()
    array = DeviceArray(VALUES, stream=producer, busy=2)
    view = ap.view(array)
    events, waits = _core.cuda_floor_counts()
    ap.view(view, stream=int(consumer))          # an export to the consumer's stream
    assert _core.cuda_floor_counts() == (max(events, 1), waits + 1)
    assert cuda_driver.driver.cached_events() >= 1
    del view
    array.free()


@needs_simulator
def test_the_floor_makes_the_calls_the_ctypes_path_makes_and_orders_the_same(streams,
                                                                            slow_streams):
    producer, consumer = streams
    ctypes_driver = cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)
    assert not ctypes_driver._on_floor()           # another instance: its own ctypes calls
    made = {}
    try:
        for name, driver in (("floor", cuda_driver.driver), ("ctypes", ctypes_driver)):
            array = DeviceArray(VALUES, stream=producer, busy=3)
            driver.make_stream_wait(0, int(consumer), int(producer))    # warm: the event
            before = simulator.counters()
            driver.make_stream_wait(0, int(consumer), int(producer))
            after = simulator.counters()
            made[name] = {call: after[call] - before[call] for call in after
                          if after[call] != before[call]}
            # the consumer's read, ordered by the wait alone, sees the producer's write
            out = ap.view(np.zeros_like(VALUES))
            cuda_driver.driver.copy_async(0, out.ptr, array.ptr, VALUES.nbytes,
                                          int(consumer))
            consumer.synchronize()
            assert np.array_equal(ap.to_numpy(out), VALUES), name
            array.free()
        assert made["floor"] == made["ctypes"], made
        assert made["floor"].get("cuEventRecord") == made["floor"].get(
            "cuStreamWaitEvent") == 1 and "cuEventCreate" not in made["floor"]
    finally:
        ctypes_driver.close()


def test_a_default_stream_waits_in_its_device_s_context(streams):
    producer, _ = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    # the legacy stream (1) of device 1 waits for device 0's producer: a wait across devices
    cuda_driver.driver.make_stream_wait(1, 1, int(producer), 0)
    host = ap.view(array).copy(device="cuda:1", stream=1).copy(device="cpu", stream=1)
    assert np.array_equal(ap.to_numpy(host), VALUES)
    array.free()


def test_a_bad_stream_handle_is_the_ctypes_path_s_error(streams):
    _, consumer = streams
    ctypes_driver = cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)
    errors = []
    try:
        for driver in (cuda_driver.driver, ctypes_driver):
            with pytest.raises(BufferError) as caught:
                driver.make_stream_wait(0, int(consumer), 0xDEAD000)  # no such stream
            errors.append(str(caught.value))
    finally:
        ctypes_driver.close()
    assert errors[0] == errors[1] and errors[0].startswith("cuda: cuStreamGetCtx failed")


def test_the_primary_context_is_the_floor_s_and_the_same_for_every_caller():
    floor_context = _core.cuda_primary_context(0)
    assert cuda_driver.driver.primary_context(0).value == floor_context
    assert 0 in cuda_driver.driver.retained_devices()
    with pytest.raises(BufferError, match="cuda: cuDeviceGet failed"):
        _core.cuda_primary_context(99)


def test_the_core_s_stream_waits_reach_the_floor_without_python(streams):
    # An export to a consumer's stream, and an exchange of a View with pending work: the
    # core asks no Python driver method and no hook (the floor is called from C).
    import sys
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    view = ap.view(array)
    ap.view(view, stream=int(consumer))          # warm: the floor's event exists
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_filename)

    _, waits = _core.cuda_floor_counts()
    sys.setprofile(profile)
    try:
        ap.view(view, stream=int(consumer))
    finally:
        sys.setprofile(None)
    assert _core.cuda_floor_counts()[1] == waits + 1
    assert not [name for name in called if "arrayport" in name], called
    del view
    array.free()


def test_a_stand_in_wait_or_library_takes_the_core_s_waits_back_to_the_driver(streams,
                                                                            monkeypatch):
    # The tests' stand-in waits and libraries (and a fork's child) must see every wait: the
    # core calls the floor itself only while the process's driver works over its library
    # with its own stream wait, and again once the stand-in is taken out.
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    view = ap.view(array)
    seen = []
    real = cuda_driver.driver.make_stream_wait
    monkeypatch.setattr(cuda_driver.driver, "make_stream_wait",
                        lambda *args: seen.append(args) or real(*args))
    _, waits = _core.cuda_floor_counts()
    ap.view(view, stream=int(consumer))
    assert seen == [(0, int(consumer), int(producer))]     # through the stand-in wait
    assert _core.cuda_floor_counts()[1] == waits + 1       # which made it on the floor
    monkeypatch.undo()                                      # taken out: from C again
    ap.view(view, stream=int(consumer))
    assert len(seen) == 1 and _core.cuda_floor_counts()[1] == waits + 2
    monkeypatch.setattr(cuda_driver.driver, "make_stream_wait",
                        lambda *args: seen.append(args) or real(*args))
    stand_in = cuda_driver.NativeLibrary("cuda", "a stand-in", ("libnothing.so",),
                                         cuda_driver.CudaUnavailable, {}, lambda lib: None)
    monkeypatch.setattr(cuda_driver.driver, "library", stand_in)
    with pytest.raises(cuda_driver.CudaUnavailable):
        ap.view(view, stream=int(consumer))       # through the driver, which has none
    assert len(seen) == 2
    monkeypatch.undo()
    del view
    array.free()


# ---- a CUDA Array Interface import's pointer, located by the floor --------------------------

def _located_both_ways(pointer, monkeypatch):
    """(the floor's answer or error, the ctypes path's) for ``pointer``, in this thread."""
    answers = []
    for on_floor in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(cuda_driver.driver, "_on_floor", lambda: on_floor)
            try:
                answers.append(cuda_driver.driver.locate_pointer(pointer))
            except BufferError as error:
                answers.append(str(error))
    return answers


@pytest.mark.parametrize("kind,device,expected", [
    ("device", 0, (2, 0)), ("device", 1, (2, 1)), ("pinned", 0, (3, 0)),
    ("managed", 0, (13, 0))])
def test_the_floor_locates_memory_as_the_ctypes_path_does(kind, device, expected, monkeypatch):
    import threading
    array = DeviceArray(VALUES, device=device, kind=kind)
    try:
        floor, ctypes_path = _located_both_ways(array.ptr, monkeypatch)
        assert floor == ctypes_path == expected
        # A thread that never touched CUDA has no current context: both make one current.
        answers = []
        thread = threading.Thread(target=lambda: answers.append(
            _located_both_ways(array.ptr, monkeypatch)))
        thread.start()
        thread.join()
        assert answers == [[expected, expected]]
        assert ap.view(array).device == ap.Device(*expected)   # the core, from C
    finally:
        array.free()


def test_memory_cuda_does_not_know_is_refused_alike():
    host = np.zeros(4, np.float32)
    pointer = host.ctypes.data
    floor, ctypes_path = _located_both_ways(pointer, pytest.MonkeyPatch())
    assert floor == ctypes_path == (f"cuda: pointer {pointer:#x} is not memory CUDA knows "
                                    f"(not device, pinned or managed memory)")
    interface = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (pointer, False)}
    holder = type("Holder", (), {"__cuda_array_interface__": interface})()
    with pytest.raises(BufferError, match="is not memory CUDA knows"):
        ap.view(holder)


def test_an_empty_import_is_on_the_current_device_from_c_as_from_python(monkeypatch):
    from sim_arrays import Context
    import threading
    interface = {"version": 3, "shape": (0, 3), "typestr": "<f4", "data": (0, False)}
    holder = type("Holder", (), {"__cuda_array_interface__": interface})()
    with Context(1):
        assert ap.view(holder).device == ap.Device("cuda:1")
        assert _core.cuda_current_device() == 1
        monkeypatch.setattr(cuda_driver.driver, "_on_floor", lambda: False)
        assert cuda_driver.driver.current_device() == 1
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        (_core.cuda_current_device(), ap.view(holder).device)))
    thread.start()
    thread.join()
    assert answers == [(0, ap.Device("cuda:0"))]   # no context current: device 0


def test_a_cai_import_asks_no_python_of_arrayport(streams):
    import sys
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    ap.view(array, stream=int(consumer))            # warm
    for stream in (None, int(consumer)):
        called = []

        def profile(frame, event, arg):
            if event == "call":
                called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

        sys.setprofile(profile)
        try:
            view = ap.view(array, stream=stream)
        finally:
            sys.setprofile(None)
        assert not [name for name in called if "/arrayport/" in name], called
        assert view.device == ap.Device("cuda:0")
    del view
    array.free()


def test_a_stand_in_locate_pointer_takes_the_core_s_cai_imports_back(monkeypatch):
    array = DeviceArray(VALUES, device=1)
    asked = []
    monkeypatch.setattr(cuda_driver.driver, "locate_pointer",
                        lambda pointer: asked.append(pointer) or (2, 7))
    assert ap.view(array).device == ap.Device("cuda:7") and asked == [array.ptr]
    monkeypatch.undo()
    assert ap.view(array).device == ap.Device("cuda:1") and asked == [array.ptr]
    array.free()


# ---- what the tests' stand-ins and another library's reset must not fool -------------------

def test_a_stand_in_method_on_the_class_takes_the_core_s_waits_back(streams, monkeypatch):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    view = ap.view(array)
    seen = []
    real = cuda_driver.CudaDriver.make_stream_wait
    monkeypatch.setattr(cuda_driver.CudaDriver, "make_stream_wait",
                        lambda self, *args: seen.append(args) or real(self, *args))
    ap.view(view, stream=int(consumer))
    assert seen == [(0, int(consumer), int(producer))]     # asked of the driver
    monkeypatch.undo()
    ap.view(view, stream=int(consumer))
    assert len(seen) == 1                                   # the floor's again, from C
    monkeypatch.setattr(cuda_driver.driver, "_on_floor", lambda: False)
    assert not _core.set_cuda_floor_direct(_core.set_cuda_floor_direct(False))
    monkeypatch.undo()
    assert _core.set_cuda_floor_direct(_core.set_cuda_floor_direct(True))
    del view
    array.free()


@needs_simulator
@pytest.mark.skipif(not simulator_resets_contexts(),
                    reason="this simulator has no cuDevicePrimaryCtxReset")
def test_stream_waits_go_on_after_another_library_resets_the_device():
    # cuDevicePrimaryCtxReset (cudaDeviceReset) destroys the context's events and keeps its
    # handle: the reused event must be made again, by the floor and by the ctypes path, and
    # the dead one never used nor destroyed (the simulator refuses a destroyed event).
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap
        from arrayport import _core
        from arrayport.gpu import cuda as cuda_driver
        from sim_arrays import Context, DeviceArray, Stream
        values = np.arange(12, dtype=np.float32)

        def exchanged(driver=None):
            producer, consumer = Stream(0), Stream(0)
            array = DeviceArray(values, stream=producer, busy=2)
            if driver is None:
                ap.view(ap.view(array), stream=int(consumer))   # the core, on the floor
            else:
                driver.make_stream_wait(0, int(consumer), int(producer))
            out = ap.view(np.zeros_like(values))
            cuda_driver.driver.copy_async(0, out.ptr, array.ptr, values.nbytes, int(consumer))
            consumer.synchronize()
            result = np.array(ap.to_numpy(out))
            array.free()
            producer.close(); consumer.close()
            return result

        ctypes_driver = cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)
        for driver in (None, ctypes_driver):
            assert np.array_equal(exchanged(driver), values)
        library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
        assert library.cuDevicePrimaryCtxReset_v2(0) == 0       # another library resets cuda:0
        with Context(0):
            for driver in (None, ctypes_driver):
                assert np.array_equal(exchanged(driver), values)
        ctypes_driver.close()
        print("ok", _core.cuda_floor_counts()[0])
    """)
    assert output.strip().startswith("ok")
