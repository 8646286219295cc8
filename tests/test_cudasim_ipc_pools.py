"""The CUDA driver simulator's interprocess memory pools (issue 55): a pool made with POSIX
file-descriptor handles, its descriptor handed to another process, its blocks exported and
imported pointer by pointer, and the importer's access (none until granted, read-only where
granted so) — each rule of "interprocess pools" in tests/cudasim/cudasim.c broken on
purpose. This process exports; a child loads its own copy of the simulator and imports, the
pool's descriptor inherited (as one passed over a Unix socket arrives: a descriptor of the
child's own)."""

import ctypes
import json
import subprocess
import textwrap

import numpy as np
import pytest

import cudasim

PATH = cudasim.library()
pytestmark = pytest.mark.skipif(PATH is None, reason=cudasim.unavailable())

from cuda_ipc import (AccessDesc, Location, PointerExport, PoolProps, child_prelude, declare,
                      device_zero_current, handle, run_importer, u64)

SUCCESS, INVALID_VALUE, NOT_SUPPORTED, ILLEGAL_ADDRESS = 0, 1, 801, 700
POSIX_FD, FABRIC, NON_BLOCKING = 1, 8, 1
PROT_NONE, PROT_READ, PROT_READWRITE = 0, 1, 3
RESERVED_MEM_CURRENT, MEMPOOL_SUPPORTED_HANDLE_TYPES = 5, 119

# The importer: the simulator loaded, device 0's primary context current, the pool's
# descriptor (inherited) in sys.argv[1] and a block's export data (hex) in sys.argv[2];
# what it found, as JSON on its last line.
IMPORTER = child_prelude(PATH) + f"""
descriptor = int(sys.argv[1])
data = PointerExport.from_buffer_copy(bytes.fromhex(sys.argv[2]))
found = {{}}
def import_pool():
    pool = handle()
    status = cuda.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), descriptor, 1, 0)
    return status, pool
def grant(pool, flags, device=0):
    return cuda.cuMemPoolSetAccess(pool, ctypes.byref(AccessDesc(Location(1, device), flags)), 1)
def import_pointer(pool):
    pointer = u64()
    return cuda.cuMemPoolImportPointer(ctypes.byref(pointer), pool, ctypes.byref(data)), pointer.value
def read(pointer, n):
    out = np.zeros(n, np.uint8)
    status = cuda.cuMemcpyDtoH_v2(out.ctypes.data, pointer, n)
    return status, out.tolist()
"""


def importer(body: str, descriptor: int, data: PointerExport, stdin=None):
    """Run ``body`` in the importer, handing it ``descriptor``; its ``found`` dict, or the
    process when it is to be talked to (``stdin=subprocess.PIPE``)."""
    return run_importer(IMPORTER, body, [str(descriptor), bytes(data).hex()], stdin,
                        pass_fds=(descriptor,))


@pytest.fixture(scope="module")
def sim():
    simulator = cudasim.Simulator(PATH)
    declare(simulator.cuda)
    with device_zero_current(simulator.cuda):
        yield simulator


class Exporter:
    """An exportable pool of device 0, a stream, and blocks written from the host."""

    def __init__(self, cuda, handle_types=POSIX_FD):
        self.cuda = cuda
        self.pool, self.stream = handle(), handle()
        props = PoolProps(allocType=1, handleTypes=handle_types, location=Location(1, 0))
        self.created = cuda.cuMemPoolCreate(ctypes.byref(self.pool), ctypes.byref(props))
        assert cuda.cuStreamCreate(ctypes.byref(self.stream), NON_BLOCKING) == SUCCESS

    def block(self, data: bytes) -> int:
        address = u64()
        assert self.cuda.cuMemAllocFromPoolAsync(ctypes.byref(address), len(data), self.pool,
                                                 self.stream) == SUCCESS
        assert self.cuda.cuStreamSynchronize(self.stream) == SUCCESS
        assert self.cuda.cuMemcpyHtoD_v2(address.value, data, len(data)) == SUCCESS
        return address.value

    def descriptor(self) -> int:
        fd = ctypes.c_int(-1)
        assert self.cuda.cuMemPoolExportToShareableHandle(ctypes.byref(fd), self.pool,
                                                          POSIX_FD, 0) == SUCCESS
        return fd.value

    def export(self, address: int) -> PointerExport:
        data = PointerExport()
        assert self.cuda.cuMemPoolExportPointer(ctypes.byref(data), address) == SUCCESS
        return data

    def free(self, address: int) -> None:
        assert self.cuda.cuMemFreeAsync(address, self.stream) == SUCCESS
        assert self.cuda.cuStreamSynchronize(self.stream) == SUCCESS

    def close(self) -> None:
        assert self.cuda.cuMemPoolDestroy(self.pool) == SUCCESS
        assert self.cuda.cuStreamDestroy_v2(self.stream) == SUCCESS


