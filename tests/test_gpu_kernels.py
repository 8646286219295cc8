"""arrayport's device kernels through arrayport (issue 41, the room; issue 43, the copies):
a strided copy within one GPU is one launch of the strided-copy kernel, bit for bit what
NumPy's copy is, for every layout class and element size; the module is loaded once per
context and unloaded at close; where it cannot be loaded the copy keeps its DMA path. On
the simulator the kernel runs from its own source (compiled as C over the grid), so its
indexing is checked here, not only its plumbing; on a GPU (ARRAYPORT_GPU=hardware) the same
tests run the PTX."""

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver
from arrayport.gpu import hip as hip_driver
from arrayport.gpu import kernels
from arrayport.gpu.kernels import strided_copy

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from driver_log import DriverLog, contents, device_array  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks, simulator,  # noqa: E402,F401
                          slow_streams)
from sim_arrays import DeviceArray, Stream  # noqa: E402

DTYPES = [np.uint8, np.float16, np.int32, np.float64, np.complex128]


def layouts(dtype):
    """Every layout class, in elements of ``dtype`` holding random bytes (NaN payloads
    included: the copy must be bit-exact, not value-equal)."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.random.default_rng(7).integers(0, 256, 2 * 5 * 7 * 3 * itemsize, dtype=np.uint8)
    base = raw.view(dtype).reshape(2, 5, 7, 3)
    wide = np.random.default_rng(8).integers(0, 256, 33 * 65 * itemsize, np.uint8)
    wide = wide.view(dtype).reshape(33, 65)
    return {
        "transposed": base.T, "sliced": base[:, 1:4, ::2], "negative": base[::-1, :, ::-2],
        "broadcast": np.broadcast_to(base[0, 0], (4, 7, 3)),
        "permuted": base.transpose(2, 0, 3, 1), "transposed-2d": wide.T,
        "offset-rows": wide[1:, 1:-2], "column": wide[:, 5], "reversed": wide[::-1, ::-1],
        # rows of 32 bytes at every element size: 16-byte units over the row, not the element
        "row-slice": wide[::-2, 16:16 + 32 // itemsize],
        "4-d-permuted": base.transpose(1, 3, 0, 2)[:, :, ::-1],
        # the tiled kernel's: planes of a batch transposed, tiles cut at odd edges
        "batched-transpose": np.random.default_rng(9).integers(
            0, 256, 3 * 40 * 37 * itemsize, np.uint8).view(dtype).reshape(3, 40, 37)
        .transpose(0, 2, 1),
        "transposed-permuted": np.random.default_rng(10).integers(
            0, 256, 20 * 4 * 33 * itemsize, np.uint8).view(dtype).reshape(20, 4, 33)
        .transpose(2, 1, 0)[:, ::2],
    }

# Layouts whose source is contiguous along another axis than the destination's, both long:
# the tiled kernel's (strided_copy.plan_tiles); every other layout is the plain kernel's.
TILED = {"transposed-2d", "batched-transpose", "transposed-permuted"}


@pytest.fixture
def cuda(monkeypatch, nothing_leaks):
    return DriverLog(monkeypatch)


@pytest.mark.parametrize("target", ["cuda:0", "cpu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(layouts(np.uint8)))
def test_a_strided_copy_is_one_kernel_launch_bit_for_bit(cuda, name, dtype, target):
    # On the GPU: one launch into the new memory. To the host: packed on the device by one
    # launch, then one transfer (2-D DMA would move a transposed matrix one element a row).
    array = layouts(dtype)[name]
    source = device_array(array)
    copy = source.copy(device=target)
    assert copy.is_c_contiguous and copy.shape == array.shape and copy.dtype == array.dtype
    assert contents(copy) == np.ascontiguousarray(array).tobytes()
    kernel = "arrayport_transpose_tiles" if name in TILED else "arrayport_strided_copy"
    assert cuda.calls("launch_kernel") == [(0, kernel, 1)]
    assert len(cuda.calls("copy_async")) == (target == "cpu")
    assert not cuda.calls("copy_2d_async")
    del source, copy


@pytest.mark.parametrize("dtype", [np.uint8, np.complex128], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", [name for name in layouts(np.uint8) if name not in TILED])
def test_the_64_bit_indexing_copies_what_the_32_bit_one_does(cuda, monkeypatch, name, dtype):
    # Past 2**32 units the plain kernel divides in 64 bits; no test can hold that many, so
    # the limit is lowered to 0 here and every layout takes that path: same bytes.
    monkeypatch.setattr(strided_copy, "NARROW_COUNT", 0)
    array = layouts(dtype)[name]
    source = device_array(array)
    copy = source.copy(device="cuda:0")
    assert contents(copy) == np.ascontiguousarray(array).tobytes()
    assert cuda.calls("launch_kernel") == [(0, "arrayport_strided_copy", 1)]
    del source, copy


@needs_two_devices
def test_a_strided_copy_to_the_host_on_another_contexts_stream_takes_the_dma_path(cuda):
    # The kernel could not read device 0's memory from device 1's context: it declines and
    # the 2-D transfers do the copy instead (found by a review: it raised once).
    array = np.arange(12 * 9, dtype=np.float32).reshape(12, 9)
    elsewhere = Stream(1)
    try:
        copy = device_array(array.T).copy(device="cpu", stream=int(elsewhere))
        np.testing.assert_array_equal(ap.to_numpy(copy), array.T)
        assert cuda.calls("copy_2d_async")
        del copy
    finally:
        elsewhere.synchronize()
        elsewhere.close()


@needs_simulator
def test_strided_copies_to_the_host_stage_in_stream_order(cuda):
    # The packed staging comes from arrayport's pool on the device and goes back to it in
    # the copy's stream order: after the first copy, no cuMemAlloc, no cuMemFree, and the
    # host waits only for the copy itself (its result is host memory, readable on return).
    # (From the device's default pool, whose release threshold is 0, the block would go
    # back to the driver at each copy's synchronization: no reuse.)
    array = np.arange(48 * 40, dtype=np.float32).reshape(48, 40).T
    source = device_array(array)
    source.copy(device="cpu")                     # the first: the pool grows
    before = simulator.counters()
    for _ in range(3):
        assert ap.to_numpy(source.copy(device="cpu")).tobytes() == array.T.T.tobytes()
    counts = {name: simulator.counters()[name] - before[name] for name in before}
    assert counts["cuMemAlloc"] == counts["cuMemFree"] == 0
    assert counts["cuMemAllocFromPoolAsync"] == counts["cuMemFreeAsync"] == 3
    assert counts["pool_reuses"] == 3 and counts["cuMemAllocAsync"] == 0
    # into pageable memory the transfer returns only when done (the API's rule); then the
    # copy's own wait, which finds nothing left
    assert counts["cuStreamSynchronize"] == 3 and counts["host_synchronizations"] == 2 * 3
    del source


@needs_simulator
def test_a_strided_copys_staging_is_freed_in_its_own_streams_order(cuda, slow_streams):
    # The packed staging of a strided copy to the host is freed with cuMemFreeAsync on the
    # copy's own stream, after the kernel that fills it and the transfer that reads it. On
    # a busy non-blocking stream a free on the legacy stream (which does not wait for it)
    # would run first: the kernel and the transfer would touch freed memory — a use after
    # free on a GPU, CUDA_ERROR_ILLEGAL_ADDRESS on the simulator (which poisons it). Into
    # pinned memory: the transfer is asynchronous (into pageable memory it would return
    # only once done, and the free after it could not overtake it).
    busy = Stream(0)
    array = np.arange(48 * 40, dtype=np.float32).reshape(48, 40)
    source = device_array(array.T)
    earlier = DeviceArray(np.zeros(8, np.uint8), device=0, stream=busy, busy=3)  # 120 ms
    try:
        before = simulator.counters()
        copy = source.copy(device="cuda_host", stream=int(busy))
        assert cuda.calls("launch_kernel") == [(0, "arrayport_transpose_tiles", int(busy))]
        assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(array.T).tobytes()
        counts = {name: simulator.counters()[name] - before[name] for name in before}
        assert counts["cuMemFreeAsync"] == 1 and counts["freed_memory_accesses"] == 0
        del copy
    finally:
        earlier.free()
        busy.close()
    del source


@pytest.mark.parametrize("name", ["contiguous", "0-d", "size-0"])
def test_contiguous_and_empty_data_launch_nothing(cuda, name):
    array = {"contiguous": np.arange(24.0).reshape(4, 6), "0-d": np.array(2.5),
             "size-0": np.zeros((3, 0, 2))[:, :, ::-1]}[name]
    copy = device_array(array).copy(device="cuda:0")
    assert contents(copy) == np.ascontiguousarray(array).tobytes()
    assert not cuda.calls("launch_kernel")


def test_the_kernel_runs_after_the_sources_pending_writes(cuda, slow_streams):
    # The source is still being written on the producer's stream; the copy goes on the
    # consumer's: the kernel must read only after the write (an event wait, no host sync).
    producer, consumer = Stream(0), Stream(0)
    try:
        array = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
        source = device_array(array.T, pending_on=producer)
        copy = source.copy(device="cuda:0", stream=int(consumer))
        assert cuda.calls("launch_kernel") == [(0, "arrayport_transpose_tiles",
                                                 int(consumer))]
        assert cuda.calls("make_stream_wait")[0] == (0, int(consumer), int(producer))
        assert not cuda.calls("synchronize")
        assert contents(copy) == np.ascontiguousarray(array.T).tobytes()
        del source, copy
    finally:
        for stream in (producer, consumer):
            stream.synchronize()
            stream.close()


@needs_two_devices
def test_a_strided_peer_copy_is_packed_on_its_own_device_before_the_transfer(
        cuda, slow_streams):
    # On the default stream the packing runs on the source device's own (by the kernel), and
    # the transfer on the destination's waits for it: two devices' default streams are not
    # ordered with each other unless told (this copy once read the packed buffer unwritten).
    array = np.arange(4000.0).reshape(40, 100)
    copy = device_array(array.T, (2, 1)).copy(device="cuda:0")
    assert contents(copy) == np.ascontiguousarray(array.T).tobytes()
    assert cuda.calls("launch_kernel") == [(1, "arrayport_transpose_tiles", 1)]
    assert (0, 1, 1) in cuda.calls("make_stream_wait")
    del copy


@needs_two_devices
def test_a_strided_peer_copy_on_the_destinations_stream_is_packed_by_dma(cuda, slow_streams):
    # A stream of the destination device: a kernel there could not read the source
    # device's memory, so the packing on the source device stays DMA, on that stream.
    consumer = Stream(0)
    try:
        array = np.arange(4000.0).reshape(40, 100)
        copy = device_array(array.T, (2, 1)).copy(device="cuda:0", stream=int(consumer))
        assert contents(copy) == np.ascontiguousarray(array.T).tobytes()
        assert cuda.calls("copy_2d_async")   # the kernel was asked, and declined
        del copy
    finally:
        consumer.synchronize()
        consumer.close()


def fresh_driver():
    """A driver of its own over the process's CUDA library, with its own kernel cache."""
    return cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)


