"""The fourth hostile pass (issue 51) on the CUDA driver simulator: the paths that pick a
device, each on the second device, where a device-0 assumption survived a mutation audit
(a copy to the host run on device 0 whatever the source's; the exchange table asked for
device 0's current stream whatever the tensor's); a context reset by another library,
whose kernel modules went with it; a forked child. The host-side cases are in
tests/test_hostile_fourth_pass.py."""

import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from exchange_producer import ExchangeTensor  # noqa: E402
from on_simulator import (needs_simulator, needs_two_devices, nothing_leaks,  # noqa: E402,F401
                          run_on_the_simulator, simulator_resets_contexts,
                          slow_streams)
from sim_arrays import DeviceArray, Stream  # noqa: E402

VALUES = np.arange(6 * 8, dtype=np.float32).reshape(6, 8) + 1


@pytest.fixture
def second_device_stream(nothing_leaks):
    stream = Stream(1)
    yield stream
    gc.collect()
    stream.synchronize()
    stream.close()


@needs_two_devices
def test_the_exchange_table_is_asked_for_the_tensor_s_own_device(second_device_stream,
                                                                 slow_streams):
    stream = second_device_stream
    ExchangeTensor.current_stream.clear()
    ExchangeTensor.current_stream[1] = int(stream)    # device 1's current stream: the write
    ExchangeTensor.current_stream[0] = 0              # device 0's: the default stream
    try:
        tensor = ExchangeTensor(DeviceArray(VALUES, device=1, stream=stream, busy=3))
        view = ap.view(tensor)
        assert view.device == ap.Device("cuda:1")
        # Asked for device 0, the View would have no work pending (0: the default stream),
        # and the host copy below would read the memory before the write.
        assert _core.pending_stream(view) == int(stream)
        assert contents(view.copy(device="cpu")) == VALUES.tobytes()
        del view, tensor
    finally:
        ExchangeTensor.current_stream.clear()


@needs_two_devices
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_copy_to_the_host_runs_on_the_source_s_device(second_device_stream, slow_streams,
                                                       layout):
    stream = second_device_stream
    array = DeviceArray(VALUES, device=1, stream=stream, busy=3)
    view = ap.view(array)
    assert view.device == ap.Device("cuda:1")
    source = view if layout == "contiguous" else view.T
    expected = VALUES if layout == "contiguous" else VALUES.T
    host = source.copy(device="cpu")
    assert host.device == ap.Device("cpu")
    assert np.array_equal(ap.to_numpy(host), expected)
    host_on_stream = source.copy(device="cpu", stream=int(stream))    # device 1's stream
    assert np.array_equal(ap.to_numpy(host_on_stream), expected)
    del view, source, host, host_on_stream
    array.free()


# ---- in a process of its own: what would leave this process's driver unusable -----------------

@needs_simulator
@pytest.mark.skipif(not simulator_resets_contexts(),
                    reason="this simulator has no cuDevicePrimaryCtxReset")
def test_a_context_reset_by_another_library_reloads_the_kernels_and_never_launches_a_dead_one():
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap, cudasim
        from sim_arrays import DeviceArray
        simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
        values = np.arange(48, dtype=np.float32).reshape(6, 8)

        def copied():   # a strided device copy: arrayport's kernel
            array = DeviceArray(values)
            view = ap.view(array).T.copy()
            out = view.copy(device="cpu")
            result = np.array(ap.to_numpy(out))
            del view, out
            array.free()
            return result

        assert np.array_equal(copied(), values.T)
        loads = simulator.counters()["cuModuleLoadData"]
        library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
        assert library.cuDevicePrimaryCtxReset_v2(0) == 0    # another library resets cuda:0
        assert np.array_equal(copied(), values.T)            # its kernel loaded again
        assert simulator.counters()["cuModuleLoadData"] - loads == 1
        print("ok")
    """)
    assert output.strip().endswith("ok")


@needs_simulator
def test_a_forked_child_that_touches_a_gpu_view_gets_a_clear_error():
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap
        from sim_arrays import DeviceArray
        array = DeviceArray(np.arange(6, dtype=np.float32))
        view = ap.view(array)
        assert ap.to_numpy(view.copy(device="cpu")).tolist() == list(range(6))
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:                     # the driver's state does not survive a fork
            os.close(reader)
            try:
                view.copy(device="cpu")
                answer = "copied"
            except ap.DriverUnavailable as refusal:
                answer = f"refused: {refusal}"
            answer += " | host: " + str(ap.to_numpy(ap.view(np.arange(3))).tolist())
            os.write(writer, answer.encode())
            os._exit(0)
        os.close(writer)
        answer = os.read(reader, 4096).decode()
        os.waitpid(child, 0)
        print(answer)
        assert ap.to_numpy(view.copy(device="cpu")).tolist() == list(range(6))  # parent: fine
        del view
        array.free()
    """)
    assert ("refused: copy: cannot copy cuda:0 memory to cpu: cuda: this process is a fork "
            "of one that had already used") in output
    assert "spawn" in output and "host: [0, 1, 2]" in output


# ---- a review of the held frees: what they keep, whom they wait for, what a fault leaves --------

