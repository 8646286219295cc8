"""A device copy the core issues itself (src/arrayport/_core_device_copy.pxi) on the CUDA
driver simulator, held to the general path it shortcuts (arrayport/gpu/copies.py): the same
bytes, the same View, the same driver work, the same lifetimes — on plain and strange
arrays — or the general path's answer where the shortcut does not serve."""

import ctypes
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

from core_copies import GeneralCopies, described, through_general_path  # noqa: E402
from driver_log import contents  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks,  # noqa: E402,F401
                          run_on_the_simulator, simulator, simulator_resets_contexts,
                          slow_streams, streams)
from sim_arrays import DeviceArray  # noqa: E402

VALUES = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) + 1


def general(make):
    """``make()`` with the core's own CUDA copies off: the general path makes every copy."""
    return through_general_path(_core.set_cuda_floor_direct, make)


def warm(source, stream):
    """One copy through the general path first: arrayport's pool on the device is made
    (and published to the core) there."""
    general(lambda: source.copy(stream=stream))
    gc.collect()


# Strided layouts (the kernel, planned in C), each as the kernels' strange cases: a
# transpose (tiled), a row slice (wide units), reversed and zero strides, a permuted batch,
# 16- and 1-byte elements, a misaligned start, a size-1 axis with an odd stride.
STRIDED = {
    "transposed": lambda v: v.T,
    "row slice": lambda v: v[:, 1:5],
    "every other, reversed": lambda v: v[::-1, ::2],
    "broadcast": lambda v: _core.view_from_pointer(v.ptr, (5, 6), (0, 4), "float32",
                                                   readonly=True, owner=v, device=(2, 0),
                                                   protocol="test"),
    "permuted batch": lambda v: v.reshape(2, 4, 6).permute(0, 2, 1),
    "complex128 transposed": None, "int8 transposed, misaligned": None,
    "size-1 axis, odd stride": lambda v: _core.view_from_pointer(
        v.ptr, (8, 1, 3), (24, 28, 8), "float32", readonly=False, owner=v, device=(2, 0),
        protocol="test"),
}
STRANGE_VALUES = {
    "complex128 transposed": (VALUES + 1j * VALUES).astype(np.complex128),
    "int8 transposed, misaligned": np.arange(9 * 40, dtype=np.int8).reshape(9, 40),
}


def strided_source(kind, array):
    base = ap.view(array)
    if kind == "int8 transposed, misaligned":
        return base[1:, 3:35].T
    return base.T if STRIDED[kind] is None else STRIDED[kind](base)


@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "float4",
                                  "float6 padded", "pending", *STRIDED])