@pytest.fixture
def exporter(sim):
    made = Exporter(sim.cuda)
    assert made.created == SUCCESS
    yield made
    made.close()


def read(cuda, address: int, n: int) -> list:
    out = np.zeros(n, np.uint8)
    assert cuda.cuMemcpyDtoH_v2(out.ctypes.data, address, n) == SUCCESS
    return out.tolist()


def test_the_device_says_which_handle_types_its_pools_export(sim):
    value = ctypes.c_int(0)
    assert sim.cuda.cuDeviceGetAttribute(ctypes.byref(value), MEMPOOL_SUPPORTED_HANDLE_TYPES,
                                         0) == SUCCESS
    assert value.value == POSIX_FD


def test_a_block_imported_in_another_process_is_the_same_memory(exporter):
    address = exporter.block(bytes(range(16)))
    fd = exporter.descriptor()
    found = importer("""
        status, pool = import_pool()
        found["import pool"] = status
        found["grant"] = grant(pool, 3)
        status, pointer = import_pointer(pool)
        found["import pointer"] = status
        found["read"] = read(pointer, 16)
        cuda.cuMemcpyHtoD_v2(pointer, bytes([9] * 4), 4)      # a write the exporter sees
        found["again"] = import_pointer(pool)[0]                # once per process
        found["same pool"] = import_pool()[1].value == pool.value  # imported once too
        found["async free"] = cuda.cuMemFreeAsync(pointer, None)  # either free, says CUDA
        found["free again"] = cuda.cuMemFree_v2(pointer)         # freed (or being freed)
        cuda.cuStreamSynchronize(None)
        found["read after its free"] = read(pointer, 4)[0]
    """, fd, exporter.export(address))
    assert found == {"import pool": SUCCESS, "grant": SUCCESS, "import pointer": SUCCESS,
                     "read": [SUCCESS, list(range(16))], "again": INVALID_VALUE,
                     "same pool": True,
                     "async free": SUCCESS, "free again": INVALID_VALUE,
                     "read after its free": ILLEGAL_ADDRESS}
    assert read(exporter.cuda, address, 16) == [9] * 4 + list(range(4, 16))
    exporter.free(address)


def test_an_imported_pool_grants_no_device_access_until_asked(exporter):
    address = exporter.block(bytes(8))
    found = importer("""
        status, pool = import_pool()
        status, pointer = import_pointer(pool)
        found["import pointer"] = status
        found["read"] = read(pointer, 8)[0]
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"import pointer": SUCCESS, "read": ILLEGAL_ADDRESS}
    exporter.free(address)


def test_a_read_only_grant_lets_the_importer_read_and_not_write(exporter):
    address = exporter.block(bytes(range(8)))
    found = importer("""
        status, pool = import_pool()
        found["grant"] = grant(pool, 1)
        status, pointer = import_pointer(pool)
        found["read"] = read(pointer, 8)
        found["write"] = cuda.cuMemcpyHtoD_v2(pointer, bytes([7] * 8), 8)
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"grant": SUCCESS, "read": [SUCCESS, list(range(8))],
                     "write": ILLEGAL_ADDRESS}
    assert read(exporter.cuda, address, 8) == list(range(8))   # nothing written
    exporter.free(address)


def test_an_exporter_pools_own_device_keeps_read_write(exporter):
    access = AccessDesc(Location(1, 0), PROT_READ)
    assert exporter.cuda.cuMemPoolSetAccess(exporter.pool, ctypes.byref(access), 1) == INVALID_VALUE


