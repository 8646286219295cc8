"""CUDA device Views across processes (issue 55): ``View.share()`` of device memory and
``View.from_shared`` in another process, on the CUDA driver simulator (each process loads
its own copy; memory and events cross as the driver shares them: tests/test_cudasim_ipc.py)
or on a GPU. The receivers are spawned processes (tests/helpers/ipc_children.py)."""

import gc
import multiprocessing
import os
import time

import numpy as np
import pytest

import arrayport as ap

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

import ipc_children  # noqa: E402
from arrayport.gpu import cuda as cuda_driver, ipc  # noqa: E402
from on_simulator import SIMULATED, needs_simulator, simulator  # noqa: E402


@pytest.fixture(scope="module")
def children_find_the_driver():
    """Child processes (of any start method, and Dask's and Ray's workers) load the driver
    this process loaded."""
    if SIMULATED:
        folder = os.path.dirname(os.environ["CUDASIM_LIBRARY"])
        previous = os.environ.get("LD_LIBRARY_PATH")
        os.environ["LD_LIBRARY_PATH"] = folder + (":" + previous if previous else "")
    yield
    if SIMULATED:
        if previous is None:
            del os.environ["LD_LIBRARY_PATH"]
        else:
            os.environ["LD_LIBRARY_PATH"] = previous


@pytest.fixture(autouse=True)
def every_export_ends():
    """Each test's exports end once its receivers are done (or it revoked them): what the
    next test, or file, finds is no memory kept for anyone."""
    early = simulator.counters()["pool_frees_before_importers"] if SIMULATED else 0
    yield
    assert ended(), f"{ipc.live_exports()} exports still kept"
    gc.collect()
    ap.release_device_memory()    # what the ended exports' memory policy held, given back
    if SIMULATED:                 # no block freed here while a receiver still had it
        assert simulator.counters()["pool_frees_before_importers"] == early


@pytest.fixture(scope="module")
def spawn(children_find_the_driver):
    return multiprocessing.get_context("spawn")


def on_device(values: np.ndarray):
    return ap.view(values).copy(device="cuda:0")


def exportable(values: np.ndarray):
    """``values`` in device memory CUDA exports as it is (``empty_shared``), filled on the
    GPU from a device copy of them."""
    filled = on_device(values)
    view = ap.empty_shared(values.shape, values.dtype, device="cuda:0")
    cuda_driver.driver.copy_async(0, view.ptr, filled.ptr, filled.nbytes, 1)
    return view


def ended(timeout=10.0, linger=None, unopened_after=None) -> bool:
    """Whether every export of this process has ended within ``timeout`` (the reaper's
    work; ``linger``/``unopened_after``: shorter limits, for exports an engine made)."""
    deadline = time.monotonic() + timeout
    while ipc.live_exports() and time.monotonic() < deadline:
        ipc.reap(linger, unopened_after)
        time.sleep(0.02)
    return ipc.live_exports() == 0


def test_another_process_reads_the_shared_device_memory(spawn):
    source = on_device(np.arange(24, dtype=np.int32).reshape(4, 6))
    handle = source.share()
    assert handle.kind == "cuda-pool" and len(__import__("pickle").dumps(handle)) < 1024
    with spawn.Pool(1) as pool:
        values, readonly, device = pool.apply(ipc_children.read, (handle,))
    assert values == np.arange(24).reshape(4, 6).tolist()
    assert (readonly, device) == (False, "cuda:0")


def cumemalloc_view(values: np.ndarray):
    """``values`` in an ordinary allocation (``cuMemAlloc``: what PyTorch's and CuPy's
    caching allocators hand out), filled on the GPU."""
    from arrayport import _core
    filled = on_device(values)
    memory = cuda_driver.driver.allocate_device(0, filled.nbytes)
    cuda_driver.driver.copy_async(0, memory.address, filled.ptr, filled.nbytes, 1)
    return _core.view_from_pointer(memory.address, values.shape, None, ap.DType(values.dtype),
                                   readonly=False, owner=memory, device=(2, 0),
                                   protocol="test")