def test_the_core_s_copy_is_the_general_path_s(streams, kind, monkeypatch):
    producer, consumer = streams
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5),
              "float6 padded": (VALUES % 32).astype(np.uint8), **STRANGE_VALUES}.get(kind,
                                                                                VALUES)
    array = DeviceArray(np.asarray(values), stream=producer, busy=3 if kind == "pending" else 0)
    source = ap.view(array)
    if kind in STRIDED:
        producer.synchronize()
        source = strided_source(kind, array)
        assert not source.is_c_contiguous
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
    called = GeneralCopies(monkeypatch)
    launches = _core.cuda_floor_launches()
    issued = source.copy(stream=int(consumer))
    assert called.count == 0                      # no general path: the core's own
    assert _core.cuda_floor_launches() == launches + (kind in STRIDED)
    reference = general(lambda: source.copy(stream=int(consumer)))
    assert called.count == 1
    assert described(issued) == described(reference)
    assert issued.readonly is False and issued.is_copy
    assert issued.ptr != reference.ptr != source.ptr
    consumer.synchronize()
    assert contents(issued) == contents(reference)
    if kind not in STRIDED:
        assert contents(issued) == contents(source)
    else:   # and what NumPy makes of the same layout
        expected = np.asarray(values)
        if kind == "broadcast":
            expected = np.broadcast_to(expected.reshape(-1)[:6], (5, 6))
        elif kind == "size-1 axis, odd stride":
            expected = np.lib.stride_tricks.as_strided(expected.reshape(-1), (8, 1, 3),
                                                       (24, 28, 8))
        elif kind == "int8 transposed, misaligned":
            expected = expected[1:, 3:35].T
        elif kind == "permuted batch":
            expected = expected.reshape(2, 4, 6).transpose(0, 2, 1)
        else:
            expected = STRIDED[kind](expected) if STRIDED[kind] else expected.T
        assert contents(issued) == np.ascontiguousarray(expected).tobytes()
    del issued, reference, source
    array.free()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_the_core_s_copy_asks_no_python_of_arrayport(streams, layout):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    source = ap.view(array) if layout == "contiguous" else ap.view(array).T
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
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "row slice"])
def test_the_core_s_copy_does_the_driver_work_the_general_path_does(streams, layout):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=2)
    source = {"contiguous": ap.view(array), "transposed": ap.view(array).T,
              "row slice": ap.view(array)[:, 1:5]}[layout]
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
                      if after[call] != before[call]}
    # The same allocation, transfer, waits and records; no host wait. The general path
    # asks which context is current, a stream's context and the context's id, and makes
    # the context current, at each step (ctypes' context guards); the core once per copy
    # (the floor's session), never more — and pops every context it pushed. Before a
    # launch both ask where the source is (cuPointerGetAttributes), the general path a
    # second time where its thread has no context current yet.
    questions = ("cuCtxGetCurrent", "cuStreamGetCtx", "cuCtxGetId", "cuCtxPushCurrent",
                 "cuCtxPopCurrent", "cuPointerGetAttributes")
    asked = {call: made["core"].get(call, 0) for call in questions}
    assert asked["cuCtxPushCurrent"] == asked["cuCtxPopCurrent"] <= 1, made
    assert asked["cuCtxGetCurrent"] == asked["cuCtxGetId"] == 1, made
    for call in questions:
        assert made["core"].pop(call, 0) <= made["general"].pop(call, 0), (call, made)
    assert made["core"] == made["general"], made
    assert made["core"].get("host_synchronizations", 0) == 0
    assert asked["cuPointerGetAttributes"] == (layout != "contiguous"), made
    transfer = "cuMemcpyAsync" if layout == "contiguous" else "cuLaunchKernel"
    assert made["core"]["cuMemAllocFromPoolAsync"] == made["core"][transfer] == 1
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
        driver.memory.return_held(driver.memory.result_pool(0), driver.memory.result_pool(0).take())
        blocks, results = driver.memory.held_blocks(), driver.memory.held_results()
        copy = make()
        del copy
        gc.collect()
        counts[name] = (driver.memory.held_blocks() - blocks, driver.memory.held_results() - results)
    assert counts["core"] == counts["general"] == (1, 2), counts   # the block, its source
    del source
    array.free()


def test_where_the_core_does_not_serve_the_general_path_answers(streams, monkeypatch):
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer)
    source = ap.view(array)
    warm(source, int(consumer))
    called = GeneralCopies(monkeypatch)
    _core.publish_cuda_kernel(-1, "", 0, 0, 0)    # as at the start: no kernel loaded yet
    ap.view(array).T.copy(stream=int(consumer))                    # strided: loads the kernel
    source.copy(device=(3, 0), stream=int(consumer))               # pinned host memory
    source.copy(device="cuda:1", stream=1)                         # another device
    assert called.count == 3
    source.copy(device=(13, 0), stream=int(consumer))               # managed memory
    assert called.count == 4
    ap.view(array).T.copy(stream=int(consumer))                    # the kernel is the core's now
    assert called.count == 4
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
    called = GeneralCopies(monkeypatch)
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


@pytest.mark.parametrize("copy", ["contiguous", "transposed", "to the host",
                                  "transposed, to the host", "upload"])
