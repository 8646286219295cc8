"""View.copy and the stream rules around copies and exports, on the CUDA driver simulator
(`pytest -m gpu`; a GPU with ARRAYPORT_GPU=hardware): the bytes, and exactly what arrayport
asks of the driver — which copies, on which stream, which event waits and host
synchronizations — recorded while the driver does it (tests/helpers/driver_log.py). These
were once run against a stand-in driver that succeeded at everything; on the simulator a
wrong stream, context or handle is the driver's error, as on a GPU."""

import ctypes
import gc
import threading
import time
import weakref

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from copy_layouts import copy_layouts  # noqa: E402
from driver_log import DriverLog, contents, device_array  # noqa: E402
from on_simulator import nothing_leaks, without_kernels  # noqa: E402,F401
from on_simulator import SIMULATED, needs_simulator, simulator, slow_streams  # noqa: E402,F401
from sim_arrays import Stream  # noqa: E402


@pytest.fixture
def cuda(monkeypatch, nothing_leaks):
    return DriverLog(monkeypatch)


class Streams:
    """Three non-blocking streams of device 0 (``int()`` of each is its handle)."""

    def __init__(self):
        self.producer, self.consumer, self.other = Stream(0), Stream(0), Stream(0)

    def close(self):
        for stream in (self.producer, self.consumer, self.other):
            stream.synchronize()
            stream.close()


@pytest.fixture
def streams():
    made = Streams()
    yield made
    gc.collect()
    made.close()


@pytest.fixture
def sync_off():
    with ap.no_implicit_sync():
        yield


# ---- copies in every direction --------------------------------------------------------------

@pytest.mark.parametrize("name", list(copy_layouts()))
def test_host_to_device_and_back_bit_for_bit(cuda, name):
    array = copy_layouts()[name]
    on_device = ap.view(array).copy(device="cuda:0")
    assert on_device.device == (2, 0) and on_device.is_copy and not on_device.readonly
    assert on_device.is_c_contiguous and on_device.shape == array.shape
    assert contents(on_device) == np.ascontiguousarray(array).tobytes()
    back = on_device.copy(device="cpu")
    assert back.device == (1, 0) and back.is_copy
    assert ap.to_numpy(back).tobytes() == np.ascontiguousarray(array).tobytes()
    # Host sources are packed on the host and sent whole: one transfer at most.
    assert len(cuda.calls("copy_async")) == (2 if array.size else 0)
    assert not cuda.calls("copy_2d_async")
    del on_device, back


@pytest.mark.parametrize("name", ["transposed", "sliced", "negative", "broadcast", "permuted"])
def test_strided_device_data_moves_by_2d_transfers_where_no_kernel_runs(cuda, without_kernels,
                                                                        name):
    array = copy_layouts()[name]
    source = device_array(array)
    for target in ("cuda:0", "cpu"):
        copy = source.copy(device=target)
        assert copy.device == ap.Device(target) and copy.is_c_contiguous
        assert contents(copy) == np.ascontiguousarray(array).tobytes()
    # A pitch no 2-D transfer takes (negative, zero): each row a plain transfer of its own.
    rows_one_by_one = name in ("negative", "broadcast")
    assert bool(cuda.calls("copy_2d_async")) != rows_one_by_one
    assert bool(cuda.calls("copy_async")) == rows_one_by_one
    del source, copy


@needs_two_devices
def test_device_to_device_across_gpus_is_a_peer_transfer(cuda, streams):
    array = np.arange(12.0).reshape(3, 4)
    on_device_1 = Stream(1)
    try:
        copy = device_array(array, (2, 1)).copy(device="cuda:0", stream=int(streams.consumer))
        assert copy.device == (2, 0)
        assert contents(copy) == array.tobytes()
        assert cuda.calls("copy_peer_async") == [(0, 1, array.nbytes, int(streams.consumer))]
        # Strided: packed on its own device first, then sent whole.
        copy = device_array(array.T, (2, 1)).copy(device="cuda:0", stream=int(streams.consumer))
        assert contents(copy) == np.ascontiguousarray(array.T).tobytes()
        # The result from arrayport's pool on device 0, in the copy stream's order; the
        # packing on device 1, whose pool the stream (device 0's) cannot order: cuMemAlloc.
        consumer = int(streams.consumer)
        assert cuda.calls("allocate_result")[-2:] == [(0, array.nbytes, consumer),
                                                      (1, array.nbytes, consumer)]
        assert cuda.calls("allocate_device")[-1:] == [(1, array.nbytes)]
        del copy
    finally:
        on_device_1.close()


def test_pinned_host_memory_target(cuda):
    array = np.arange(6, dtype=np.uint16)
    pinned = ap.view(array).copy(device="cuda_host")
    assert pinned.device == (3, 0) and cuda.calls("allocate_pinned") == [(array.nbytes,)]
    assert ap.to_numpy(pinned).tobytes() == array.tobytes()  # the CPU reads pinned memory
    del pinned


def test_same_device_copy_is_new_memory(cuda):
    source = device_array(np.arange(5, dtype=np.int64))
    copy = source.copy()
    assert copy.device == (2, 0) and copy.ptr != source.ptr
    assert contents(copy) == np.arange(5, dtype=np.int64).tobytes()
    del source, copy


def test_copy_keeps_its_source_alive_while_transfers_may_read_it(cuda, held_budget):
    # The result holds its source while it lives, and past its death until its block is
    # returned after the device's work: the copy's transfer may not have run when the result
    # dies, and the source's owner frees its memory with cuMemFree, which does not wait (the
    # simulator poisons freed memory: dropped at the result's death, the pending transfer
    # read freed memory — CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronization).
    held_budget(1 << 40)                  # deaths alone return nothing
    source = device_array(np.arange(4.0))
    watcher = weakref.ref(source)
    copy = source.copy()
    del source
    gc.collect()
    assert watcher() is not None  # the copy's owner holds the source
    del copy
    gc.collect()
    assert watcher() is not None  # the transfer may still read it: kept with the held block
    ap.release_device_memory()    # the held block returned, after the device's work
    gc.collect()
    assert watcher() is None


