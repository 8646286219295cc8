"""The ROCm copies the core issues itself (src/arrayport/_core_hip_copy.pxi) on the HIP
runtime simulator, held to the general path they shortcut (arrayport/gpu/copies.py): the
same bytes, the same View, the same runtime work, the same lifetimes — or the general
path's answer where the shortcut does not serve (the CUDA counterpart:
tests/test_gpu_device_copy.py)."""

import ctypes
import gc
import sys
import weakref

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import hip as hip_driver

pytestmark = pytest.mark.gpu

from core_copies import GeneralCopies, described, through_general_path  # noqa: E402
from vendors import ROCM, leaks  # noqa: E402

if ROCM.available() is not None or ROCM.simulator is None:
    pytest.skip(f"the HIP simulator: {ROCM.available() or 'not loaded'}",
                allow_module_level=True)

VALUES = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) + 1
ROCM_TYPE = 10


_warm_copies = []   # warm()'s, until the end of the test


@pytest.fixture
def streams():
    simulator = ROCM.simulator
    before = leaks(ROCM)
    made = ROCM.stream(0), ROCM.stream(0)
    simulator.set_delay_us(8000)   # a pending write outlasts the copy queued after it
    yield made
    simulator.set_delay_us(2000)
    _warm_copies.clear()
    gc.collect()
    for stream in made:
        stream.synchronize()
        stream.close()
    assert leaks(ROCM) == before


def general(make):
    """``make()`` with the core's own ROCm copies off: the general path makes every copy."""
    return through_general_path(_core.set_hip_floor_direct, make)


def contents(view, stream):
    """The bytes of a copy's result as a consumer on ``stream`` reads them."""
    if view.device.type == ap.DeviceType.CPU:
        return ctypes.string_at(view.ptr, view.nbytes)
    flat = _core.view_from_pointer(view.ptr, (view.nbytes,), None, "uint8", readonly=True,
                                   owner=view, device=tuple(view.device), protocol="test")
    return ROCM.read_on(stream, flat).tobytes()


# Strided layouts (the plan's 2-D transfers, _csrc/transfer_runs.h), each a strange case of
# it: one element a row (transposed), wide rows (a row slice), a negative pitch (reversed:
# row by row), a zero pitch (broadcast: row by row), a permuted batch (outer transfers),
# 16- and 1-byte elements, a misaligned start.
STRIDED = {
    "transposed": lambda v: v.T,
    "row slice": lambda v: v[:, 1:5],
    "every other, reversed": lambda v: v[::-1, ::2],
    "broadcast": lambda v: _core.view_from_pointer(v.ptr, (5, 6), (0, 4), "float32",
                                                   readonly=True, owner=v,
                                                   device=(ROCM_TYPE, 0), protocol="test"),
    "permuted batch": lambda v: v.reshape(2, 4, 6).permute(0, 2, 1),
    "complex128 transposed": lambda v: v.T,
    "int8 transposed, misaligned": lambda v: v[1:, 3:35].T,
}
STRANGE_VALUES = {
    "complex128 transposed": (VALUES + 1j * VALUES).astype(np.complex128),
    "int8 transposed, misaligned": np.arange(9 * 40, dtype=np.int8).reshape(9, 40),
}


def expected_of(kind, values):
    """What NumPy makes of ``kind``'s layout of ``values``."""
    if kind == "broadcast":
        return np.broadcast_to(values.reshape(-1)[:6], (5, 6))
    if kind == "permuted batch":
        return values.reshape(2, 4, 6).transpose(0, 2, 1)
    return {"transposed": lambda a: a.T, "row slice": lambda a: a[:, 1:5],
            "every other, reversed": lambda a: a[::-1, ::2],
            "complex128 transposed": lambda a: a.T,
            "int8 transposed, misaligned": lambda a: a[1:, 3:35].T,
            "offset": lambda a: a[2:]}.get(kind, lambda a: a)(values)