def test_the_core_s_copy_on_the_second_device_stays_there(monkeypatch, copy):
    # The path picks its device from the source (the target, for an upload): a copy on
    # cuda:1 on a cuda:1 stream is the core's — its kernel loaded and published in cuda:1's
    # context — lands where it should and reads the same as the general path's.
    from sim_arrays import Stream
    stream = Stream(1)
    array = DeviceArray(VALUES, device=1, stream=stream)
    source = {"upload": ap.view(VALUES)}.get(copy, ap.view(array))
    if copy.startswith("transposed"):
        source = source.T
    device = "cpu" if copy.endswith("host") else ("cuda:1" if copy == "upload" else None)
    make = lambda: source.copy(device=device, stream=int(stream))  # noqa: E731
    try:
        general(make)                             # the pool made, the kernel published
        gc.collect()
        called = GeneralCopies(monkeypatch)
        issued = make()
        assert called.count == 0
        reference = general(make)
        assert described(issued) == described(reference)
        assert str(issued.device) == ("cpu" if device == "cpu" else "cuda:1")
        stream.synchronize()
        expected = VALUES.T if copy.startswith("transposed") else VALUES
        assert contents(issued) == contents(reference) == \
            np.ascontiguousarray(expected).tobytes()
        del issued, reference
    finally:
        gc.collect()
        stream.synchronize()
        del source
        array.free()
        stream.close()


@needs_simulator
@pytest.mark.skipif(not simulator_resets_contexts(),
                    reason="this simulator has no cuDevicePrimaryCtxReset")