@needs_simulator
def test_a_dead_result_keeps_its_source_until_the_copy_that_reads_it_has_run(
        streams, slow_streams, held_budget, nothing_leaks):
    # A result dying before its copy has run (nobody read it) lets go of its source only
    # once its block returns, after the device's work: the source's owner frees with
    # cuMemFree, which does not wait — dropped at the result's death, the copy still queued
    # on a busy stream would read freed memory (on the simulator: poisoned, a fault).
    held_budget(1 << 40)                              # deaths alone return nothing
    source = device_array(np.arange(64.0))            # no pending work: freed at once
    earlier = Stream(0)
    try:
        watcher = weakref.ref(source)
        ap.view(np.zeros(8)).copy(device="cuda:0")    # the pool made
        before = simulator.counters()
        source.copy(stream=int(streams.consumer))     # queued behind nothing: 30 ms late
        del source
        gc.collect()
        assert watcher() is not None                  # kept by the held block
        streams.consumer.synchronize()
        assert simulator.counters()["freed_memory_accesses"] == \
            before["freed_memory_accesses"]
        ap.release_device_memory()
        gc.collect()
        assert watcher() is None
    finally:
        earlier.close()


def test_copy_to_a_device_without_a_driver_next_to_cuda(cuda):
    with pytest.raises(BufferError, match="^copy: cannot copy cuda:0 memory to vulkan:0: "
                                          "arrayport has no driver for vulkan devices"):
        device_array(np.arange(3.0)).copy(device="vulkan:0")
    with pytest.raises(BufferError, match="^copy: cannot copy cuda:0 memory to rocm:0: "
                                          "arrayport cannot copy between cuda and rocm"):
        device_array(np.arange(3.0)).copy(device="rocm:0")
    assert not cuda.log
    managed = device_array(np.arange(3.0), (13, 0))  # managed memory as a source
    copy = managed.copy(device="cuda:0")
    assert contents(copy) == np.arange(3.0).tobytes()
    del managed, copy


def test_managed_memory_copies_into_new_managed_memory(cuda):
    managed = device_array(np.arange(3.0), (13, 0))
    copy = managed.copy()
    assert copy.device == (13, 0) and contents(copy) == np.arange(3.0).tobytes()
    assert cuda.calls("allocate_device") == [(0, 24, "managed")]
    del managed, copy


def test_cpu_to_pinned_runs_on_the_cuda_default_stream(cuda):
    pinned = ap.view(np.arange(3.0)).copy(device="cuda_host")
    assert cuda.calls("copy_async") == [(0, 24, 1)]
    with pytest.raises(ValueError, match="stream must be None for cuda_host memory"):
        ap.view(np.arange(3.0)).copy(device="cuda_host", stream=5)
    del pinned


# ---- streams around copies ------------------------------------------------------------------

def test_copy_orders_itself_between_the_producer_and_the_consumer(cuda, streams):
    producer, consumer = int(streams.producer), int(streams.consumer)
    source = device_array(np.arange(8.0), pending_on=streams.producer)
    cuda.log.clear()
    copy = source.copy(stream=consumer)
    assert [entry[0] for entry in cuda.log] == [
        "allocate_result", "make_stream_wait", "copy_async", "make_stream_wait"]
    assert cuda.calls("make_stream_wait") == [(0, consumer, producer), (0, producer, consumer)]
    assert not cuda.calls("synchronize")  # device results: no host wait
    assert contents(copy) == np.arange(8.0).tobytes()
    del source, copy


def test_copy_result_has_work_pending_on_its_stream(cuda, streams):
    consumer = int(streams.consumer)
    copy = ap.view(np.arange(3.0)).copy(device="cuda:0", stream=consumer)
    assert copy.__cuda_array_interface__["stream"] == consumer
    assert cuda.calls("copy_async") == [(0, 24, consumer)]
    del copy


# ---- where copy results live: arrayport's pool, freed after everyone's work ----------------

@pytest.fixture
def held_budget(monkeypatch):
    """Set how many bytes of dead results arrayport's pools and its holder of ordinary
    memory hold before one wait returns them (0: every death returns its block at once,
    waiting), and how many entries at most (``entries``; default: no limit)."""
    from arrayport.gpu import held_memory

    def return_held():   # earlier tests' dead results: the budget counts from none
        driver = cuda_driver.driver
        for holder in (driver.memory.result_pool(0), driver.memory.ordinary_holder()):
            if holder is not None:   # None: a test's setup without pools
                driver.memory.return_held(holder, holder.take())

    def set_budget(nbytes, entries=None):
        return_held()
        monkeypatch.setattr(held_memory.ResultPool, "budget", lambda pool: nbytes)
        monkeypatch.setattr(held_memory, "_HELD_ENTRIES_MAX", entries or 1 << 40)
    yield set_budget
    return_held()