@needs_simulator
def test_a_small_view_of_a_large_allocation_counts_all_of_it_while_its_dead_copy_keeps_it():
    # A dead result keeps its source until its copy surely ran; a 4-byte View of a 4 MiB
    # allocation keeps 4 MiB, and that counts toward the return: the sources do not pile up.
    output = run_on_the_simulator("""
        import gc, numpy as np, arrayport as ap
        from arrayport.gpu import held_memory
        from sim_arrays import DeviceArray
        held_memory.ResultPool.budget = lambda pool: 10 << 20   # a 10 MiB budget
        alive = []

        class Foreign:   # frees its memory when it goes, as a framework's tensor does
            def __init__(self):
                self.array = DeviceArray(np.zeros(1 << 20, np.float32))    # 4 MiB
                self.__cuda_array_interface__ = {
                    "shape": (1,), "typestr": "<f4", "data": (self.array.ptr, False),
                    "version": 3, "stream": None}
                alive.append(1)

            def __del__(self):
                self.array.free()
                alive.pop()

        most = 0
        for _ in range(12):
            foreign = Foreign()
            result = ap.view(foreign).copy()
            del foreign, result
            gc.collect()
            most = max(most, len(alive))
        print("most alive", most)
    """)
    most = int(output.split("most alive")[1])
    assert most <= 3, output        # 3 x 4 MiB reach the budget; before: 12, never returned


def test_a_tiny_result_counts_a_page_at_least(monkeypatch):
    # Dead 4-byte results were held by the million before a return (~0.5 KiB of host memory
    # each, and a page of the driver's): each counts a page at least.
    from arrayport.gpu import held_memory
    monkeypatch.setattr(held_memory.ResultPool, "budget", lambda pool: 3 * 4096)
    pool = held_memory.ResultPool(None, (0,), 1 << 30)
    assert pool.hold(0x1000, 4) == [] and pool.hold(0x2000, 4) == []
    assert [entry[0] for entry in pool.hold(0x3000, 4)] == [0x1000, 0x2000, 0x3000]


def test_held_entries_have_a_most(monkeypatch):
    from arrayport.gpu import held_memory
    monkeypatch.setattr(held_memory, "_HELD_ENTRIES_MAX", 2)
    pool = held_memory.ResultPool(None, (0,), 1 << 30)
    assert pool.hold(0x1000, 4096) == [] and len(pool.hold(0x2000, 4096)) == 2


@needs_simulator
def test_the_return_of_ordinary_memory_wakes_no_device_nobody_uses_and_cannot_deadlock():
    output = run_on_the_simulator("""
        import gc, numpy as np, arrayport as ap, cudasim
        from arrayport.gpu import cuda as cuda_driver, held_memory
        simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
        driver = cuda_driver.driver
        held_memory.ResultPool.budget = lambda pool: 0      # every death returns at once
        pinned = ap.view(np.arange(4.0)).copy(device="cuda_host")
        retains = simulator.counters()["cuDevicePrimaryCtxRetain"]
        del pinned
        gc.collect()                                         # returned: device 0's work only
        print("retained", sorted(driver.retained_devices()),
              simulator.counters()["cuDevicePrimaryCtxRetain"] - retains)
        # A finalizer's return while this thread retains device 1 (a collection at any
        # allocation there): it must not wait for a lock this thread holds.
        dying = [ap.view(np.arange(4.0)).copy(device="cuda_host")]
        call = driver._call

        def collecting(symbol, *args, **kwargs):
            if symbol == "cuDevicePrimaryCtxRetain" and dying:
                dying.clear()
                gc.collect()                                  # the pinned result dies here
            return call(symbol, *args, **kwargs)

        driver._call = collecting
        ap.view(np.arange(4.0)).copy(device="cuda:1")
        print("no deadlock")
    """)
    assert "retained [0] 0" in output and "no deadlock" in output


@needs_simulator
def test_a_faulted_device_does_not_keep_the_others_memory_from_being_freed():
    output = run_on_the_simulator("""
        import gc, numpy as np, arrayport as ap, cudasim
        from arrayport.gpu import cuda as cuda_driver
        from sim_arrays import Context, DeviceArray, Stream, check
        simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
        driver = cuda_driver.driver
        ap.view(np.arange(4.0)).copy(device="cuda:1")        # arrayport uses device 1 too
        # Device 1's context faults: its upload runs on memory freed before it ran.
        stream = Stream(1)
        doomed = DeviceArray(np.zeros(1024, np.uint8), device=1, stream=stream, busy=3)
        with Context(1):
            check(doomed.driver.cuMemFree_v2(doomed.ptr), "cuMemFree")
        doomed.ptr = 0
        try:
            stream.synchronize()
            print("no fault")
        except RuntimeError as fault:
            print("device 1 faulted:", fault)
        results = [ap.view(np.arange(4.0)).copy(device="cuda_host") for _ in range(20)]
        live = simulator.live()[0]
        del results
        gc.collect()
        try:
            ap.release_device_memory()
            print("released")
        except BufferError as error:
            print("raised:", error)
        print("held", driver.memory.held_blocks(), "freed", live - simulator.live()[0])
        os._exit(0)   # device 1's context is broken for good: no exit-time release
    """)
    assert "device 1 faulted" in output and "raised:" in output, output
    assert "held 0 freed 20" in output, output


@needs_simulator
def test_a_forked_child_leaves_the_parent_s_locks_alone_at_exit():
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap
        from arrayport.gpu import cuda as cuda_driver, staging
        driver = cuda_driver.driver
        ap.view(np.arange(4.0)).copy(device="cuda:0")
        ring = staging._ring_of(driver) if hasattr(staging, "_ring_of") else None
        locks = [driver._events_lock, driver.memory._result_pools_lock, driver._contexts_lock]
        for lock in locks:
            lock.acquire()        # another thread's, at the moment of the fork
        child = os.fork()
        if child == 0:
            driver.close()        # what the child's exit runs: nothing of the parent's
            os._exit(7)
        for lock in locks:
            lock.release()
        _, status = os.waitpid(child, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
    """)
    assert "child exit 7" in output, output