def test_a_kernel_of_a_context_reset_since_is_never_launched():
    # Another library resets the device (cudaDeviceReset): the context keeps its handle,
    # its modules go with it. The function the core was told of is dead: the core must not
    # launch it (undefined behaviour on a GPU; the simulator refuses it), the general path
    # loads the module again and tells the core, and the copies after are the core's again.
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap
        from arrayport import _core
        from cudasim import Simulator
        from sim_arrays import Context, DeviceArray, Stream
        values = np.arange(48, dtype=np.float32).reshape(8, 6)
        simulator = Simulator(os.environ["CUDASIM_LIBRARY"])

        def transposed_copy():
            stream = Stream(0)
            array = DeviceArray(values)
            copy = ap.view(array).T.copy(stream=int(stream))
            stream.synchronize()
            result = np.array(ap.to_numpy(copy.copy(device="cpu")))
            del copy
            array.free()
            stream.close()
            return result

        counts = []
        for _ in range(2):   # the first loads the kernel (general path), the second is C's
            assert np.array_equal(transposed_copy(), values.T)
            counts.append(_core.cuda_floor_launches())
        library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
        assert library.cuDevicePrimaryCtxReset_v2(0) == 0       # another library resets cuda:0
        with Context(0):
            for _ in range(2):
                assert np.array_equal(transposed_copy(), values.T)
                counts.append(_core.cuda_floor_launches())
        print("launches", *counts, "dead", simulator.counters()["dead_function_launches"])
    """)
    # C launched the second copy before the reset; after it, the first copy's launch was
    # the general path's (the dead function never handed to the driver), the second C's.
    assert output.split() == ["launches", "0", "1", "1", "2", "dead", "0"], output


@pytest.mark.parametrize("target", ["cpu", "Device", "tuple", "cuda:0", "own Device"])
@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "float4",
                                  "pending", "transposed", "transposed, pending",
                                  "int8 transposed, misaligned"])
def test_a_named_target_the_core_serves_is_the_general_path_s(streams, slow_streams, kind,
                                                              target, monkeypatch):
    # A copy to the host (one transfer, the host's one wait: readable on return, even of a
    # source whose producer is still writing) and a copy to its own device named (as None)
    # are the core's too; each held to the general path's copy of the same source.
    producer, consumer = streams
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5),
              **STRANGE_VALUES}.get(kind, VALUES)
    pending = kind.endswith("pending")
    array = DeviceArray(np.asarray(values), stream=producer, busy=2 if pending else 0)
    source = ap.view(array)
    if not pending:
        producer.synchronize()
    if kind.startswith("transposed"):           # packed by the kernel, then one transfer
        source = source.T
    elif kind == "int8 transposed, misaligned":
        source = strided_source(kind, array)
    if kind == "offset":
        source = source[2:]
    elif kind == "read-only":
        source = source.as_readonly()
    elif kind == "float4":
        source = _core.view_from_pointer(array.ptr, (8, 48), None, "float4_e2m1fn",
                                         readonly=False, owner=array, device=(2, 0),
                                         protocol="test")
    device = {"cpu": "cpu", "Device": ap.Device("cpu"), "tuple": (1, 0), "cuda:0": "cuda:0",
              "own Device": ap.Device("cuda:0")}[target]
    warm(source, int(consumer))
    called = GeneralCopies(monkeypatch)
    before = simulator.counters() if simulator else None
    issued = source.copy(device=device, stream=int(consumer))
    assert called.count == 0                      # no general path: the core's own
    to_host = target in ("cpu", "Device", "tuple")
    if simulator:
        waited = simulator.counters()["host_synchronizations"] - \
            before["host_synchronizations"]
        assert (waited > 0) == to_host            # only a copy into host memory waits
    if to_host:
        expected = {"offset": lambda a: a[2:], "transposed": lambda a: a.T,
                    "transposed, pending": lambda a: a.T,
                    "int8 transposed, misaligned": lambda a: a[1:, 3:35].T}.get(
            kind, lambda a: a)(np.asarray(values))
        if kind == "float4":                      # packed: its bytes
            assert ctypes.string_at(issued.ptr, issued.nbytes) == np.asarray(values).tobytes()
        else:                                     # read now: no wait of the test's own
            assert np.array_equal(np.asarray(issued).ravel(), expected.ravel())
    before = simulator.counters() if simulator else None
    reference = general(lambda: source.copy(device=device, stream=int(consumer)))
    assert called.count == 1
    if simulator:                                 # as often as the general path, no more
        assert waited == simulator.counters()["host_synchronizations"] - \
            before["host_synchronizations"]
    assert described(issued) == described(reference)
    consumer.synchronize()
    assert contents(issued) == contents(reference)
    if source.is_c_contiguous:
        assert contents(issued) == contents(source)
    del issued, reference, source
    array.free()


# Strided host sources: packed by the host kernel, then one transfer.
STRIDED_HOST = {"transposed": lambda a: a.T, "row slice, reversed": lambda a: a[::-1, 1:5],
                "complex128 transposed": lambda a: (a + 1j * a).astype(np.complex128).T,
                "int8 every third": lambda a: a.astype(np.int8)[:, ::3]}


@pytest.mark.parametrize("target", ["cuda:0", "Device", "tuple"])
@pytest.mark.parametrize("kind", ["plain", "offset", "read-only", "0-d", "bool", "float4",
                                  "pinned", *STRIDED_HOST])
def test_an_upload_the_core_serves_is_the_general_path_s(streams, slow_streams, kind, target,
                                                         monkeypatch):
    # Host memory to a device: one transfer into the device's pool, issued from C; the
    # source kept alive until the block is freed only where the driver may still read it
    # (pinned memory), as the general path keeps it.
    _, consumer = streams
    values = {"bool": (VALUES % 3 == 0), "0-d": np.float32(7.5)}.get(kind, VALUES)
    host = STRIDED_HOST[kind](VALUES) if kind in STRIDED_HOST else np.ascontiguousarray(values)
    pinned = None
    if kind == "pinned":                           # page-locked host memory, labelled CPU
        pinned = DeviceArray(host, kind="pinned")
        source = _core.view_from_pointer(pinned.ptr, host.shape, None, "float32",
                                         readonly=False, owner=pinned, device=(1, 0),
                                         protocol="test")
    else:
        source = ap.view(host)
    if kind == "offset":
        source = source[2:]
    elif kind == "read-only":
        source = source.as_readonly()
    elif kind == "float4":
        source = _core.view_from_pointer(host.ctypes.data, (8, 48), None, "float4_e2m1fn",
                                         readonly=False, owner=host, device=(1, 0),
                                         protocol="test")
    device = {"cuda:0": "cuda:0", "Device": ap.Device("cuda:0"), "tuple": (2, 0)}[target]
    general(lambda: source.copy(device=device, stream=int(consumer)))   # the pool made
    gc.collect()
    called = GeneralCopies(monkeypatch)
    driver = cuda_driver.driver
    driver.memory.return_held(driver.memory.result_pool(0), driver.memory.result_pool(0).take())
    results = driver.memory.held_results()
    issued = source.copy(device=device, stream=int(consumer))
    assert called.count == 0                      # no general path: the core's own
    reference = general(lambda: source.copy(device=device, stream=int(consumer)))
    assert called.count == 1
    assert described(issued) == described(reference)
    assert str(issued.device) == "cuda:0" and issued.ptr != reference.ptr
    consumer.synchronize()
    assert contents(issued) == contents(reference) == bytes(
        np.ascontiguousarray(np.asarray(host)[2:] if kind == "offset" else host).tobytes()
        if kind != "float4" else host.tobytes())
    assert issued.is_c_contiguous and source.is_c_contiguous == (kind not in STRIDED_HOST)
    del issued
    gc.collect()                                  # held with its source only where pinned
    assert driver.memory.held_results() - results == (2 if kind == "pinned" else 1)
    del reference, source
    if pinned is not None:
        gc.collect()
        driver.memory.return_held(driver.memory.result_pool(0), driver.memory.result_pool(0).take())
        pinned.free()


def test_a_large_pageable_upload_is_left_to_the_pinned_ring(streams, monkeypatch):
    # From the ring's threshold on (gpu/staging.py's, read at each copy), a pageable upload
    # is the general path's: the core leaves it alone.
    from arrayport.gpu import staging
    _, consumer = streams
    source = ap.view(np.arange(4096, dtype=np.float32))
    source.copy(device="cuda:0", stream=int(consumer))
    called = GeneralCopies(monkeypatch)
    small = source[:1024]
    monkeypatch.setattr(staging, "THRESHOLD_BYTES", 8192)
    small.copy(device="cuda:0", stream=int(consumer))        # 4 KiB: below it, the core's
    assert called.count == 0
    source.copy(device="cuda:0", stream=int(consumer))       # 16 KiB: the ring's
    assert called.count == 1
    square = np.arange(4096, dtype=np.float32).reshape(64, 64)
    ap.view(square[:32].T).copy(device="cuda:0", stream=int(consumer))   # 8 KiB, packed: too
    assert called.count == 2
    ap.view(square[:16].T).copy(device="cuda:0", stream=int(consumer))   # 4 KiB: the core's
    assert called.count == 2
    consumer.synchronize()


class _Owner:
    """Something a source View keeps alive, to watch with a weak reference."""


@pytest.mark.parametrize("path", ["core", "general"])
@pytest.mark.parametrize("copy, kept", [
    ("device → device", True),        # the transfer may still read it: kept with the result
    ("device → host", False),         # complete on return: nothing reads it later
    ("pinned → device", True),        # the driver reads pinned memory asynchronously
    ("pageable → device", False),     # read when the call returns
])
def test_a_copy_keeps_its_source_alive_only_while_a_transfer_may_read_it(
        streams, path, copy, kept):
    # Both paths hold a source by the same rule (docs/devices.md, "Copies"): alive with the
    # result only where an enqueued transfer may still read it.
    import weakref
    _, consumer = streams
    owner = _Owner()
    watched = weakref.ref(owner)
    pinned = DeviceArray(VALUES, kind="pinned") if copy == "pinned → device" else None
    device_memory = DeviceArray(VALUES) if copy.startswith("device") else None
    host = VALUES.copy()
    address, device = {"device": (device_memory.ptr if device_memory else 0, (2, 0)),
                       "pinned": (pinned.ptr if pinned else 0, (1, 0)),
                       "pageable": (host.ctypes.data, (1, 0))}[copy.split()[0]]
    source = _core.view_from_pointer(address, VALUES.shape, None, "float32", readonly=False,
                                     owner=owner, device=device, protocol="test")
    target = "cpu" if copy.endswith("host") else "cuda:0"
    warm_target = lambda: source.copy(device=target, stream=int(consumer))  # noqa: E731
    general(warm_target)                          # the pool made, kernels published
    gc.collect()
    result = warm_target() if path == "core" else general(warm_target)
    del source, owner
    gc.collect()
    assert (watched() is not None) == kept, (path, copy)
    consumer.synchronize()
    del result
    gc.collect()
    driver = cuda_driver.driver
    driver.memory.return_held(driver.memory.result_pool(0), driver.memory.result_pool(0).take())
    gc.collect()
    assert watched() is None                      # and never longer than that
    for array in (pinned, device_memory):
        if array is not None:
            array.free()


def test_a_target_id_outside_int32_is_refused_as_the_general_path_refuses(streams):
    _, consumer = streams
    source = ap.view(np.arange(8, dtype=np.float32))
    general(lambda: source.copy(device="cuda:0", stream=int(consumer)))
    refusals = []
    for make in (lambda: source.copy(device=(2, 2**40), stream=int(consumer)),
                 lambda: general(lambda: source.copy(device=(2, 2**40),
                                                     stream=int(consumer)))):
        with pytest.raises(ValueError, match="device id") as refused:
            make()
        refusals.append(str(refused.value))
    assert refusals[0] == refusals[1]


@pytest.mark.parametrize("method", ["stream_is_on", "allocate_result", "allocate_temporary",
                                    "copy_async", "allocation_bytes", "synchronize",
                                    "has_kernel", "launch_kernel"])
def test_a_stand_in_for_a_call_the_core_s_copies_make_takes_them_back(streams, monkeypatch,
                                                                      method):
    # A test's stand-in for one of the driver's copy calls (a failure injected, a call
    # logged, "no kernels here": the fixture without_kernels) must see every copy: the
    # core's copies stand aside while it is in, and come back once it is taken out.
    _, consumer = streams
    array = DeviceArray(VALUES)
    source = ap.view(array).T
    warm(source, int(consumer))
    called = GeneralCopies(monkeypatch)
    driver = cuda_driver.driver
    monkeypatch.setattr(driver, method, getattr(driver, method))   # the same, as a stand-in
    source.copy(stream=int(consumer))
    assert called.count == 1                      # the general path: the stand-in sees it
    monkeypatch.undo()
    called = GeneralCopies(monkeypatch)
    source.copy(stream=int(consumer))
    assert called.count == 0                      # the core's again
    consumer.synchronize()
    del source
    array.free()


def _labelled_cuda(pointer, owner, device_id=0, transposed=True, strides=(24, 4)):
    """An (8, 6) float32 View at ``pointer`` that says it is cuda:``device_id`` memory, as a
    producer's DLPack capsule or Arrow device array says it (arrayport takes their word)."""
    view = _core.view_from_pointer(pointer, (8, 6), strides, "float32", readonly=True,
                                   owner=owner, device=(2, device_id), protocol="test")
    return view.T if transposed else view