@needs_simulator
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_copy_results_come_from_arrayports_pool_with_no_allocation_once_warm(cuda, streams,
                                                                             layout,
                                                                             held_budget):
    # A steady stream of copies costs no cuMemAlloc and no cuMemFree (issue 43), and a copy
    # does not wait on the host: its result comes from arrayport's pool in the copy stream's
    # order. A result's death does not wait either: its block is held, and the host waits
    # once for every budget's worth of held blocks, which then all go back to the pool.
    array = np.arange(40 * 24, dtype=np.float32).reshape(40, 24)
    source = device_array(array if layout == "contiguous" else array.T)
    consumer = int(streams.consumer)
    source.copy(stream=consumer)           # the first: the pool is made
    held_budget(1 << 40, entries=3)        # three results' blocks, then one wait
    for _ in range(3):                     # the pool grows to three blocks, held, returned
        source.copy(stream=consumer)
    cuda_driver.driver.synchronize(0, 1)
    assert cuda_driver.driver.memory.held_blocks() == 0
    before = simulator.counters()
    waits = []
    for _ in range(6):
        started = simulator.counters()
        copy = source.copy(stream=consumer)
        assert simulator.counters()["host_synchronizations"] == started["host_synchronizations"]
        assert contents(copy) == np.ascontiguousarray(source_values(array, layout)).tobytes()
        dying = simulator.counters()["cuCtxSynchronize"]
        del copy
        gc.collect()
        waits.append(simulator.counters()["cuCtxSynchronize"] - dying)
        cuda_driver.driver.synchronize(0, 1)   # an idle device: any free has run
    # one wait per three deaths: a synchronization of each device that may read the pool's
    # blocks (its own, and the peers it grants access: cuDeviceCanAccessPeer)
    readers = len(cuda_driver.driver.memory.made_pool(0).readers)
    assert waits == [0, 0, readers, 0, 0, readers]
    counts = {name: simulator.counters()[name] - before[name] for name in before}
    assert counts["cuMemAlloc"] == counts["cuMemFree"] == 0
    assert counts["cuMemAllocFromPoolAsync"] == counts["pool_reuses"] == 6
    assert counts["cuMemPoolCreate"] == 0            # one pool per device, made once
    assert cuda.calls("allocate_result")[-1] == (0, array.nbytes, consumer)
    del source


@needs_simulator
def test_a_pool_out_of_memory_returns_the_held_blocks_and_tries_again(cuda, monkeypatch,
                                                                      held_budget):
    # The held blocks are memory the pool could give: an allocation the driver refuses
    # for want of memory (CUDA_ERROR_OUT_OF_MEMORY) returns them first, then tries again.
    source = device_array(np.arange(32.0))
    source.copy()
    held_budget(1 << 30)                       # nothing returned by deaths alone
    for _ in range(3):
        source.copy()
    assert cuda_driver.driver.memory.held_blocks() == 3
    driver = cuda_driver.driver
    real = driver._optional("cuMemAllocFromPoolAsync")
    refusals = []

    def out_of_memory_once(*args):
        if not refusals:
            refusals.append(args)
            return 2                           # CUDA_ERROR_OUT_OF_MEMORY
        return real(*args)

    monkeypatch.setattr(driver, "_optional", lambda name: out_of_memory_once
                        if name == "cuMemAllocFromPoolAsync" else type(driver)._optional(
                            driver, name))
    copy = source.copy()
    assert refusals and driver.memory.held_blocks() == 0
    assert contents(copy) == np.arange(32.0).tobytes()
    del copy, source


def device_memory_in_use(ordinal=0):
    """The bytes the driver says device ``ordinal`` has allocated (cuMemGetInfo)."""
    library = cuda_driver.driver.library.get()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    with cuda_driver.driver.on_device(ordinal):
        assert library.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return total.value - free.value