def device_source(kind, producer):
    """A ROCm View of VALUES (or a strange array of them), its write still pending on
    ``producer`` where ``kind`` says so, and the array holding it."""
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5),
              **STRANGE_VALUES}.get(kind, VALUES)
    array = ROCM.array(np.asarray(values), stream=producer, busy=3 if kind == "pending" else 0)
    if kind != "pending":
        producer.synchronize()
    source = ap.view(array)
    if kind == "offset":
        source = source[2:]                       # C-contiguous, inside a larger allocation
    elif kind == "read-only":
        source = source.as_readonly()
    elif kind == "float4":                        # packed, two elements a byte
        source = _core.view_from_pointer(array.ptr, (8, 48), None, "float4_e2m1fn",
                                         readonly=False, owner=array, device=(ROCM_TYPE, 0),
                                         protocol="test")
    elif kind in STRIDED:
        source = STRIDED[kind](source)
        assert not source.is_c_contiguous
    return source, array


def warm(source, device, stream):
    """One copy through the general path first: it publishes the device's results (how
    their memory is given back) to the core. Of other memory, on the null stream: a copy
    of ``source`` on ``stream`` would order ``stream`` after ``source``'s pending work, and
    a core's copy that forgot to would pass."""
    _warm_copies.append(general(lambda: ap.view(VALUES).copy(device="rocm:0")))
    # kept until the test's end: HIP's free waits for the device's work (all of it)


# Each target in one of its forms (how each form is read is the shared _copy_target's,
# held for every form by tests/test_gpu_device_copy.py).
TARGETS = {"own (None)": None, "own Device": ap.Device("rocm:0"), "cpu": "cpu",
           "cpu tuple": (1, 0)}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "float4",
                                  "pending", *STRIDED])
def test_the_core_s_copy_of_device_memory_is_the_general_path_s(streams, kind, target,
                                                                monkeypatch):
    producer, consumer = streams
    source, array = device_source(kind, producer)
    device = TARGETS[target]
    warm(source, device, int(consumer))
    called = GeneralCopies(monkeypatch)
    synchronized = ROCM.simulator.counters()["host_synchronizations"]
    issued = source.copy(device=device, stream=int(consumer))
    assert called.count == 0                      # no general path: the core's own
    to_host = issued.device.type == ap.DeviceType.CPU
    waited = ROCM.simulator.counters()["host_synchronizations"] - synchronized
    assert (waited > 0) == to_host                # only a copy into host memory waits
    values = np.asarray({"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5),
                         **STRANGE_VALUES}.get(kind, VALUES))
    expected = np.ascontiguousarray(expected_of(kind, values)).tobytes()
    if to_host:                                   # read now: readable on return
        assert ctypes.string_at(issued.ptr, issued.nbytes) == expected
    synchronized = ROCM.simulator.counters()["host_synchronizations"]
    reference = general(lambda: source.copy(device=device, stream=int(consumer)))
    assert called.count == 1
    assert ROCM.simulator.counters()["host_synchronizations"] - synchronized == waited
    assert described(issued) == described(reference)
    assert issued.readonly is False and issued.is_copy and issued.ptr != reference.ptr
    assert contents(issued, int(consumer)) == contents(reference, int(consumer))
    if kind != "float4":                          # (its bytes are VALUES' own)
        assert contents(issued, int(consumer)) == expected
    del issued, reference, source
    gc.collect()
    array.free()


STRIDED_HOST = {"transposed": lambda a: a.T, "row slice, reversed": lambda a: a[::-1, 1:5],
                "complex128 transposed": lambda a: (a + 1j * a).astype(np.complex128).T}


@pytest.mark.parametrize("target", ["rocm:0", "tuple"])
@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "pinned",
                                  *STRIDED_HOST])