# Memory a producer wrongly calls cuda:0 memory of this (8, 6) layout: where it really is,
# made from (host values, a device array of them on cuda:0, one on cuda:1); and what the
# refusal says of it.
WRONGLY_LABELLED = {
    "pageable host memory": (lambda host, here, there: _labelled_cuda(host.ctypes.data, host),
                             "is not memory CUDA knows"),
    "cuda:1's memory": (lambda host, here, there: _labelled_cuda(there.ptr, there),
                        "the driver places it on cuda:1"),
    # cuda:0 memory, but the strides reach past the 192-byte allocation, or below it
    "strides past the allocation": (
        lambda host, here, there: _labelled_cuda(here.ptr, here, strides=(2400, 4)),
        "its layout reaches bytes 0..16824 of the 192-byte memory holding it"),
    "strides below the allocation": (
        lambda host, here, there: _labelled_cuda(here.ptr + 4, here, strides=(-24, 4)),
        "its layout reaches bytes -164..28 of the 192-byte memory holding it"),
}


@pytest.mark.parametrize("memory", list(WRONGLY_LABELLED))
@pytest.mark.parametrize("target", [None, "cpu"])
@pytest.mark.parametrize("path", ["core", "general"])
def test_a_strided_copy_of_memory_wrongly_labelled_cuda_0_is_refused_before_any_kernel(
        streams, memory, target, path):
    # Found by the fuzzer: an Arrow device array labelled cuda:0 over pageable host memory,
    # copied strided, launched arrayport's kernel on host addresses — an illegal address,
    # and CUDA's sticky error kills the context for the rest of the process. The same for
    # another device's memory, and for strides that reach outside the allocation (found by
    # review). The driver is asked first, by both paths: a BufferError that names the label
    # and what the driver says, no kernel launched, and the device goes on working.
    _, consumer = streams
    make_source, wrong = WRONGLY_LABELLED[memory]
    host = np.ascontiguousarray(VALUES)
    here, there = DeviceArray(VALUES, stream=consumer), DeviceArray(VALUES, device=1)
    source = make_source(host, here, there)
    real = ap.view(here)
    warm(real.T, int(consumer))                   # the pool made, the kernel published
    launches = _core.cuda_floor_launches()
    make = lambda: source.copy(device=target, stream=int(consumer))  # noqa: E731
    good = None
    try:
        with pytest.raises(BufferError, match=f"labelled it cuda:0 memory, but .*{wrong}"):
            make() if path == "core" else general(make)
        assert _core.cuda_floor_launches() == launches
        good = real.T.copy(device="cpu", stream=int(consumer))   # the context lives on
        assert np.asarray(good).tobytes() == np.ascontiguousarray(VALUES.T).tobytes()
    finally:
        consumer.synchronize()
        del source, real, good
        gc.collect()
        here.free()
        there.free()