def copy_with(driver, array, ordinal=0):
    source = device_array(array, (2, ordinal))
    target = driver.allocate_device(ordinal, array.nbytes)
    launched = strided_copy.launch(driver, ordinal, target.address, source, 1)
    driver.synchronize(ordinal, 1)
    out = np.empty(array.shape, array.dtype)
    view = ap.view(out)
    driver.copy_async(ordinal, view.ptr, target.address, array.nbytes, 1)
    driver.synchronize(ordinal, 1)
    return launched, out


@needs_two_devices
@needs_simulator
def test_a_module_is_loaded_once_per_context_and_unloaded_at_close(nothing_leaks):
    driver = fresh_driver()
    modules = simulator.live_modules()
    loads = simulator.counters()["cuModuleLoadData"]
    array = np.arange(35, dtype=np.int16).reshape(5, 7).T
    for ordinal in (0, 0, 1, 1):
        launched, out = copy_with(driver, array, ordinal)
        assert launched and out.tobytes() == np.ascontiguousarray(array).tobytes()
    assert simulator.counters()["cuModuleLoadData"] - loads == 2   # one per device's context
    assert simulator.live_modules() - modules == 2 and driver.kernels.loaded() == 2
    driver.close()
    assert simulator.live_modules() == modules and driver.kernels.loaded() == 0


def test_a_module_the_driver_cannot_load_leaves_the_copy_to_dma(cuda, monkeypatch):
    newer = kernels.ptx_image("strided_copy").replace(b".version 8.0", b".version 99.0")
    monkeypatch.setattr(kernels, "ptx_image", lambda module: newer)
    monkeypatch.setattr(cuda_driver.driver, "kernels", kernels.KernelCache(cuda_driver.driver))
    array = np.arange(60, dtype=np.float64).reshape(6, 10)[:, ::3]
    copy = device_array(array).copy(device="cuda:0")
    assert contents(copy) == np.ascontiguousarray(array).tobytes()
    assert cuda.calls("copy_2d_async")
    why = cuda_driver.driver.kernels.why_not(0, "strided_copy")
    assert "cuModuleLoadData failed" in why   # remembered: not tried again at each copy
    del copy


def test_hip_cannot_load_ptx_and_says_so_by_launching_nothing():
    assert hip_driver.driver.launch_kernel(0, "strided_copy", "arrayport_strided_copy",
                                           (1, 1, 1), (256, 1, 1), None, 0) is False