def test_an_upload_the_core_serves_is_the_general_path_s(streams, kind, target, monkeypatch):
    _, consumer = streams
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5)}.get(kind, VALUES)
    host = STRIDED_HOST[kind](VALUES) if kind in STRIDED_HOST else np.ascontiguousarray(values)
    pinned = None
    if kind == "pinned":                           # page-locked host memory, labelled CPU
        pinned = ROCM.array(host, kind="pinned")
        pinned.runtime.hipStreamSynchronize(None)  # its write (on the null stream) done
        source = _core.view_from_pointer(pinned.ptr, host.shape, None, "float32",
                                         readonly=False, owner=pinned, device=(1, 0),
                                         protocol="test")
    else:
        source = ap.view(host)
    if kind == "offset":
        source = source[2:]
    elif kind == "read-only":
        source = source.as_readonly()
    device = {"rocm:0": "rocm:0", "Device": ap.Device("rocm:0"), "tuple": (ROCM_TYPE, 0)}[
        target]
    warm(source, device, int(consumer))
    called = GeneralCopies(monkeypatch)
    issued = source.copy(device=device, stream=int(consumer))
    assert called.count == 0
    reference = general(lambda: source.copy(device=device, stream=int(consumer)))
    assert called.count == 1
    assert described(issued) == described(reference)
    expected = np.ascontiguousarray(np.asarray(host)[2:] if kind == "offset" else host)
    assert contents(issued, int(consumer)) == contents(reference, int(consumer)) \
        == expected.tobytes()
    del issued, reference, source
    if pinned is not None:
        gc.collect()
        pinned.free()


@pytest.mark.parametrize("target", [None, "cpu", "upload"])
def test_the_core_s_copy_asks_no_python_of_arrayport(streams, target):
    producer, consumer = streams
    array = ROCM.array(VALUES, stream=producer, busy=2)
    source = ap.view(VALUES) if target == "upload" else ap.view(array)
    device = "rocm:0" if target == "upload" else target
    warm(source, device, int(consumer))
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    for stream in (int(consumer), None):
        sys.setprofile(profile)
        try:
            copy = source.copy(device=device, stream=stream)
        finally:
            sys.setprofile(None)
        assert not [name for name in called if "/arrayport/" in name], called
        del copy
    del source
    gc.collect()
    array.free()


@pytest.mark.parametrize("target", [None, "cpu", "upload"])
def test_the_core_s_copy_makes_no_more_runtime_calls_than_the_general_path(streams, target):
    # The same allocation, transfer and waits (the counts of live memory, events and host
    # waits below), with the device made current once (the floor's session) where the
    # general path asks and switches at each step.
    producer, consumer = streams
    array = ROCM.array(VALUES, stream=producer, busy=2)
    source = ap.view(VALUES) if target == "upload" else ap.view(array)
    device = "rocm:0" if target == "upload" else target
    warm(source, device, int(consumer))
    made, kept = {}, []
    for name, make in (("core", lambda: source.copy(device=device, stream=int(consumer))),
                       ("general", lambda: general(
                           lambda: source.copy(device=device, stream=int(consumer))))):
        make()
        gc.collect()
        before, live = ROCM.simulator.counters(), ROCM.simulator.live()
        kept.append(make())
        after = ROCM.simulator.counters()
        made[name] = ({call: after[call] - before[call] for call in after},
                      tuple(a - b for a, b in zip(ROCM.simulator.live(), live)))
    core, general_ = made["core"], made["general"]
    assert core[1] == general_[1] == ((0 if target == "cpu" else 1), 0, 0), made
    assert core[0]["host_synchronizations"] == general_[0]["host_synchronizations"]
    assert (core[0]["host_synchronizations"] > 0) == (target == "cpu")
    assert core[0]["calls"] <= general_[0]["calls"], made
    del kept, source
    gc.collect()
    array.free()