@needs_simulator
def test_a_device_out_of_memory_gets_the_held_blocks_back_for_a_copy_on_another_stream(
        streams, full_device, nothing_leaks):
    # A real out-of-memory (the simulator's device made just too small): the held blocks go
    # back in the legacy stream's order, and the device finishes its work before the retry,
    # so that the copy, on a stream of its own, gets one of them — a block freed in one
    # stream's order is not another stream's until the free has run, and a retry at once
    # failed for want of memory again.
    values = np.arange(1 << 18, dtype=np.float64)          # 2 MiB: a pool chunk each
    source = device_array(values)
    consumer = int(streams.consumer)
    source.copy(stream=consumer)                            # the pool, made
    full_device(source, consumer, 3, room=values.nbytes // 2)
    before = simulator.counters()
    copy = source.copy(stream=consumer)
    counts = {name: simulator.counters()[name] - before[name] for name in before}
    assert counts["cuMemAllocFromPoolAsync"] == 2 and counts["pool_reuses"] == 1
    assert cuda_driver.driver.memory.held_blocks() == 0
    assert contents(copy) == values.tobytes()
    del copy, source


@pytest.fixture
def full_device(held_budget):
    """``fill(source, stream, count, room)``: the simulator's device made as small as what
    is allocated now (garbage collected, arrayport's pool trimmed), ``count`` results of
    ``source`` made on ``stream`` and dead — held, deaths alone returning nothing — and
    ``room`` bytes more. The device's memory is restored after the test."""
    def fill(source, stream, count, room):
        held_budget(1 << 40)
        gc.collect()
        ap.release_device_memory()
        simulator.set_device_memory(device_memory_in_use() + count * source.nbytes + room)
        for _ in range(count):
            source.copy(stream=stream)
        gc.collect()
        assert cuda_driver.driver.memory.held_blocks() == count
    yield fill
    simulator.set_device_memory(0)


@needs_simulator
@needs_two_devices
def test_a_strided_copy_to_another_device_on_its_stream_gets_room_like_any_other(
        full_device, nothing_leaks):
    # A strided copy from device 0 to device 1 on a stream of device 1 packs on device 0
    # into cuMemAlloc memory (the stream is not device 0's, so not the pool's); with device
    # 0 full of arrayport's dead results that allocation asks for room as every other does
    # — the held results go back — where it once failed with "cuMemAlloc_v2(...) failed
    # with error 2" (the same copy on the default stream got room).
    array = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)   # 2 MiB: a chunk
    results = device_array(array)
    source = device_array(array.T)
    destination = Stream(1)
    try:
        results.copy()                                           # the pool, made
        full_device(results, 1, 3, room=array.nbytes // 2)
        assert device_memory_in_use(1) + array.nbytes <= device_memory_in_use(0) + \
            array.nbytes // 2 + 3 * array.nbytes                 # device 1 has room
        before = simulator.counters()
        copy = source.copy(device="cuda:1", stream=int(destination))
        counts = {name: simulator.counters()[name] - before[name] for name in before}
        assert counts["cuMemAlloc"] == 3          # refused, refused, served (see below)
        assert cuda_driver.driver.memory.held_blocks() == 0
        assert contents(copy) == np.ascontiguousarray(array.T).tobytes()
        del copy
    finally:
        destination.synchronize()
        destination.close()
    del source, results
    ap.release_device_memory()           # device 1's held result too: later tests count
    gc.collect()


@needs_simulator
def test_arrayports_pool_keeps_little_idle_memory_past_a_synchronization(
        monkeypatch, held_budget, nothing_leaks):
    # Its release threshold: min(256 MiB, an eighth of the device), or
    # ARRAYPORT_POOL_KEEP_BYTES; memory the pool holds past it goes back to the driver at
    # the next synchronization (the driver's rule), for other libraries' allocators.
    from arrayport.gpu import held_memory
    driver = cuda_driver.driver
    assert held_memory.pool_keep_bytes(80 << 30) == 256 << 20          # an H100
    assert held_memory.pool_keep_bytes(1 << 30) == 128 << 20
    ap.view(np.zeros(1)).copy(device="cuda:0")                        # the pool, made
    threshold = ctypes.c_uint64()
    assert driver._optional("cuMemPoolGetAttribute")(
        driver.memory.result_pool(0).handle, 4, ctypes.byref(threshold)) == 0
    assert threshold.value == min(256 << 20, driver.device_memory(0) // 8)
    monkeypatch.setenv("ARRAYPORT_POOL_KEEP_BYTES", "nonsense")
    with pytest.raises(ValueError, match="ARRAYPORT_POOL_KEEP_BYTES must be a number"):
        held_memory.pool_keep_bytes(1 << 30)
    monkeypatch.setenv("ARRAYPORT_POOL_KEEP_BYTES", str(5 << 20))
    monkeypatch.setattr(driver.memory, "_result_pools", weakref.WeakKeyDictionary())
    try:
        values = np.arange(1 << 18, dtype=np.float64)                  # 2 MiB: a chunk
        held_budget(1 << 40)                      # a pool of its own: the setting's
        pool = driver.memory.result_pool(0)
        results = [ap.view(values).copy(device="cuda:0") for _ in range(4)]
        assert driver.pool_reserved(pool.handle) == 4 * values.nbytes
        del results
        gc.collect()
        driver.memory.return_held(pool, pool.take())    # back to the pool, frees enqueued
        assert driver.pool_reserved(pool.handle) == 4 * values.nbytes            # not before...
        driver.synchronize(0, 1)                                      # ...a synchronization
        assert driver.pool_reserved(pool.handle) == 2 * values.nbytes <= 5 << 20
    finally:
        driver.memory.close_pools()              # the test's pool, destroyed


@needs_simulator
def test_a_request_larger_than_any_held_block_gets_the_pools_memory_trimmed_back(
        streams, full_device, nothing_leaks):
    # Returned blocks stay the pool's, each serving requests of its size or less: a larger
    # result needs memory the pool does not map. After the returned blocks, the pool is
    # trimmed (its idle memory back to the driver) and the allocation tried once more
    # (found by a review: a 2 MiB copy failed with 3 MiB of dead 1 MiB results held).
    small = device_array(np.arange(1 << 18, dtype=np.float64))     # 2 MiB: a chunk
    large = np.arange(1 << 19, dtype=np.float64)                   # 4 MiB
    consumer = int(streams.consumer)
    small.copy(stream=consumer)
    full_device(small, consumer, 3, room=small.nbytes // 2)
    copy = ap.view(large).copy(device="cuda:0", stream=consumer)
    assert contents(copy) == large.tobytes()
    assert cuda_driver.driver.memory.held_blocks() == 0
    del copy, small


@needs_simulator
def test_a_request_no_room_can_serve_is_refused_with_the_drivers_error(streams, full_device,
                                                                      nothing_leaks):
    # Every step taken and still too little memory: a BufferError naming the allocation
    # and the driver's error, the held blocks returned, nothing left allocated; the device
    # serves again once it has the memory.
    small = device_array(np.arange(1 << 18, dtype=np.float64))     # 2 MiB: a chunk
    huge = np.arange(1 << 20, dtype=np.float64)                    # 8 MiB
    consumer = int(streams.consumer)
    small.copy(stream=consumer)
    full_device(small, consumer, 1, room=small.nbytes // 2)
    with pytest.raises(BufferError, match=r"cuMemAllocFromPoolAsync\(8388608\) failed"):
        ap.view(huge).copy(device="cuda:0", stream=consumer)
    assert cuda_driver.driver.memory.held_blocks() == 0
    simulator.set_device_memory(0)
    copy = ap.view(huge).copy(device="cuda:0", stream=consumer)
    assert contents(copy) == huge.tobytes()
    del copy, small


@needs_simulator
def test_a_staging_allocation_refused_memory_gets_room_from_arrayports_pool(
        streams, full_device, nothing_leaks):
    # A strided copy to the host stages its packed bytes in arrayport's pool on the device
    # (cuMemAllocFromPoolAsync); with the device full of that pool's blocks (dead results),
    # the refusal returns them and trims the pool, and the staging is tried again.
    library = cuda_driver.driver.library.get()
    default = ctypes.c_void_p()
    with cuda_driver.driver.on_device(0):                   # the default pool's idle blocks: gone
        assert library.cuDeviceGetDefaultMemPool(ctypes.byref(default), 0) == 0
        assert cuda_driver.driver._optional("cuMemPoolTrimTo")(default, 0) == 0
    array = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)   # 2 MiB: a chunk
    source = device_array(array.T)                          # strided: staged on the device
    results = device_array(array)
    consumer = int(streams.consumer)
    results.copy(stream=consumer)
    full_device(results, consumer, 3, room=array.nbytes // 2)
    copy = source.copy(device="cpu", stream=consumer)
    np.testing.assert_array_equal(ap.to_numpy(copy), array.T)
    assert cuda_driver.driver.memory.held_blocks() == 0
    del copy, source, results


@needs_simulator
def test_out_of_memory_waits_for_a_return_under_way_on_another_thread(streams, full_device,
                                                                      nothing_leaks):
    # Another thread has taken the held blocks and is returning them (waiting for the
    # device) when this thread's copy is refused memory: the copy waits for that return,
    # then for the device, and gets a block — it once found nothing held and failed.
    values = np.arange(1 << 18, dtype=np.float64)          # 2 MiB: a pool chunk each
    source = device_array(values)
    consumer = int(streams.consumer)
    source.copy(stream=consumer)
    driver = cuda_driver.driver
    pool = driver.memory.result_pool(0)
    taken, go, outcome = threading.Event(), threading.Event(), []

    def returner():             # a return under way: taken, its frees not yet enqueued
        with pool.returning():
            blocks = pool.take()
            taken.set()
            go.wait(10)
            driver.memory.return_held(pool, blocks)

    def copier():
        try:
            outcome.append(source.copy(stream=consumer))
        except BufferError as error:
            outcome.append(error)
    full_device(source, consumer, 3, room=values.nbytes // 2)
    try:
        threads = [threading.Thread(target=returner), threading.Thread(target=copier)]
        threads[0].start()
        assert taken.wait(10)
        tried = simulator.counters()["cuMemAllocFromPoolAsync"]
        threads[1].start()
        deadline = time.monotonic() + 20           # however loaded the machine: until the
        while simulator.counters()["cuMemAllocFromPoolAsync"] == tried \
                and time.monotonic() < deadline:   # copier has been refused
            time.sleep(0.01)
        threads[1].join(0.2)                       # and waits for the return under way
        assert threads[1].is_alive() and not outcome
        go.set()
        for thread in threads:
            thread.join(20)
        assert len(outcome) == 1 and isinstance(outcome[0], ap.View), outcome
        assert contents(outcome[0]) == values.tobytes()
        outcome.clear()
    finally:
        go.set()


def test_release_device_memory_gives_back_what_the_pool_keeps_and_spares_live_results(
        held_budget, nothing_leaks):
    # ap.release_device_memory() (like torch.cuda.empty_cache()): held blocks go back, the
    # pool is trimmed to what live results use, and the bytes given back are said. The
    # pool's reserved bytes are the driver's answer. How a GPU's pool lays blocks out in
    # its chunks is its own (dead blocks sharing a chunk with the live one cannot go), so
    # the bytes of each step are checked on the simulator, the end (nothing) everywhere.
    driver = cuda_driver.driver
    ap.view(np.zeros(1)).copy(device="cuda:0")       # the pool, made
    held_budget(1 << 40)                              # deaths alone return nothing
    ap.release_device_memory()                        # earlier tests' idle blocks: gone
    pool = driver.memory.result_pool(0)
    values = np.arange(1 << 18, dtype=np.float64)        # 2 MiB: a chunk of the pool each
    live = ap.view(values).copy(device="cuda:0")
    for _ in range(3):
        ap.view(values).copy(device="cuda:0")         # dead at once: held
    gc.collect()
    assert driver.memory.held_blocks() == 3
    reserved = driver.pool_reserved(pool.handle)
    assert reserved >= 4 * values.nbytes
    released = ap.release_device_memory()
    assert driver.memory.held_blocks() == 0
    assert released == reserved - driver.pool_reserved(pool.handle)
    if SIMULATED:
        assert released >= 3 * values.nbytes
        assert driver.pool_reserved(pool.handle) >= values.nbytes  # the live result's block stays
    assert ap.to_numpy(live.copy(device="cpu")).tolist() == values.tolist()
    del live
    gc.collect()
    ap.release_device_memory()
    assert driver.pool_reserved(pool.handle) == 0
    assert ap.release_device_memory() == 0            # nothing more to give


def source_values(array, layout):
    return array if layout == "contiguous" else array.T


@needs_simulator
def test_a_results_memory_returns_to_the_pool_only_after_a_consumers_pending_reads(
        cuda, streams, slow_streams, held_budget):
    # A consumer arrayport never sees (a DLPack importer's kernel on its own stream) may
    # still be reading a result when the result's last View goes: the block's return
    # waits for all of the device's work, so the block the pool hands out next is not
    # written under it. (A budget of 0: the block returns at its death.)
    ap.view(np.arange(4.0)).copy(device="cuda:0")   # the pool, made
    held_budget(0)
    first, second = np.arange(64.0), -np.arange(64.0)
    reader = Stream(0)
    driver = cuda_driver.driver.library.get()
    out = device_array(np.zeros(64))
    try:
        result = ap.view(first).copy(device="cuda:0")
        address = result.ptr
        cuda_driver.driver.synchronize(0, 1)
        with cuda_driver.driver.on_device(0):   # the consumer's read, 30 ms long
            assert driver.cuMemcpyAsync(ctypes.c_uint64(out.ptr), ctypes.c_uint64(address),
                                        ctypes.c_size_t(first.nbytes),
                                        ctypes.c_void_p(int(reader))) == 0
        del result
        gc.collect()
        with cuda_driver.driver.on_device(0):
            assert driver.cuStreamQuery(ctypes.c_void_p(int(reader))) == 0  # it had finished
        cuda_driver.driver.synchronize(0, 1)   # the free itself has run
        again = ap.view(second).copy(device="cuda:0")
        assert again.ptr == address                   # the pool's block, handed out again
        assert ap.to_numpy(again, copy=True).tolist() == second.tolist()
        assert np.frombuffer(contents(out), np.float64).tolist() == first.tolist()
        del again
    finally:
        reader.synchronize()
        reader.close()
        del out


@needs_simulator
def test_a_cumemalloc_result_is_freed_only_after_a_consumers_pending_reads(
        cuda, slow_streams, monkeypatch, held_budget):
    # Without a pool a result is cuMemAlloc memory, and cuMemFree does not wait for work
    # still reading it (it "may" synchronize): a dead result's memory is held, and freed
    # after every device's work — never at its death on the belief that the free waits (the
    # simulator poisons freed memory: the consumer's pending read would fault).
    driver = cuda_driver.driver
    held_budget(1 << 40)
    monkeypatch.setattr(driver.memory, "_result_pools", weakref.WeakKeyDictionary())
    monkeypatch.setattr(driver.memory, "_make_result_pool", lambda ordinal: None)   # no pools
    first = np.arange(64.0)
    reader = Stream(0)
    library = driver.library.get()
    out = device_array(np.zeros(64))
    try:
        result = ap.view(first).copy(device="cuda:0")
        assert cuda.calls("allocate_device")[-1] == (0, first.nbytes)
        driver.synchronize(0, 1)
        with driver.on_device(0):                     # the consumer's read, 30 ms long
            assert library.cuMemcpyAsync(ctypes.c_uint64(out.ptr), ctypes.c_uint64(result.ptr),
                                         ctypes.c_size_t(first.nbytes),
                                         ctypes.c_void_p(int(reader))) == 0
        before = simulator.counters()
        del result
        gc.collect()
        counts = {name: simulator.counters()[name] - before[name] for name in before}
        assert counts["cuMemFree"] == counts["host_synchronizations"] == 0   # held
        ap.release_device_memory()                    # after every device's work: freed
        assert simulator.counters()["cuMemFree"] - before["cuMemFree"] == 1
        assert np.frombuffer(contents(out), np.float64).tolist() == first.tolist()
        assert simulator.counters()["freed_memory_accesses"] == \
            before["freed_memory_accesses"]
    finally:
        reader.synchronize()
        reader.close()
        del out


@needs_simulator
def test_results_held_or_alive_when_the_driver_closes_are_all_freed(nothing_leaks):
    # At the driver's close (exit) the held blocks go back before the pool is destroyed;
    # a result still alive then and dying later (interpreter shutdown) is freed at once,
    # not held by a pool nobody will return (found by a review: it leaked).
    driver = cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)
    held = driver.allocate_result(0, 256, 1)
    alive = driver.allocate_result(0, 256, 1)
    del held
    assert driver.memory.held_blocks() == 1
    frees = simulator.counters()["cuMemFreeAsync"]
    driver.close()
    assert driver.memory.held_blocks() == 0
    assert simulator.counters()["cuMemFreeAsync"] - frees == 1
    del alive
    gc.collect()
    assert driver.memory.held_blocks() == 0
    assert simulator.counters()["cuMemFreeAsync"] - frees == 2
    cuda_driver.driver.synchronize(0, 1)


def test_a_dead_result_is_held_without_a_lock_a_collection_could_reenter():
    # A result's release runs in finalizers, inside a garbage collection that may start at
    # any call in the middle of another release on the same thread (from Python 3.12):
    # here a second release is run at every call hold makes (as a collection would run
    # it), and both blocks are held once — no wait on itself (found by a review: a lock
    # there hung on 3.12 and 3.13; a thread keeps a hang from hanging the suite).
    import sys
    import threading
    from arrayport.gpu.held_memory import ResultPool
    pool = ResultPool(0, (0,), 1 << 30)
    nested = []

    def collection_at_a_call(frame, event, arg):
        if event == "c_call" and frame.f_code.co_name == "hold" and len(nested) < 3:
            nested.append(pool.hold(0x2000 + len(nested), 64))

    def release():
        sys.setprofile(collection_at_a_call)
        try:
            outcome.append(pool.hold(0x1000, 64))
        finally:
            sys.setprofile(None)

    outcome = []
    worker = threading.Thread(target=release, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "a release nested in a release waited on itself"
    assert outcome == [[]] and nested and all(blocks == [] for blocks in nested)
    assert sorted(pointer for pointer, _, _ in pool.take()) == sorted(
        [0x1000] + [0x2000 + i for i in range(len(nested))])
    assert pool.take() == [] and pool.held() == 0


@needs_simulator
def test_a_pool_the_driver_cannot_make_leaves_copies_on_cumemalloc(cuda, monkeypatch):
    # A setup without memory pools (vGPU, MPS) refuses cuMemPoolCreate: copies keep the
    # ordinary allocation, and nothing half-made is left (found by a review: every copy
    # raised, and a pool made before a later step failed was never destroyed).
    import weakref
    driver = cuda_driver.driver
    monkeypatch.setattr(driver.memory, "_result_pools", weakref.WeakKeyDictionary())
    monkeypatch.setattr(driver, "_configure_pool",
                        lambda pool, keeps, peers: driver._call(
                            "cuMemPoolSetAttribute", pool, 99, ctypes.byref(ctypes.c_uint64(0))))
    before = simulator.counters()
    source = device_array(np.arange(12.0).reshape(3, 4))
    copy = source.copy()
    assert contents(copy) == np.arange(12.0).tobytes()
    assert cuda.calls("allocate_device")[-1] == (0, 96)          # the fallback
    counts = {name: simulator.counters()[name] - before[name] for name in before}
    assert counts["cuMemPoolCreate"] == counts["cuMemPoolDestroy"] == 1
    source.copy()                                                # remembered: no retry
    assert simulator.counters()["cuMemPoolCreate"] - before["cuMemPoolCreate"] == 1
    del source, copy


# ---- large uploads from pageable memory: the pinned ring (gpu/staging.py) ------------------

@pytest.fixture
def small_ring(monkeypatch):
    """The ring at a test's scale: 2 chunks of 4 KiB, from 8 KiB on."""
    from arrayport.gpu import staging
    monkeypatch.setattr(staging, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(staging, "SLOTS", 2)
    monkeypatch.setattr(staging, "THRESHOLD_BYTES", 8192)
    return staging


def test_a_large_pageable_upload_goes_chunk_by_chunk_through_the_pinned_ring(
        cuda, streams, small_ring, slow_streams):
    # 5.5 chunks through 2 slots, with every transfer 30 ms late: a chunk refilled before
    # the transfer that reads it ran would arrive as the next chunk's bytes.
    values = np.arange(5.5 * 4096 // 8)                     # float64, 22,528 bytes
    consumer = int(streams.consumer)
    copy = ap.view(values).copy(device="cuda:0", stream=consumer)
    assert cuda.calls("copy_async") == [(0, 4096, consumer)] * 5 + [(0, 2048, consumer)]
    assert cuda.calls("allocate_pinned") in ([(4096,), (4096,)], [])   # made once, then kept
    assert contents(copy) == values.tobytes()
    again = ap.view(values[::-1].copy()).copy(device="cuda:0", stream=consumer)
    assert not cuda.calls("allocate_pinned")[2:]                       # the ring is reused
    assert contents(again) == values[::-1].tobytes()
    del copy, again


@needs_simulator
def test_the_rings_chunks_are_freed_only_after_the_transfers_that_read_them(
        cuda, streams, small_ring, slow_streams):
    # Draining the ring (at the driver's close, or when its shape changes) waits for each
    # chunk's last transfer (its event) and then frees the chunk at once: cuMemFreeHost
    # does not wait for the transfers, and the simulator poisons freed pinned memory, so a
    # drain that did not wait would have the pending transfers read freed memory.
    values = np.arange(5.5 * 4096 // 8)
    consumer = int(streams.consumer)
    small_ring.release(cuda_driver.driver)                   # a ring of this shape
    copy = ap.view(values).copy(device="cuda:0", stream=consumer)   # transfers still queued
    before = simulator.counters()
    small_ring.release(cuda_driver.driver)
    counts = {name: simulator.counters()[name] - before[name] for name in before}
    assert small_ring.held(cuda_driver.driver) == (0, 0)
    assert counts["cuMemFreeHost"] == 2                       # freed, not held
    assert contents(copy) == values.tobytes()
    assert simulator.counters()["freed_memory_accesses"] == before["freed_memory_accesses"]
    del copy


def test_small_uploads_and_pinned_sources_skip_the_ring(cuda, small_ring):
    small = ap.view(np.arange(1000.0))                                  # 8,000 bytes
    copy = small.copy(device="cuda:0")
    assert cuda.calls("copy_async") == [(0, 8000, 1)]
    pinned = device_array(np.arange(2048.0), (3, 0))                    # 16 KiB, pinned
    as_cpu = ap.from_dlpack(pinned, device="cpu")                       # labelled CPU
    cuda.log.clear()
    copied = as_cpu.copy(device="cuda:0")
    assert cuda.calls("copy_async") == [(0, 16384, 1)]                  # one transfer
    assert contents(copied) == np.arange(2048.0).tobytes()
    del copy, pinned, as_cpu, copied


def test_default_stream_is_the_legacy_stream(cuda):
    source = device_array(np.arange(3.0))
    copy = source.copy()
    assert cuda.calls("copy_async") == [(0, 24, 1)]
    del source, copy


def test_device_to_host_waits_on_the_host_for_its_own_transfer(cuda, streams):
    source = device_array(np.arange(3.0), pending_on=streams.producer)
    result = source.copy(device="cpu", stream=int(streams.consumer))
    assert cuda.calls("synchronize") == [(0, int(streams.consumer))]
    assert result.__array_interface__ and result.device == (1, 0)
    assert ap.to_numpy(result).tolist() == [0.0, 1.0, 2.0]
    del source, result


def test_copies_with_sync_off_record_no_events(cuda, streams, sync_off):
    source = device_array(np.arange(3.0), pending_on=streams.producer)
    copy = source.copy(stream=int(streams.consumer))
    host = source.copy(device="cpu", stream=int(streams.consumer))
    assert not cuda.calls("make_stream_wait")
    # the host result must still be complete
    assert cuda.calls("synchronize") == [(0, int(streams.consumer))]
    del source, copy, host


@pytest.mark.parametrize("device,stream,message", [
    ("cuda:0", 0, "stream 0 is ambiguous on CUDA"),
    ("cuda:0", -1, "a copy needs one to run on"),
    ("cpu", 5, "stream must be None for cpu memory"),
])
def test_copy_stream_values_are_validated(cuda, device, stream, message):
    source = ap.view(np.arange(3.0))
    with pytest.raises(ValueError, match=message):
        source.copy(device=device, stream=stream)
    assert not cuda.log


# ---- DLPack export: the consumer's stream waits for pending work ---------------------------

@pytest.mark.parametrize("consumer, waits", [
    (None, [(0, 1, "producer")]),   # None: the legacy default stream
    (2, [(0, 2, "producer")]),      # the per-thread default stream
    ("consumer", [(0, "consumer", "producer")]),
    ("producer", []),               # the same stream: nothing to do
    (-1, []),                       # -1: no synchronization, by request
])
def test_export_orders_the_consumer_after_pending_work(cuda, streams, consumer, waits):
    named = {"producer": int(streams.producer), "consumer": int(streams.consumer)}
    view = device_array(np.arange(3.0), pending_on=streams.producer)
    capsule = view.__dlpack__(stream=named.get(consumer, consumer), max_version=(1, 3))
    assert cuda.calls("make_stream_wait") == [tuple(named.get(v, v) for v in wait)
                                              for wait in waits]
    assert not cuda.calls("synchronize")  # events, never a host wait
    imported = ap.from_dlpack(capsule)
    del view, imported, capsule


def test_export_with_sync_off_records_no_event(cuda, streams, sync_off):
    view = device_array(np.arange(3.0), pending_on=streams.producer)
    capsule = view.__dlpack__(stream=int(streams.consumer), max_version=(1, 3))
    assert not cuda.log
    del view, capsule


def test_cpu_export_of_pinned_memory_waits_on_the_host(cuda, streams):
    """Spec: with dl_device=kDLCPU, stream is None and the producer synchronizes."""
    view = device_array(np.arange(3.0), (3, 0), pending_on=streams.producer)
    capsule = view.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    assert cuda.calls("synchronize") == [(0, int(streams.producer))]
    imported = ap.from_dlpack(capsule)
    assert imported.device == (1, 0) and ap.to_numpy(imported).tolist() == [0.0, 1.0, 2.0]
    del view, imported, capsule


def test_pinned_memory_with_pending_work_is_waited_for_before_export(cuda, streams):
    """Pinned host memory has no DLPack stream (its consumer may be the CPU): export waits
    on the host for the GPU work pending on it."""
    view = device_array(np.arange(3.0), (3, 0), pending_on=streams.producer)
    imported = ap.from_dlpack(view.__dlpack__(max_version=(1, 3)))
    assert cuda.calls("synchronize") == [(0, int(streams.producer))]
    assert not cuda.calls("make_stream_wait")
    with ap.no_implicit_sync():
        capsule = view.__dlpack__(max_version=(1, 3))
    assert len(cuda.calls("synchronize")) == 1
    del view, imported, capsule


def test_view_with_a_stream_orders_it_after_pending_work(cuda, streams):
    view = device_array(np.arange(3.0), pending_on=streams.producer)
    assert ap.view(view, stream=int(streams.consumer)) is view
    assert cuda.calls("make_stream_wait") == [(0, int(streams.consumer),
                                               int(streams.producer))]
    with pytest.raises(ValueError, match="stream 0 is ambiguous"):
        ap.view(view, stream=0)
    del view


# ---- the CUDA Array Interface with synchronization off --------------------------------------

class CaiHolder:
    """Offers a CUDA Array Interface dict, and keeps the memory it describes alive."""

    def __init__(self, interface, memory):
        self.__cuda_array_interface__, self.memory = interface, memory


def test_cai_with_sync_off_ignores_and_hides_streams(cuda, streams):
    memory = device_array(np.arange(4.0))
    producer, consumer = int(streams.producer), int(streams.consumer)
    holder = CaiHolder(dict(memory.__cuda_array_interface__, stream=producer), memory)
    with ap.no_implicit_sync():
        view = ap.view(holder, stream=consumer)
        assert view.__cuda_array_interface__["stream"] is None
    assert not cuda.calls("make_stream_wait")
    view = ap.view(holder, stream=consumer)  # on again: wait, and the data is ready there
    assert cuda.calls("make_stream_wait") == [(0, consumer, producer)]
    assert view.__cuda_array_interface__["stream"] == consumer
    del view, holder, memory


# ---- the C exchange API: "no sync" exports order the default stream ------------------------

def test_exchange_exports_order_the_default_stream_after_pending_work(cuda, streams,
                                                                      capi_consumer):
    """The table's current work stream is the default stream (NULL); a consumer orders
    itself after it, so a View with work pending elsewhere first makes it wait (event)."""
    producer = int(streams.producer)
    view = device_array(np.arange(4.0), pending_on=streams.producer)
    assert capi_consumer.exchange_import(view)["device"] == (2, 0)
    assert cuda.calls("make_stream_wait") == [(0, 1, producer)]
    capi_consumer.exchange_dltensor(view)
    assert cuda.calls("make_stream_wait") == [(0, 1, producer)] * 2
    with ap.no_implicit_sync():
        capi_consumer.exchange_import(view)
    assert len(cuda.calls("make_stream_wait")) == 2
    idle = device_array(np.arange(4.0))
    capi_consumer.exchange_import(idle)  # nothing pending
    assert len(cuda.calls("make_stream_wait")) == 2
    del view, idle


# ---- contracts, pickling and shared memory with device data ---------------------------------

def test_a_device_constraint_copies_to_the_device_on_the_callers_stream(cuda, streams):
    host = np.arange(6, dtype=np.float32)
    on_gpu = ap.require(host, device="cuda", stream=int(streams.consumer))
    assert on_gpu.device == "cuda:0" and on_gpu.is_copy
    assert cuda.calls("copy_async")[-1][-1] == int(streams.consumer)
    assert contents(on_gpu) == host.tobytes()
    back = ap.require(on_gpu, device="cpu")
    np.testing.assert_array_equal(np.asarray(back), host)
    del on_gpu, back


def test_device_memory_is_checked_without_touching_it(cuda):
    on_gpu = device_array(np.zeros((2, 3), np.float32))
    assert ap.require(on_gpu, device="cuda:0", dtype="float32", copy=False) is on_gpu
    with pytest.raises(ap.RequirementError, match="cast=True converts on the host, and the "
                                                  "data is on cuda:0"):
        ap.require(on_gpu, dtype="float64", cast=True)
    assert not cuda.log
    del on_gpu


def test_device_views_refuse_to_pickle_unless_asked(cuda):
    import pickle
    on_gpu = device_array(np.arange(4.0))
    with pytest.raises(BufferError, match="in cuda:0 memory, and pickling it would copy it to "
                                          "the host; pickle view.copy\\(device='cpu'\\)"):
        pickle.dumps(on_gpu, protocol=5)
    assert cuda.calls("copy_async") == []
    with ap.device_pickling("host"):
        back = pickle.loads(pickle.dumps(on_gpu, protocol=5))
    assert back.device == "cpu"
    np.testing.assert_array_equal(np.asarray(back), np.arange(4.0))
    assert len(cuda.calls("copy_async")) == 1
    del on_gpu, back


def test_pinned_memory_waits_for_pending_work_then_travels_as_cpu(cuda, streams):
    import pickle
    pinned = device_array(np.arange(3.0), device=(3, 0), pending_on=streams.producer)
    back = pickle.loads(pickle.dumps(pinned, protocol=5))
    assert back.device == "cpu" and cuda.calls("synchronize") == [(0, int(streams.producer))]
    np.testing.assert_array_equal(np.asarray(back), np.arange(3.0))
    del pinned, back


def test_device_memory_is_shared_by_cuda_ipc_never_through_host_shared_memory(cuda):
    on_gpu = device_array(np.zeros(2))
    handle = on_gpu.share()                  # cuMemAlloc memory: exported as it is
    assert handle.kind == "cuda-ipc"
    assert not [entry for entry in cuda.log if "copy" in entry[0]]   # no byte moved
    handle.revoke()
    del on_gpu
