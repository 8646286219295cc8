"""arrayport's memory and the devices that may read it (`pytest -m gpu`): arrayport's pool on
a device grants access to every peer device that can read it (``cuDeviceCanAccessPeer``,
``cuMemPoolSetAccess``), and those peers are its readers — a held block goes back to the
pool only once each of them has finished its work (gpu/held_memory.py, ``return_held``).
On the simulator a peer's kernel touching a pool block it was not granted faults, and so does
work that runs after the block's free (freed memory is poisoned), so a return that waits
for the pool's own device alone is seen. The main suite runs this file in a process of its
own (tests/test_gpu_suite.py)."""

import ctypes
import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver
from arrayport.gpu.kernels import strided_copy

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks,  # noqa: E402,F401
                          simulator, slow_streams)
from sim_arrays import Context, DeviceArray, Stream  # noqa: E402

PROT_NONE, PROT_READWRITE, LOCATION_DEVICE = 0, 3, 1


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def peer_can_read(library, peer, owner):
    """What the driver says: can device ``peer`` read device ``owner``'s memory."""
    library.cuDeviceCanAccessPeer.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                              ctypes.c_int]
    answer = ctypes.c_int(-1)
    assert library.cuDeviceCanAccessPeer(ctypes.byref(answer), peer, owner) == 0
    return answer.value == 1


def pool_access(library, pool_handle, device):
    """The access device ``device`` has to the pool's blocks (``cuMemPoolGetAccess``)."""
    library.cuMemPoolGetAccess.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                           ctypes.POINTER(_MemLocation)]
    flags = ctypes.c_int(-1)
    assert library.cuMemPoolGetAccess(ctypes.byref(flags), ctypes.c_void_p(pool_handle),
                                      ctypes.byref(_MemLocation(LOCATION_DEVICE, device))) == 0
    return flags.value


@needs_two_devices
def test_arrayports_pool_grants_each_peer_that_can_read_its_device():
    # Where the driver says a peer can read the device's memory, the pool grants it access
    # (its blocks read by a peer's kernels as cuMemAlloc memory would be once peer access is
    # on) and counts it among its readers; where it says no, neither.
    driver = cuda_driver.driver
    library = driver.library.get()
    pool = driver.memory.result_pool(0)
    assert pool is not None and pool.readers[0] == 0
    for peer in range(1, driver.device_count()):
        can = peer_can_read(library, peer, 0)
        assert pool_access(library, pool.handle, peer) == (PROT_READWRITE if can else PROT_NONE)
        assert (peer in pool.readers) == can
    assert pool_access(library, pool.handle, 0) == PROT_READWRITE


@needs_simulator
@needs_two_devices
def test_a_pool_made_where_no_peer_can_read_grants_none(nothing_leaks):
    # A machine without a peer-to-peer path (the simulator told so): a new pool grants no
    # peer, and its only reader is its own device — its returns wait for that device alone.
    simulator.set_peer_access(False)
    driver = cuda_driver.CudaDriver(cuda_driver._LIBRARY, cuda_driver._SYMBOLS)
    try:
        library = driver.library.get()
        assert not peer_can_read(library, 1, 0)
        pool = driver.memory.result_pool(0)
        assert pool.readers == (0,)
        assert pool_access(library, pool.handle, 1) == PROT_NONE
    finally:
        driver.close()
        simulator.set_peer_access(True)


@needs_simulator
@needs_two_devices
@pytest.mark.parametrize("reader_kind", ["copy", "kernel"])
def test_held_blocks_go_back_only_after_a_peer_devices_pending_reads(slow_streams, nothing_leaks,
                                                                      reader_kind):
    # A copy result in arrayport's pool on device 0 is read by slow work on a stream of
    # device 1 (a copy from it into device-1 memory, or arrayport's own kernel on device 1,
    # which may read the block because the pool granted device 1 access). Its last View
    # goes, and the held blocks are returned: device 1's pending read must complete before
    # the free. Synchronizing only the pool's own device, the free (stream-ordered on device
    # 0's legacy stream, 30 ms) runs before the read (behind 120 ms of device-1 work), and the
    # simulator's poisoned freed memory makes the read fault (sticky for device 1).
    driver = cuda_driver.driver
    ap.release_device_memory()                      # nothing held by earlier tests
    pool = driver.memory.result_pool(0)
    assert 1 in pool.readers                        # the simulator's devices are peers
    values = np.arange(256, dtype=np.float64)
    source = DeviceArray(values, device=0)
    reader = Stream(1)
    out = DeviceArray(np.zeros(256), device=1, stream=reader, busy=3)   # device 1 busy
    try:
        result = ap.view(source).copy()             # device 0, a block of arrayport's pool
        assert result.device == (2, 0)
        driver.synchronize(0, 1)                    # the copy itself has run
        library = driver.library.get()
        if reader_kind == "copy":
            with Context(1):
                assert library.cuMemcpyAsync(ctypes.c_uint64(out.ptr),
                                             ctypes.c_uint64(result.ptr),
                                             ctypes.c_size_t(values.nbytes),
                                             ctypes.c_void_p(int(reader))) == 0
        else:
            params = strided_copy.plan((256,), (8,), 8, result.ptr, out.ptr)
            assert driver.launch_kernel(1, "strided_copy", "arrayport_strided_copy",
                                        (1, 1, 1), (256, 1, 1), params, int(reader))
        before = simulator.counters()
        del result
        gc.collect()
        assert driver.memory.held_blocks() == 1            # held: its free waits for a return
        ap.release_device_memory()                  # the return: the readers, then the free
        reader.synchronize()                        # the read ran on live memory: no fault
        counts = {name: simulator.counters()[name] - before[name] for name in before}
        assert counts["freed_memory_accesses"] == counts["copy_faults"] == 0
        assert counts["kernel_faults"] == counts["peer_access_faults"] == 0
        assert out.read().tolist() == values.tolist()
    finally:
        out.free()
        reader.close()
        source.free()
