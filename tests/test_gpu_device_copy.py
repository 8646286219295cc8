"""A device copy the core issues itself (src/arrayport/_core_device_copy.pxi) on the CUDA
driver simulator, held to the general path it shortcuts (arrayport/gpu/copies.py): the same
bytes, the same View, the same driver work, the same lifetimes — on plain and strange
arrays — or the general path's answer where the shortcut does not serve."""

import gc
import sys

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks, simulator,  # noqa: E402,F401
                          slow_streams, streams)
from sim_arrays import DeviceArray  # noqa: E402

VALUES = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) + 1


class _Called:
    """Counts the general path's copies (gpu/copies.py's copy_view, the copy hook's)."""

    def __init__(self, monkeypatch):
        from arrayport.gpu import copies
        self.count = 0
        real = copies.copy_view

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(copies, "copy_view", counted)


def general(make):
    """``make()`` with the core's own copies off: the general path makes every copy."""
    previous = _core.set_cuda_floor_direct(False)
    try:
        return make()
    finally:
        _core.set_cuda_floor_direct(previous)


def described(view):
    return (view.shape, view.strides, view.dtype, view.nbytes, str(view.device), view.readonly,
            view.is_copy, view.is_c_contiguous, view.protocol, _core.pending_stream(view),
            _core.producer_stream(view))


def warm(source, stream):
    """One copy through the general path first: arrayport's pool on the device is made
    (and published to the core) there."""
    general(lambda: source.copy(stream=stream))
    gc.collect()


@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "float4",
                                  "float6 padded", "pending"])
def test_the_core_s_copy_is_the_general_path_s(streams, kind, monkeypatch):
    producer, consumer = streams
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5),
              "float6 padded": (VALUES % 32).astype(np.uint8)}.get(kind, VALUES)
    array = DeviceArray(np.asarray(values), stream=producer, busy=3 if kind == "pending" else 0)
    source = ap.view(array)
    if kind in ("float4", "float6 padded"):
        producer.synchronize()
    if kind == "offset":
        source = source[2:]                       # C-contiguous, inside a larger allocation
    elif kind == "read-only":
        source = source.as_readonly()
    elif kind == "float4":                        # packed, two elements a byte
        source = _core.view_from_pointer(array.ptr, (8, 48), None, "float4_e2m1fn",
                                         readonly=False, owner=array, device=(2, 0),
                                         protocol="test")
    elif kind == "float6 padded":                 # one element a byte
        source = _core.view_from_pointer(array.ptr, (8, 6), None,
                                         ap.DType("float6_e2m3fn", padded=True),
                                         readonly=False, owner=array, device=(2, 0),
                                         protocol="test")
    elif kind != "pending":
        producer.synchronize()
    warm(source, int(consumer))
    called = _Called(monkeypatch)
    issued = source.copy(stream=int(consumer))
    assert called.count == 0                      # no general path: the core's own
    reference = general(lambda: source.copy(stream=int(consumer)))
    assert called.count == 1
    assert described(issued) == described(reference)
    assert issued.readonly is False and issued.is_copy
    assert issued.ptr != reference.ptr != source.ptr
    consumer.synchronize()
    assert contents(issued) == contents(reference) == contents(source)
    del issued, reference, source
    array.free()


def test_the_core_s_copy_asks_no_python_of_arrayport(streams):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    source = ap.view(array)
    warm(source, int(consumer))
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    for stream in (int(consumer), None):
        sys.setprofile(profile)
        try:
            copy = source.copy(stream=stream)
        finally:
            sys.setprofile(None)
        assert not [name for name in called if "/arrayport/" in name], called
        del copy
    del source
    array.free()