@pytest.mark.parametrize("path", ["core", "general"])
@pytest.mark.parametrize("copy, kept", [
    ("device → device", True),        # the transfer may still read it: kept with the result
    ("device → host", False),         # complete on return: nothing reads it later
    ("pinned → device", True),        # the runtime reads pinned memory asynchronously
    ("pageable → device", False),     # read when the call returns
])
def test_a_copy_keeps_its_source_alive_only_while_a_transfer_may_read_it(streams, monkeypatch,
                                                                         path, copy, kept):
    _, consumer = streams

    class Owner:
        pass
    owner = Owner()
    watched = weakref.ref(owner)
    pinned = ROCM.array(VALUES, kind="pinned") if copy == "pinned → device" else None
    device_memory = ROCM.array(VALUES) if copy.startswith("device") else None
    host = VALUES.copy()
    address, device = {"device": (device_memory.ptr if device_memory else 0, (ROCM_TYPE, 0)),
                       "pinned": (pinned.ptr if pinned else 0, (1, 0)),
                       "pageable": (host.ctypes.data, (1, 0))}[copy.split()[0]]
    source = _core.view_from_pointer(address, VALUES.shape, None, "float32", readonly=False,
                                     owner=owner, device=device, protocol="test")
    target = "cpu" if copy.endswith("host") else "rocm:0"
    warm(source, target, int(consumer))
    called = GeneralCopies(monkeypatch)
    result = source.copy(device=target, stream=int(consumer)) if path == "core" else \
        general(lambda: source.copy(device=target, stream=int(consumer)))
    assert called.count == (path == "general")
    del source, owner
    gc.collect()
    assert (watched() is not None) == kept, (path, copy)
    consumer.synchronize()
    del result
    gc.collect()
    assert watched() is None                      # and never longer than that
    for array in (pinned, device_memory):
        if array is not None:
            array.free()


def test_a_dead_result_s_memory_is_freed_at_once_as_the_general_path_frees_it(streams):
    # HIP's free waits for the device's work (hipFree, documented): both paths free a dead
    # result's memory when its last View goes, nothing held.
    _, consumer = streams
    array = ROCM.array(VALUES)
    source = ap.view(array)
    warm(source, None, int(consumer))
    assert _core.published_hip_results(0)[1] is True   # the policy said: at once
    for make in (lambda: source.copy(stream=int(consumer)),
                 lambda: general(lambda: source.copy(stream=int(consumer)))):
        allocations = ROCM.simulator.live()[0]
        copy = make()
        assert ROCM.simulator.live()[0] == allocations + 1
        del copy
        gc.collect()
        assert ROCM.simulator.live()[0] == allocations
        assert hip_driver.driver.memory.held_results() == 0
    del source
    array.free()


def test_where_the_core_does_not_serve_the_general_path_answers(streams, monkeypatch):
    producer, consumer = streams
    array = ROCM.array(VALUES, stream=producer)
    source = ap.view(array)
    warm(source, None, int(consumer))
    called = GeneralCopies(monkeypatch)
    source.copy(device=(11, 0), stream=int(consumer))              # pinned host memory
    source.copy(device="rocm:1", stream=0)                         # another device
    other = ROCM.stream(1)
    try:   # a stream of another device: the general path's answer (the runtime's refusal)
        with pytest.raises(BufferError, match="hipEventRecord"):
            source.copy(stream=int(other))
    finally:
        gc.collect()
        other.synchronize()
        other.close()
    assert called.count == 3
    source.copy(stream=int(consumer))
    source.T.copy(stream=int(consumer))                            # 2-D transfers, from C
    assert called.count == 3                                       # the core's
    for stream, error in ((1, "stream 1"), (-1, "names no stream")):
        with pytest.raises((ValueError, BufferError), match=error):
            source.copy(stream=stream)
    consumer.synchronize()
    del source
    gc.collect()
    array.free()


def test_nothing_is_published_until_the_general_path_made_a_result(monkeypatch):
    # Until the memory policy has said how a device's results are given back, the core
    # makes none (it does not guess the policy).
    monkeypatch.setattr(hip_driver.driver.memory, "_result_pools",
                        hip_driver.driver.memory._result_pools)   # forgets what was published
    assert _core.published_hip_results(0) is None
    called = GeneralCopies(monkeypatch)
    first = ap.view(VALUES).copy(device="rocm:0")
    assert called.count == 1 and _core.published_hip_results(0) is not None
    second = ap.view(VALUES).copy(device="rocm:0")
    assert called.count == 1
    del first, second


@pytest.mark.parametrize("method", ["stream_is_on", "allocate_result", "allocate_device",
                                    "copy_async", "copy_2d_async", "max_pitch", "synchronize",
                                    "allocate_ordinary", "free_ordinary",
                                    "frees_wait_for_work"])