def test_an_ordinary_allocation_crosses_by_its_cuda_ipc_handle_without_a_copy(spawn):
    """Memory of cuMemAlloc (another library's allocator) is exported as it is: its
    allocation's CUDA IPC handle and the View's offset in it."""
    whole = cumemalloc_view(np.arange(12, dtype=np.int64))
    handle = whole[4:].share()
    assert handle.kind == "cuda-ipc" and handle.offset == 32 and handle.socket == ""
    with spawn.Pool(1) as pool:
        values, readonly, device = pool.apply(ipc_children.read, (handle,))
    assert (values, readonly, device) == (list(range(4, 12)), False, "cuda:0")


def test_a_receiver_writes_into_a_writable_share_and_the_exporter_sees_it(spawn):
    view = exportable(np.zeros(6, np.uint8))
    with spawn.Pool(1) as pool:
        status = pool.apply(ipc_children.write_raw, (view.share(), 5))
    assert status == 0
    assert np.asarray(view.copy(device="cpu")).tolist() == [5] * 6


def test_a_read_only_share_of_arrayports_memory_is_read_only_in_the_driver(spawn):
    """The receiver of a read-only "cuda-pool" share maps it read-only (its pool granted
    CU_MEM_ACCESS_FLAGS_PROT_READ): even a raw driver write into it faults, and the
    exporter's memory is unchanged."""
    view = exportable(np.arange(6, dtype=np.uint8))
    handle = view.share(readonly=True)
    assert handle.kind == "cuda-pool"
    with spawn.Pool(1) as pool:
        status = pool.apply(ipc_children.write_raw, (handle, 9))
    assert status == 700                           # CUDA_ERROR_ILLEGAL_ADDRESS
    assert np.asarray(view.copy(device="cpu")).tolist() == list(range(6))


def test_the_pools_descriptor_goes_only_to_a_holder_of_the_exports_lease():
    """The exporter's descriptor server hands the sharing pool's descriptor to a process of
    its user that holds the export's lease, for an open export; anyone else is refused and
    gets nothing (here this process asks: it holds no lease of its own export)."""
    from arrayport.gpu import ipc_pool
    handle = exportable(np.arange(4.0)).share()
    with pytest.raises(BufferError, match=f"refused: process {os.getpid()} holds no lease"):
        ipc_pool.fetch_descriptor(handle.socket, handle.token, handle.pid)
    with pytest.raises(BufferError, match="ended that export, or never made it"):
        ipc_pool.fetch_descriptor(handle.socket, "0" * 32, handle.pid)
    ordinary = cumemalloc_view(np.arange(4.0)).share()        # a "cuda-ipc" export's token
    with pytest.raises(BufferError, match="ended that export, or never made it"):
        ipc_pool.fetch_descriptor(handle.socket, ordinary.token, handle.pid)
    ordinary.revoke()
    with pytest.raises(BufferError, match="is not process 1's"):   # a server not the exporter's
        ipc_pool.fetch_descriptor(handle.socket, handle.token, 1)
    refused_as_another_users(handle)
    handle.revoke()
    with pytest.raises(BufferError, match="ended that export, or never made it"):
        ipc_pool.fetch_descriptor(handle.socket, handle.token, handle.pid)
    assert ended()


def test_a_refusal_made_before_the_asker_spoke_still_reaches_it(monkeypatch):
    """The server refuses another user's process before reading anything, and closes: an
    asker whose request is written after that close (a broken pipe) still reads why."""
    import socket
    import types
    from arrayport.gpu import ipc_pool

    import select

    class LateAsker(socket.socket):
        def sendall(self, data, *flags):
            closed = select.poll()               # until the server has refused and closed
            closed.register(self, select.POLLRDHUP)
            assert closed.poll(5000), "the server did not close"
            return super().sendall(data, *flags)
    handle = exportable(np.arange(4.0)).share()   # the server made: its socket a real one
    monkeypatch.setattr(ipc_pool, "socket", types.SimpleNamespace(**{
        **vars(socket), "socket": LateAsker}))  # the asker's socket only: not the server's
    refused_as_another_users(handle)
    handle.revoke()
    assert ended()


def refused_as_another_users(handle) -> None:
    """This process, asking for ``handle``'s descriptor as if it were another user's (the
    server's user changed for the while), is refused as such."""
    from arrayport.gpu import ipc_pool
    server = ipc_pool._server
    server.user += 1
    try:
        with pytest.raises(BufferError, match="refused: another user's process"):
            ipc_pool.fetch_descriptor(handle.socket, handle.token, handle.pid)
    finally:
        server.user -= 1