@pytest.mark.parametrize("target", [None, "cpu"])
def test_memory_labelled_cuda_0_that_a_kernel_can_read_is_copied(streams, target):
    # Pinned host memory is mapped into the device's addresses: the kernel reads it, so a
    # producer calling it device memory gets its copy. And a contiguous copy of pageable
    # memory so labelled is one transfer, which the driver reads as host memory: no kernel,
    # no question asked (the rule is the kernel's, not the label's).
    _, consumer = streams
    pinned = DeviceArray(VALUES, kind="pinned", stream=consumer)
    host = np.ascontiguousarray(VALUES)
    cases = [(_labelled_cuda(pinned.ptr, pinned), VALUES.T),
             (_labelled_cuda(host.ctypes.data, host, transposed=False), VALUES)]
    try:
        for source, expected in cases:
            copied = source.copy(device=target, stream=int(consumer))
            consumer.synchronize()
            assert contents(copied) == np.ascontiguousarray(expected).tobytes()
            del copied
    finally:
        consumer.synchronize()
        del cases
        gc.collect()
        pinned.free()


@pytest.mark.parametrize("target", [None, "cpu"])
@pytest.mark.parametrize("path", ["core", "general"])
def test_a_layout_across_allocations_next_to_each_other_is_copied(streams, target, path):
    # Memory mapped in pieces (cuMemMap: PyTorch's expandable segments, 2 or 20 MiB each)
    # has a range per piece, and a tensor may lie across pieces (found by review: the check
    # of the layout's span refused it). Here two of the simulator's allocations, one right
    # after the other: a transposed (2, 1024) float32 View whose rows are one each is read
    # whole, by both paths.
    _, consumer = streams
    made = [DeviceArray(np.full(1024, i, np.float32)) for i in range(8)]
    pair = next(((low, high) for high, low in zip(made, made[1:])
                 if low.ptr + 4096 == high.ptr), None)
    try:
        if pair is None:
            pytest.skip("the simulator placed no two allocations next to each other")
        low, high = pair
        source = _core.view_from_pointer(low.ptr, (2, 1024), (4096, 4), "float32",
                                         readonly=True, owner=made, device=(2, 0),
                                         protocol="test").T
        make = lambda: source.copy(device=target, stream=int(consumer))  # noqa: E731
        warm(source, int(consumer))       # the pool made (and a block of this size), the
        make()                            # kernel published, the floor's event made
        launches = _core.cuda_floor_launches()
        copied = make() if path == "core" else general(make)
        consumer.synchronize()
        expected = np.stack([np.full(1024, made.index(low), np.float32),
                             np.full(1024, made.index(high), np.float32)]).T
        assert contents(copied) == np.ascontiguousarray(expected).tobytes()
        assert _core.cuda_floor_launches() == launches + (path == "core")
        del copied, source
    finally:
        consumer.synchronize()
        gc.collect()
        for array in made:
            array.free()