def test_a_stand_in_for_a_call_the_core_s_copies_make_takes_them_back(streams, monkeypatch,
                                                                      method):
    # A test's stand-in for one of the driver's copy calls must see every copy: the core's
    # copies stand aside while it is in, and come back once it is taken out.
    _, consumer = streams
    array = ROCM.array(VALUES)
    source = ap.view(array)
    warm(source, None, int(consumer))
    called = GeneralCopies(monkeypatch)
    driver = hip_driver.driver
    monkeypatch.setattr(driver, method, getattr(driver, method))   # the same, as a stand-in
    source.copy(stream=int(consumer))
    source.T.copy(device="cpu", stream=int(consumer))
    assert called.count == 2
    monkeypatch.undo()
    called = GeneralCopies(monkeypatch)
    source.copy(stream=int(consumer))
    source.T.copy(device="cpu", stream=int(consumer))
    assert called.count == 0
    consumer.synchronize()
    del source
    gc.collect()
    array.free()


def test_a_full_device_is_the_general_path_s_to_make_room_for(streams, monkeypatch):
    # hipMalloc refused for want of memory: the core steps aside, and the general path
    # refuses in its words (HIP holds nothing to give back).
    _, consumer = streams
    array = ROCM.array(VALUES)
    source = ap.view(array)
    warm(source, None, int(consumer))
    called = GeneralCopies(monkeypatch)
    ROCM.simulator.set_device_memory(VALUES.nbytes + 64)   # the source fits, no copy of it
    try:
        with pytest.raises(BufferError, match="hipMalloc"):
            source.copy(stream=int(consumer))
    finally:
        ROCM.simulator.set_device_memory(0)
    assert called.count == 1
    del source
    gc.collect()
    array.free()


def test_a_result_dying_after_the_floor_closed_is_given_back_through_the_policy(streams):
    # The floor goes off at the driver's close (at exit); a result of the core's dying
    # after is given back by the policy's release (the Python driver's free), not from C.
    _, consumer = streams
    array = ROCM.array(VALUES)
    source = ap.view(array)
    warm(source, None, int(consumer))
    copy = source.copy(stream=int(consumer))
    assert type(copy.owner).__name__ == "_HipResultMemory"
    allocations = ROCM.simulator.live()[0]
    _core.close_hip_floor()
    try:
        assert not _core.hip_floor_ready()
        del copy
        gc.collect()
        assert ROCM.simulator.live()[0] == allocations - 1
    finally:
        hip_driver._install_floor(hip_driver._LIBRARY.get())   # as opening installs it
    assert _core.hip_floor_ready()
    del source
    gc.collect()
    array.free()


@pytest.mark.parametrize("copy", ["contiguous", "transposed", "to the host",
                                  "transposed, to the host", "upload"])
def test_a_copy_on_the_second_device_stays_there_and_leaves_the_thread_s_device_alone(
        monkeypatch, copy):
    # The session makes the copy's device current once and sets the thread's back after;
    # the result's memory is freed on its own device, from C, with the thread's device as
    # it was.
    driver = hip_driver.driver
    stream = ROCM.stream(1)
    array = ROCM.array(VALUES, device=1)
    try:
        source = ap.view(VALUES) if copy == "upload" else ap.view(array)
        if copy.startswith("transposed"):
            source = source.T
        target = {"upload": "rocm:1"}.get(copy, "cpu" if copy.endswith("host") else None)
        general(lambda: ap.view(VALUES).copy(device="rocm:1"))   # device 1's results published
        gc.collect()
        called = GeneralCopies(monkeypatch)
        assert driver.current_device() == 0
        result = source.copy(device=target, stream=int(stream))
        assert called.count == 0 and driver.current_device() == 0
        assert str(result.device) == ("cpu" if copy.endswith("host") else "rocm:1")
        expected = np.ascontiguousarray(VALUES.T if "transposed" in copy else VALUES)
        assert contents(result, int(stream)) == expected.tobytes()
        allocations = ROCM.simulator.live()[0]
        del result
        gc.collect()
        assert driver.current_device() == 0
        assert ROCM.simulator.live()[0] == allocations - (not copy.endswith("host"))
        del source
    finally:
        gc.collect()
        stream.synchronize()
        stream.close()
        array.free()