def test_a_server_too_busy_to_answer_is_asked_again():
    """A server answering as many askers as it may closes the next connection unread (the
    asker sees a reset or an end); the asker asks again, and is answered once it can."""
    import threading
    from arrayport.gpu import ipc_pool
    handle = exportable(np.arange(4.0)).share()
    server = ipc_pool._server
    taken = 0
    while server.answering.acquire(blocking=False):   # every answering slot busy
        taken += 1
    freed = threading.Timer(0.2, lambda: [server.answering.release() for _ in range(taken)])
    freed.start()
    try:
        with pytest.raises(BufferError, match="holds no lease"):   # answered, at last
            ipc_pool.fetch_descriptor(handle.socket, handle.token, handle.pid)
    finally:
        freed.join()
    handle.revoke()
    assert ended()


def test_an_asker_that_says_nothing_holds_up_no_one():
    """The descriptor server answers each connection on its own: a connection that sends
    nothing (for up to a second, then dropped) does not delay the next asker's answer."""
    import socket
    from arrayport.gpu import ipc_pool
    handle = exportable(np.arange(4.0)).share()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect("\0" + handle.socket)
    try:
        time.sleep(0.05)                         # the silent one is being answered
        start = time.monotonic()
        with pytest.raises(BufferError, match="holds no lease"):
            ipc_pool.fetch_descriptor(handle.socket, handle.token, handle.pid)
        assert time.monotonic() - start < 0.5
    finally:
        silent.close()
    handle.revoke()
    assert ended()


def test_a_block_opened_again_while_its_last_mapping_closes_waits_for_the_close(spawn):
    """A pool block is imported once per process: a share of it opened just after the
    receiver dropped its last View of it (the closer thread still unmapping) waits for that
    unmapping instead of failing."""
    view = exportable(np.full(4, 7, np.uint8))
    handles = [view.share() for _ in range(20)]
    with spawn.Pool(1) as pool:
        assert pool.apply(ipc_children.reopen, (handles,)) == [7] * 20


def test_a_handle_naming_another_pool_than_the_exporters_is_refused_and_harms_nothing(spawn):
    """The exporter says which pool its descriptor is; a handle whose pool serial is not it
    (forged, or stale: the exporter made a new pool) is refused, and the receiver's import
    of the real pool, with a View on it, goes on serving."""
    import copy
    view = exportable(np.full(4, 3, np.uint8))
    good = view.share()
    forged = copy.copy(good)
    forged.pool += 1
    with spawn.Pool(1) as pool:
        answers = pool.apply(ipc_children.open_each, ([good, forged, view.share()],))
    assert answers[0] == 3 and answers[2] == 3, answers
    assert answers[1].startswith("BufferError: from_shared: the handle names the exporter's "
                                 f"pool {good.pool + 1}, which it no longer has"), answers


def test_read_only_and_writable_shares_of_one_block_map_it_once(spawn):
    """A receiver maps a pool block once, whichever shares name it (CUDA imports a block
    once per process), and imports its exporter's pool once."""
    view = exportable(np.arange(8, dtype=np.uint8))
    handles = (view.share(readonly=True), view.share(), view[2:].share())
    with spawn.Pool(1) as pool:
        found = pool.apply(ipc_children.open_many, (handles,))
    assert found == {"pointers": 1, "readonly": [True, False, False], "imports": 1,
                     "values": [list(range(8)), list(range(8)), list(range(2, 8))]}


def test_shares_opened_at_once_on_many_threads_import_the_pool_and_each_block_once(spawn):
    """Threads of a receiver opening shares of one exporter's pool at once: the pool is
    imported once, each block once (CUDA refuses a block's second import in a process),
    whichever thread gets there first; every View reads its own block."""
    views = [exportable(np.full(4, value, np.uint8)) for value in (1, 2, 3)]
    handles = [view.share(readonly=readonly) for view in views for readonly in (True, False)]
    with spawn.Pool(1) as pool:
        found = pool.apply(ipc_children.open_at_once, (handles,))
    assert found == {"import_pool": 1, "import_pool_block": 3, "pointers": 3,
                     "firsts": [1, 1, 2, 2, 3, 3]}