def test_an_imported_pool_makes_no_blocks_and_a_process_cannot_import_its_own(exporter):
    address = exporter.block(bytes(8))
    found = importer("""
        status, pool = import_pool()
        out, stream = u64(), handle()
        cuda.cuStreamCreate(ctypes.byref(stream), 1)
        found["allocate"] = cuda.cuMemAllocFromPoolAsync(ctypes.byref(out), 8, pool, stream)
        found["destroy"] = cuda.cuMemPoolDestroy(pool)
        cuda.cuStreamDestroy_v2(stream)
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"allocate": INVALID_VALUE, "destroy": SUCCESS}
    fd, own = exporter.descriptor(), handle()
    assert exporter.cuda.cuMemPoolImportFromShareableHandle(ctypes.byref(own), fd, POSIX_FD,
                                                            0) == INVALID_VALUE
    import os
    os.close(fd)
    exporter.free(address)


def test_only_an_exportable_pools_live_blocks_are_exported(sim, exporter):
    plain = Exporter(sim.cuda, handle_types=0)
    assert plain.created == SUCCESS
    address = plain.block(bytes(8))
    fd, data = ctypes.c_int(-1), PointerExport()
    assert sim.cuda.cuMemPoolExportToShareableHandle(ctypes.byref(fd), plain.pool, POSIX_FD,
                                                     0) == INVALID_VALUE
    assert sim.cuda.cuMemPoolExportPointer(ctypes.byref(data), address) == INVALID_VALUE
    plain.free(address)
    plain.close()
    fabric = Exporter(sim.cuda, handle_types=FABRIC)
    assert fabric.created == NOT_SUPPORTED
    assert sim.cuda.cuStreamDestroy_v2(fabric.stream) == SUCCESS
    freed = exporter.block(bytes(8))
    exporter.free(freed)
    assert sim.cuda.cuMemPoolExportPointer(ctypes.byref(data), freed) == INVALID_VALUE


def test_a_freed_reused_or_forged_block_imports_nothing(exporter):
    address = exporter.block(bytes(8))
    stale = exporter.export(address)
    exporter.free(address)
    again = exporter.block(bytes(8))            # the same block, reused: a new generation
    forged = PointerExport.from_buffer_copy(bytes(exporter.export(again))[:8] + bytes(56))
    fd = exporter.descriptor()
    assert importer("""
        status, pool = import_pool()
        found["stale"] = import_pointer(pool)[0]
    """, fd, stale) == {"stale": INVALID_VALUE}
    assert importer("""
        status, pool = import_pool()
        found["forged"] = import_pointer(pool)[0]
    """, fd, forged) == {"forged": INVALID_VALUE}
    exporter.free(again)


def exporter_frees_meanwhile(sim, exporter, body: str) -> tuple[dict, int]:
    """Run ``body`` in an importer of a new block of ``exporter`` (the block imported and its
    device granted access first); ``body`` prints "ready" and reads a line, and the
    exporter frees the block meanwhile: (what the importer found, the frees before
    importers the exporter counted)."""
    before = sim.counters()["pool_frees_before_importers"]
    address = exporter.block(bytes(8))
    child = importer(textwrap.dedent("""
        status, pool = import_pool()
        grant(pool, 3)
        status, pointer = import_pointer(pool)
    """) + textwrap.dedent(body), exporter.descriptor(), exporter.export(address),
        stdin=subprocess.PIPE)
    assert child.stdout.readline().strip() == "ready"
    exporter.free(address)
    out, _ = child.communicate("go\n", timeout=60)
    return (json.loads(out.strip().splitlines()[-1]),
            sim.counters()["pool_frees_before_importers"] - before)


def test_a_block_its_exporter_frees_first_faults_the_importers_work(sim, exporter):
    """CUDA: "the imported memory must be freed from all importing processes before being
    freed in the exporting process". Freed first by its exporter, the block is counted as
    such there, and the importer's work on it faults."""
    found, early = exporter_frees_meanwhile(sim, exporter, """
        found["import"] = status
        print("ready", flush=True)
        sys.stdin.readline()                  # the exporter frees the block meanwhile
        found["read"] = read(pointer, 8)[0]
    """)
    assert found == {"import": SUCCESS, "read": ILLEGAL_ADDRESS}
    assert early == 1


def test_a_block_every_importer_freed_first_is_freed_by_its_exporter_in_order(sim, exporter):
    before = sim.counters()["pool_frees_before_importers"]
    address = exporter.block(bytes(8))
    found = importer("""
        status, pool = import_pool()
        grant(pool, 3)
        status, pointer = import_pointer(pool)
        found["free"] = cuda.cuMemFree_v2(pointer)
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"free": SUCCESS}
    exporter.free(address)
    assert sim.counters()["pool_frees_before_importers"] == before


def test_an_importers_async_free_its_stream_has_not_reached_is_still_an_import(sim, exporter):
    """CUDA: "if cuMemFreeAsync is used, the free must be completed on the importing process
    before the free operation on the exporting process" — an exporter freeing the block
    while the importer's free waits in its stream frees it before that importer."""
    found, early = exporter_frees_meanwhile(sim, exporter, """
        cuda.cudasim_set_paused(1)                # the free waits in the stream
        found["async free"] = cuda.cuMemFreeAsync(pointer, None)
        print("ready", flush=True)
        sys.stdin.readline()                      # the exporter frees the block meanwhile
        cuda.cudasim_set_paused(0)
        found["done"] = cuda.cuStreamSynchronize(None)
    """)
    assert found == {"async free": SUCCESS, "done": SUCCESS}
    assert early == 1


def test_an_import_freed_asynchronously_leaves_nothing_behind(exporter, monkeypatch):
    """Once its free has run, an import is gone from every list of the importer's driver:
    enough frees after it that its record is given back to the system (the graveyard's
    oldest go past 8,192), then an allocation that walks the idle blocks — freed bytes
    poisoned (MALLOC_PERTURB_), so that a list still naming it reads garbage and crashes."""
    monkeypatch.setenv("MALLOC_PERTURB_", "85")
    address = exporter.block(bytes(8))
    found = importer("""
        status, pool = import_pool()
        grant(pool, 3)
        status, pointer = import_pointer(pool)
        found["async free"] = cuda.cuMemFreeAsync(pointer, None)
        found["its free ran"] = cuda.cuStreamSynchronize(None)
        made, address = [], u64()
        for _ in range(8400):
            cuda.cuMemAlloc_v2(ctypes.byref(address), 256)
            made.append(address.value)
        for pointer in made:
            cuda.cuMemFree_v2(pointer)
        found["allocation"] = cuda.cuMemAllocAsync(ctypes.byref(address), 64, None)
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"async free": SUCCESS, "its free ran": SUCCESS, "allocation": SUCCESS}
    exporter.free(address)


@pytest.mark.parametrize("free", ["cuMemFree_v2(pointer)", "cuMemFreeAsync(pointer, None)"])
def test_an_imported_pool_destroyed_with_blocks_imported_goes_when_they_are_freed(
        sim, exporter, free):
    """cuMemPoolDestroy with allocations outstanding returns at once, the pool "released
    automatically once there are no more outstanding allocations": its handle is gone, the
    blocks imported from it still read and free as before, and freeing them takes them out
    of the exporter's record (the exporter's later free is in order)."""
    before = sim.counters()["pool_frees_before_importers"]
    address = exporter.block(bytes(range(8)))
    found = importer(f"""
        status, pool = import_pool()
        grant(pool, 3)
        status, pointer = import_pointer(pool)
        found["destroy"] = cuda.cuMemPoolDestroy(pool)
        found["again"] = import_pointer(pool)[0]            # its handle is gone
        found["read"] = read(pointer, 8)
        found["free"] = cuda.{free}
        found["freed"] = cuda.cuStreamSynchronize(None)
    """, exporter.descriptor(), exporter.export(address))
    assert found == {"destroy": SUCCESS, "again": INVALID_VALUE,
                     "read": [SUCCESS, list(range(8))], "free": SUCCESS, "freed": SUCCESS}
    exporter.free(address)
    assert sim.counters()["pool_frees_before_importers"] == before


def test_an_exportable_pool_gives_no_memory_back(exporter):
    address = exporter.block(bytes(1 << 20))
    exporter.free(address)
    reserved = ctypes.c_uint64(0)
    assert exporter.cuda.cuMemPoolTrimTo(exporter.pool, 0) == SUCCESS
    assert exporter.cuda.cuMemPoolGetAttribute(exporter.pool, RESERVED_MEM_CURRENT,
                                               ctypes.byref(reserved)) == SUCCESS
    assert reserved.value == 2 << 20            # its chunk stays