@needs_simulator
def test_the_core_s_copy_does_the_driver_work_the_general_path_does(streams):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    source = ap.view(array)
    warm(source, int(consumer))
    made = {}
    kept = []
    for name, make in (("core", lambda: source.copy(stream=int(consumer))),
                       ("general", lambda: general(
                           lambda: source.copy(stream=int(consumer))))):
        make()                                    # warm: events, the pool's block
        gc.collect()
        before = simulator.counters()
        kept.append(make())
        after = simulator.counters()
        made[name] = {call: after[call] - before[call] for call in after
                      if after[call] != before[call] and call != "cuCtxGetCurrent"}
    # The same allocation, transfer, waits and ids; no host wait. (The general path asks
    # the current context more often: ctypes' context guards, not work.)
    assert made["core"] == made["general"], made
    assert made["core"].get("host_synchronizations", 0) == 0
    assert made["core"]["cuMemAllocFromPoolAsync"] == made["core"]["cuMemcpyAsync"] == 1
    del kept, source
    array.free()


def test_a_dead_copy_s_block_is_held_with_its_source_as_the_general_path_holds_it(streams):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer)
    source = ap.view(array)[1:]
    warm(source, int(consumer))
    driver = cuda_driver.driver
    counts = {}
    for name, make in (("core", lambda: source.copy(stream=int(consumer))),
                       ("general", lambda: general(
                           lambda: source.copy(stream=int(consumer))))):
        driver._return_held(driver._result_pool(0), driver._result_pool(0).take())
        blocks, results = driver.held_blocks(), driver.held_results()
        copy = make()
        del copy
        gc.collect()
        counts[name] = (driver.held_blocks() - blocks, driver.held_results() - results)
    assert counts["core"] == counts["general"] == (1, 2), counts   # the block, its source
    del source
    array.free()


def test_where_the_core_does_not_serve_the_general_path_answers(streams, monkeypatch):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer)
    source = ap.view(array)
    warm(source, int(consumer))
    called = _Called(monkeypatch)
    ap.view(array).T.copy(stream=int(consumer))                    # strided: the kernel
    source.copy(device="cuda:0", stream=int(consumer))             # a device named
    source.copy(device="cuda:1", stream=1)                         # another device
    assert called.count == 3
    managed = DeviceArray(VALUES, kind="managed")
    before = called.count
    assert contents(ap.view(managed).copy(stream=int(consumer))) == VALUES.tobytes()
    assert called.count == before + 1                              # managed memory
    with pytest.raises(ValueError, match="stream 0 is ambiguous on CUDA and disallowed"):
        source.copy(stream=0)
    with pytest.raises(ValueError, match="stream=-1 names no stream"):
        source.copy(stream=-1)
    managed.free()
    del source
    array.free()


def test_a_stream_of_another_device_takes_the_general_path(streams, monkeypatch):
    from sim_arrays import Stream
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer)
    source = ap.view(array)
    warm(source, int(consumer))
    other = Stream(1)
    called = _Called(monkeypatch)
    try:
        copy = source.copy(stream=int(other))     # the general path decides (a plain block)
        assert called.count == 1
        other.synchronize()
        assert contents(copy) == VALUES.tobytes()
        del copy
    finally:
        gc.collect()
        other.synchronize()
        other.close()
    del source
    array.free()


def test_the_core_s_copy_on_the_second_device_stays_there(monkeypatch):
    # The path picks its device from the source: a copy of cuda:1 memory on a cuda:1
    # stream is the core's, lands on cuda:1 and reads the same as the general path's.
    from sim_arrays import Stream
    stream = Stream(1)
    array = DeviceArray(VALUES, device=1, stream=stream)
    source = ap.view(array)
    try:
        warm(source, int(stream))
        called = _Called(monkeypatch)
        issued = source.copy(stream=int(stream))
        assert called.count == 0
        reference = general(lambda: source.copy(stream=int(stream)))
        assert described(issued) == described(reference)
        assert str(issued.device) == "cuda:1"
        stream.synchronize()
        assert contents(issued) == contents(reference) == VALUES.tobytes()
        del issued, reference
    finally:
        gc.collect()
        stream.synchronize()
        del source
        array.free()
        stream.close()