def test_a_slow_exporter_holds_up_no_open_of_other_memory(spawn):
    """A receiver waiting for one exporter's answer (its pool's descriptor) opens other
    memory meanwhile: the slow work of an open is done per memory, not under one lock."""
    slow = exportable(np.full(4, 6, np.uint8)).share()
    quick = cumemalloc_view(np.full(4, 9, np.uint8)).share()
    with spawn.Pool(1) as pool:
        found = pool.apply(ipc_children.open_beside_a_slow_exporter, (slow, quick))
    assert found == {"while the slow one waited": True, "slow": 6, "quick": 9}


def test_a_strided_view_crosses_as_the_same_memory_with_its_strides(spawn):
    host = np.arange(48, dtype=np.float32).reshape(6, 8)
    whole = exportable(host)
    part = whole[1::2, ::-3]
    handle = part.share()
    assert handle.offset == part.ptr - whole.ptr          # no copy: an offset into it
    with spawn.Pool(1) as pool:
        values, _, _ = pool.apply(ipc_children.read, (handle,))
    assert values == host[1::2, ::-3].tolist()


def test_a_pool_block_is_copied_once_on_the_gpu_into_memory_cuda_exports(spawn):
    """arrayport's own copies live in its memory pool, whose blocks neither CUDA IPC nor a
    descriptor can export: share() copies the View (compacted where strided) device to
    device, once, into the sharing pool."""
    host = np.arange(20, dtype=np.float64).reshape(4, 5)
    part = on_device(host)[::2, 1:]
    handle = part.share()
    assert handle.offset == 0 and handle.strides == (32, 8)   # a compact copy
    assert handle.kind == "cuda-pool"
    with spawn.Pool(1) as pool:
        values, _, _ = pool.apply(ipc_children.read, (handle,))
    assert values == host[::2, 1:].tolist()


def test_a_view_on_the_second_device_crosses_on_that_device(spawn):
    """Sharing picks the View's device: its sharing pool, its interprocess event, and the
    receiver's device found by UUID."""
    if cuda_driver.driver.device_count() < 2:
        pytest.skip("one CUDA device: the second device's path needs two")
    view = ap.view(np.arange(6, dtype=np.int32)).copy(device="cuda:1")
    handle = view.share()
    assert handle.kind == "cuda-pool"
    with spawn.Pool(1) as pool:
        values, readonly, device = pool.apply(ipc_children.read, (handle,))
    assert (values, readonly, device) == (list(range(6)), False, "cuda:1")


def test_a_read_only_view_cannot_be_shared_writable():
    handle = on_device(np.arange(3.0)).share(readonly=True)
    readonly = ap.View.from_shared(handle)
    with pytest.raises(ValueError, match="read-only; its handles are read-only too"):
        readonly.share(readonly=False)
    handle.revoke()
    assert ended()


def test_read_only_is_carried(spawn):
    handle = on_device(np.ones(4)).share(readonly=True)
    with spawn.Pool(1) as pool:
        values, readonly, _ = pool.apply(ipc_children.read, (handle,))
    assert (values, readonly) == ([1.0] * 4, True)


@needs_simulator
def test_a_receiver_reads_work_still_pending_on_the_exporter_without_a_host_wait(spawn):
    """The exporter's streams are paused: the upload and the copy into exportable memory
    are still queued when the receiver reads. The receiver's read waits for the exporter's
    interprocess event on the GPU; the exporter never synchronizes."""
    before = simulator.counters()["host_synchronizations"]
    simulator.set_paused(True)
    try:
        handle = on_device(np.full(16, 7, np.uint8)).share()
        assert simulator.counters()["host_synchronizations"] == before
        with spawn.Pool(1) as pool:
            result = pool.apply_async(ipc_children.read, (handle,))
            time.sleep(1.0)
            assert not result.ready()           # the receiver waits for the exporter's work
            simulator.set_paused(False)
            values, _, _ = result.get(60)
    finally:
        simulator.set_paused(False)
    assert values == [7] * 16


def test_the_exporter_lets_the_memory_go_once_the_receiver_has(spawn):
    assert ended()
    with spawn.Manager() as manager:
        release = manager.Event()
        handle = on_device(np.arange(8.0)).share()
        with spawn.Pool(1) as pool:
            result = pool.apply_async(ipc_children.read, (handle, release))
            time.sleep(0.5)
            ipc.reap()
            assert ipc.live_exports() == 1           # held while the receiver holds it
            release.set()
            assert result.get(60)[0] == list(np.arange(8.0))
            assert ended()                          # the receiver's View went: let go


def test_a_receiver_that_dies_holding_the_view_does_not_pin_the_memory(spawn):
    assert ended()
    with spawn.Manager() as manager:
        opened = manager.Event()
        handle = on_device(np.arange(8.0)).share()
        child = spawn.Process(target=ipc_children.die_holding, args=(handle, opened))
        child.start()
        assert opened.wait(60)
        child.join(60)
        assert child.exitcode == 0
    assert ended()


def test_a_handle_nobody_opens_ends_after_a_while(monkeypatch):
    handle = on_device(np.arange(4.0)).share()
    monkeypatch.setattr(ipc, "UNOPENED_SECONDS", 0.2)
    ipc.reap()
    assert ipc.live_exports() == 1                 # young: kept for its receiver
    assert ended()                                 # then no longer
    with pytest.raises(BufferError, match="ended that export"):
        ap.View.from_shared(handle)


def test_a_process_that_exits_holding_unopened_shares_gives_their_memory_back_quietly(
        children_find_the_driver):
    """Exports no process holds end at exit while the driver is still open (their memory
    given back: the simulator reports nothing left), and nothing is said on the way out."""
    import subprocess
    import sys
    child = subprocess.run([sys.executable, "-c", (
        "import arrayport as ap\n"
        "handles = [ap.empty_shared(1024, 'uint8', device='cuda:0').share() for _ in range(3)]"
    )], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert "Exception ignored" not in child.stderr, child.stderr
    assert "never released" not in child.stderr, child.stderr


def test_a_handle_opened_by_its_own_process_is_the_exported_memory():
    source = on_device(np.arange(4.0))
    handle = source.share(readonly=True)
    again = ap.View.from_shared(handle)
    assert again.ptr == ipc._exports[handle.token].view.ptr and again.readonly
    assert np.asarray(again.copy(device="cpu")).tolist() == [0.0, 1.0, 2.0, 3.0]
    handle.revoke()
    with pytest.raises(BufferError, match="ended that export"):
        ap.View.from_shared(handle)


def test_a_handle_of_another_machine_is_refused_with_the_host_route():
    handle = on_device(np.arange(4.0)).share()
    handle.machine = "another-machine"
    with pytest.raises(BufferError, match=r"another machine.*copy\(device='cpu'\)"):
        ap.View.from_shared(handle)
    handle.revoke()


@pytest.mark.parametrize("field, value, error", [
    ("memory", b"short", ValueError), ("offset", -1, ValueError),
    ("readonly", "yes", ValueError), ("lease", None, ValueError), ("pool", 0, ValueError),
    ("pool", "1", ValueError), ("socket", "", ValueError), ("socket", "../x y", ValueError)])
def test_a_malformed_handle_is_refused(field, value, error):
    handle = on_device(np.arange(4.0)).share()
    good = getattr(handle, field)
    setattr(handle, field, value)
    with pytest.raises(error, match=f"from_shared: .*{field}"):
        ap.View.from_shared(handle)
    setattr(handle, field, good)
    handle.revoke()


def test_many_handoffs_leave_the_exporters_device_memory_at_its_baseline(spawn):
    """A 64 MiB View handed to another process and dropped there, again and again: the
    exporter's device memory comes back to where it was (the sharing pool, which CUDA never
    shrinks, goes at release_device_memory once none of its blocks is alive);
    ARRAYPORT_IPC_HANDOFFS sets how many (200; CI runs the soak, 10,000: .ci/run)."""
    count = int(os.environ.get("ARRAYPORT_IPC_HANDOFFS", "200"))
    assert ended()
    ap.release_device_memory()
    free_before = device_free()
    parent, child_end = spawn.Pipe()
    child = spawn.Process(target=ipc_children.handoffs, args=(child_end,))
    child.start()
    try:
        for n in range(count):
            view = ap.empty_shared(64 << 20, "uint8", device="cuda:0")
            parent.send(view.share())
            del view
            assert parent.poll(60) and type(parent.recv()) is int   # read there
        parent.send(None)
    finally:
        child.join(60)
    assert ended(30)
    ap.release_device_memory()
    assert abs(device_free() - free_before) <= 2 << 20


def device_free() -> int:
    """Device 0's free memory once its frees queued so far have run."""
    import ctypes
    cuda_driver.driver.synchronize_device(0)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    library = cuda_driver.driver.library.get()
    with cuda_driver.driver.on_device(0):
        library.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    return free.value


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_sends_a_device_view_by_its_handle(children_find_the_driver, method):
    """Pool arguments go through multiprocessing's pickler: a device View arrives as a View
    of the same device memory, whatever ``device_pickling`` says (as torch.multiprocessing
    sends CUDA tensors)."""
    source = on_device(np.arange(6, dtype=np.int16))
    with multiprocessing.get_context(method).Pool(1) as pool:
        values, readonly, device = pool.apply(ipc_children.read_view, (source,))
    assert (values, readonly, device) == (list(range(6)), False, "cuda:0")
    assert ended()


def test_pickle_sends_a_handle_only_when_asked(spawn):
    import pickle
    source = exportable(np.arange(3.0))
    with pytest.raises(BufferError, match="device_pickling\\('share'\\)"):
        pickle.dumps(source, protocol=5)
    with ap.device_pickling("share"):
        data = pickle.dumps(source, protocol=5)
    assert len(data) < 1024                          # a handle, not the bytes
    here = pickle.loads(data)                        # in this process: the memory itself
    assert here.ptr == source.ptr
    del here
    with spawn.Pool(1) as pool:
        first, _, _ = pool.apply(ipc_children.unpickle_and_read, (data,))
    ipc.reap()
    assert ipc.live_exports() == 1            # a pickle may be loaded again: it lingers
    with spawn.Pool(1) as pool:
        again, _, _ = pool.apply(ipc_children.unpickle_and_read, (data,))
    assert first == again == [0.0, 1.0, 2.0]
    assert ended(linger=0)


def test_a_dask_worker_receives_a_device_view_by_its_handle(children_find_the_driver):
    distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed")
    source = on_device(np.arange(5, dtype=np.float32))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        scattered = client.scatter(source)             # Dask's serializer family
        values, readonly, device = client.submit(ipc_children.read_view,
                                                 scattered).result(120)
        with ap.device_pickling("share"):              # a task's argument: pickled
            in_task = client.submit(ipc_children.read_view, source).result(120)
    assert (values, readonly, device) == ([0.0, 1.0, 2.0, 3.0, 4.0], False, "cuda:0")
    assert in_task == (values, readonly, device)
    # Dask's exports linger (a worker may open them again) and it pickles a task more than
    # once (the copies nobody unpickles end unopened): with the cluster gone, they end
    assert ended(linger=0, unopened_after=0)


@pytest.mark.slow
def test_a_ray_task_receives_a_device_view_by_its_handle(children_find_the_driver, monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is not installed (not in the extras: "
                                            "a local run, pip install ray)")
    import arrayport.engines
    arrayport.engines.register_with_engines()        # Ray imported after arrayport
    source = on_device(np.arange(4, dtype=np.int64))
    helpers = os.path.dirname(ipc_children.__file__)   # the workers import the task from it
    monkeypatch.setenv("PYTHONPATH", helpers + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(ipc_children.read_view)
        values, readonly, device = ray.get(task.remote(source), timeout=120)
    finally:
        ray.shutdown()
    assert (values, readonly, device) == ([0, 1, 2, 3], False, "cuda:0")
    assert ended(linger=0, unopened_after=0)    # Ray's exports linger for its store


def test_a_handle_reaching_outside_its_allocation_is_refused(spawn):
    source = on_device(np.arange(8.0))
    handle = source.share()
    handle.shape = (1 << 20,)                        # far past the allocation
    with pytest.raises(BufferError, match="reaches bytes"):
        ap.View.from_shared(handle)
    with spawn.Pool(1) as pool:
        with pytest.raises(BufferError, match="reaches bytes"):
            pool.apply(ipc_children.read, (handle,))
    handle.revoke()


def test_a_revoked_export_keeps_its_receivers_memory_but_opens_no_more(spawn):
    with spawn.Manager() as manager:
        release = manager.Event()
        handle = on_device(np.arange(6.0)).share()
        with spawn.Pool(2) as pool:
            holding = pool.apply_async(ipc_children.read, (handle, release))
            time.sleep(1.0)                              # opened, and held
            handle.revoke()
            assert ipc.live_exports() == 1               # its receiver still holds it
            with pytest.raises(BufferError, match="ended that export \\(revoked\\)"):
                pool.apply(ipc_children.read, (handle,))
            release.set()
            assert holding.get(60)[0] == list(np.arange(6.0))
    assert ended()


def test_a_stale_handle_naming_another_exports_lease_is_refused(spawn):
    first = on_device(np.arange(3.0)).share()
    second = on_device(np.arange(5.0)).share()
    stale = ipc.CudaSharedHandle.from_fields(first.fields())
    stale.lease = second.lease       # as if the first's descriptor number were reused
    with spawn.Pool(1) as pool:
        with pytest.raises(BufferError, match="belongs to another: a stale handle"):
            pool.apply(ipc_children.read, (stale,))
        values, _, _ = pool.apply(ipc_children.read, (second,))
    assert values == list(np.arange(5.0))   # the second's lease was not touched by the first
    first.revoke()


def read_once_unpaused(spawn, handle) -> list:
    """What a receiver reads of ``handle``, its read queued while the simulator's streams are
    paused (the exporter's work still pending), then the streams let go."""
    with spawn.Pool(1) as pool:
        result = pool.apply_async(ipc_children.read, (handle,))
        time.sleep(1.0)
        simulator.set_paused(False)
        return result.get(60)[0]


@needs_simulator
def test_a_receiver_waits_for_its_own_views_work_whatever_was_shared_after(spawn):
    """View A's upload waits behind other work on stream S1; B is shared after A from
    stream S2, whose work is short. The exporter's one interprocess event is recorded again
    for B: a receiver of A, waiting on its latest record, must still see A's upload."""
    from sim_arrays import Stream
    s1, s2 = Stream(0), Stream(0)
    simulator.set_paused(True)
    try:
        for _ in range(20):                              # S1 is busy for a while
            ap.view(np.zeros(4096, np.uint8)).copy(device="cuda:0", stream=int(s1))
        first = ap.view(np.full(64, 3, np.uint8)).copy(device="cuda:0", stream=int(s1))
        second = ap.view(np.full(64, 5, np.uint8)).copy(device="cuda:0", stream=int(s2))
        handle = first.share()
        second.share().revoke()
        values = read_once_unpaused(spawn, handle)
    finally:
        simulator.set_paused(False)
        for stream in (s1, s2):
            stream.synchronize()
            stream.close()
    assert values == [3] * 64


@needs_simulator
def test_memory_written_on_the_legacy_stream_is_shared_after_that_write(spawn):
    """A View with no stream known (its producer wrote on the legacy stream: CuPy's null
    stream, a producer that made stream 1 wait) is shared after the legacy stream's work:
    the sharing stream is a blocking one."""
    import ctypes
    from sim_arrays import Context, cuda as sim_cuda
    view = cumemalloc_view(np.zeros(64, np.uint8))
    cuda_driver.driver.synchronize_device(0)
    assert ap._core.pending_stream(view) is None
    library = sim_cuda()
    library.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                        ctypes.c_void_p]
    simulator.set_paused(True)
    simulator.set_delay_us(500_000)      # the write, once unpaused, runs well after a read
    try:
        with Context(0):
            assert library.cuMemsetD8Async(view.ptr, 9, 64, 1) == 0   # CU_STREAM_LEGACY
        handle = view.share()
        values = read_once_unpaused(spawn, handle)
    finally:
        simulator.set_paused(False)
        simulator.set_delay_us(2000)
    assert values == [9] * 64


def test_the_same_view_sent_again_to_an_engine_reuses_its_export(spawn):
    """Pickle, Dask and Ray may send one View many times: one export (one lease, one
    descriptor) serves them while it is open."""
    import pickle
    source = exportable(np.arange(4.0))
    with ap.device_pickling("share"):
        first, second = pickle.dumps(source, protocol=5), pickle.dumps(source, protocol=5)
    assert ipc.live_exports() == 1
    with spawn.Pool(1) as pool:
        for data in (first, second):
            values, _, _ = pool.apply(ipc_children.unpickle_and_read, (data,))
            assert values == [0.0, 1.0, 2.0, 3.0]
    assert ended(linger=0)
