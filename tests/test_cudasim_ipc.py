"""The CUDA driver simulator between processes (issue 55): CUDA IPC of cuMemAlloc memory and
of interprocess events, each rule the simulator keeps ("interprocess" in
tests/cudasim/cudasim.c) broken on purpose. This process exports; a child process loads its
own copy of the simulator and imports, as a second process on a GPU machine would."""

import ctypes
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import cudasim

PATH = cudasim.library()
pytestmark = pytest.mark.skipif(PATH is None, reason=cudasim.unavailable())

SUCCESS, INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 0, 1, 201, 400, 600
ILLEGAL_ADDRESS, PEER_UNSUPPORTED = 700, 217
NON_BLOCKING, LAZY_ENABLE_PEER_ACCESS = 1, 1
DISABLE_TIMING, INTERPROCESS = 2, 4
from cuda_ipc import (IpcHandle, child_prelude, declare, device_zero_current, handle,
                      run_importer, u64)

# The importer: a child process with the simulator loaded and device 0's primary context
# current, the handles (hex) in sys.argv; what it found, as JSON on its last line.
IMPORTER = child_prelude(PATH) + f"""
handles = [IpcHandle.from_buffer_copy(bytes.fromhex(text)) for text in sys.argv[1:]]
found = {{}}
def open_memory(h):
    pointer = u64()
    status = cuda.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), h, 1)
    return status, pointer.value
def read(pointer, n):
    out = np.zeros(n, np.uint8)
    status = cuda.cuMemcpyDtoH_v2(out.ctypes.data, pointer, n)
    return status, out.tolist()
"""


def importer(body: str, *handles, stdin=None) -> subprocess.Popen | dict:
    """Run ``body`` in the importer; its ``found`` dict, or the process when it is to be
    talked to (``stdin=subprocess.PIPE``)."""
    return run_importer(IMPORTER, body, [bytes(h).hex() for h in handles], stdin)


@pytest.fixture(scope="module")
def sim():
    simulator = cudasim.Simulator(PATH)
    declare(simulator.cuda)
    with device_zero_current(simulator.cuda):
        yield simulator


@pytest.fixture
def cuda(sim):
    return sim.cuda


def alloc(cuda, data: bytes) -> int:
    address = u64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(address), len(data)) == SUCCESS
    assert cuda.cuMemcpyHtoD_v2(address.value, data, len(data)) == SUCCESS
    return address.value


def read(cuda, address: int, n: int) -> list:
    out = np.zeros(n, np.uint8)
    assert cuda.cuMemcpyDtoH_v2(out.ctypes.data, address, n) == SUCCESS
    return out.tolist()


def export(cuda, address: int) -> IpcHandle:
    h = IpcHandle()
    assert cuda.cuIpcGetMemHandle(ctypes.byref(h), address) == SUCCESS
    return h


def test_memory_opened_in_another_process_is_the_same_memory(cuda):
    address = alloc(cuda, bytes(range(16)))
    found = importer("""
        status, pointer = open_memory(handles[0])
        found["open"] = status
        found["read"] = read(pointer, 16)
        cuda.cuMemcpyHtoD_v2(pointer, bytes([9] * 4), 4)      # a write the exporter sees
        found["close"] = cuda.cuIpcCloseMemHandle(pointer)
    """, export(cuda, address))
    assert found == {"open": SUCCESS, "read": [SUCCESS, list(range(16))], "close": SUCCESS}
    assert read(cuda, address, 16) == [9] * 4 + list(range(4, 16))
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_a_handle_opens_once_per_context_and_closes_at_the_last_reference(cuda):
    address = alloc(cuda, bytes(8))
    found = importer("""
        first, second = open_memory(handles[0]), open_memory(handles[0])
        found["same pointer"] = first[1] == second[1] and first[0] == second[0] == 0
        found["cuMemFree of it"] = cuda.cuMemFree_v2(first[1])
        found["closes"] = [cuda.cuIpcCloseMemHandle(first[1]) for _ in range(3)]
        found["read after the last close"] = read(first[1], 8)[0]
    """, export(cuda, address))
    assert found == {"same pointer": True, "cuMemFree of it": INVALID_VALUE,
                     "closes": [SUCCESS, SUCCESS, INVALID_VALUE],
                     "read after the last close": ILLEGAL_ADDRESS}
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_a_process_cannot_open_its_own_handle(cuda):
    address = alloc(cuda, bytes(8))
    pointer = u64()
    assert cuda.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), export(cuda, address),
                                      LAZY_ENABLE_PEER_ACCESS) == INVALID_CONTEXT
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_only_the_base_of_a_cumemalloc_allocation_is_exported(cuda):
    address = alloc(cuda, bytes(64))
    h = IpcHandle()
    assert cuda.cuIpcGetMemHandle(ctypes.byref(h), address + 8) == INVALID_VALUE
    pool_block, stream = u64(), handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle]
    cuda.cuMemFreeAsync.argtypes = [u64, handle]
    assert cuda.cuMemAllocAsync(ctypes.byref(pool_block), 64, stream) == SUCCESS
    assert cuda.cuIpcGetMemHandle(ctypes.byref(h), pool_block.value) == INVALID_VALUE
    assert cuda.cuMemFreeAsync(pool_block.value, stream) == SUCCESS
    assert cuda.cuStreamSynchronize(stream) == SUCCESS
    assert cuda.cuStreamDestroy_v2(stream) == SUCCESS
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_opening_needs_the_documented_flag(cuda):
    address = alloc(cuda, bytes(8))
    found = importer("""
        pointer = u64()
        found["flags 0"] = cuda.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), handles[0], 0)
    """, export(cuda, address))
    assert found == {"flags 0": INVALID_VALUE}
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_a_freed_or_forged_handle_opens_nothing(cuda):
    address = alloc(cuda, bytes(8))
    good = export(cuda, address)
    forged = IpcHandle.from_buffer_copy(bytes(good)[:16] + bytes(8) + bytes(good)[24:])
    assert bytes(forged) != bytes(good)                        # the same memory, another nonce
    found = importer("""
        found["forged"] = open_memory(handles[1])[0]
        print("opened", flush=True)
        sys.stdin.readline()                       # the exporter frees it meanwhile
        found["freed"] = open_memory(handles[0])[0]
    """, good, forged, stdin=subprocess.PIPE)
    assert found.stdout.readline().strip() == "opened"
    assert cuda.cuMemFree_v2(address) == SUCCESS
    out, _ = found.communicate("go\n", timeout=60)
    assert json.loads(out.strip().splitlines()[-1]) == {"forged": INVALID_HANDLE,
                                                        "freed": INVALID_HANDLE}


def test_memory_freed_by_its_exporter_faults_the_importers_work(cuda):
    address = alloc(cuda, bytes(8))
    child = importer("""
        status, pointer = open_memory(handles[0])
        found["open"] = status
        print("opened", flush=True)
        sys.stdin.readline()
        found["copy"] = read(pointer, 8)[0]          # undefined on a GPU: a fault here
        found["close"] = cuda.cuIpcCloseMemHandle(pointer)
    """, export(cuda, address), stdin=subprocess.PIPE)
    assert child.stdout.readline().strip() == "opened"
    assert cuda.cuMemFree_v2(address) == SUCCESS
    out, _ = child.communicate("go\n", timeout=60)
    assert json.loads(out.strip().splitlines()[-1]) == {
        "open": SUCCESS, "copy": ILLEGAL_ADDRESS, "close": ILLEGAL_ADDRESS}


def test_memory_whose_exporter_ended_faults_the_importers_work_even_before_it_is_reaped():
    """An exporter that died took its memory with it: the importer's work on it faults — also
    while the dead exporter is a zombie its parent has not waited for yet (its pid still
    answers a signal; it holds nothing)."""
    exporter = run_importer(child_prelude(PATH), """
        import os
        address = u64()
        cuda.cuMemAlloc_v2(ctypes.byref(address), 8)
        cuda.cuMemcpyHtoD_v2(address.value, bytes(range(8)), 8)
        exported = IpcHandle()
        cuda.cuIpcGetMemHandle(ctypes.byref(exported), address.value)
        print(bytes(exported).hex(), flush=True)
        sys.stdin.readline()
        os._exit(0)                               # dies holding it
    """, [], stdin=subprocess.PIPE)
    try:
        exported = IpcHandle.from_buffer_copy(bytes.fromhex(exporter.stdout.readline()))
        child = importer("""
            status, pointer = open_memory(handles[0])
            found["read"] = read(pointer, 8)
            print("opened", flush=True)
            sys.stdin.readline()
            found["read after its exporter ended"] = read(pointer, 8)[0]
        """, exported, stdin=subprocess.PIPE)
        assert child.stdout.readline().strip() == "opened"
        exporter.stdin.write("die\n")
        exporter.stdin.flush()
        deadline = time.monotonic() + 30
        while zombie_state(exporter.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)                      # ended; not waited for (os.kill still works)
        assert zombie_state(exporter.pid) == "Z"
        time.sleep(0.02)                          # the simulator looks again within 10 ms
        out, _ = child.communicate("go\n", timeout=60)
        assert json.loads(out.strip().splitlines()[-1]) == {
            "read": [SUCCESS, list(range(8))], "read after its exporter ended": ILLEGAL_ADDRESS}
    finally:
        exporter.kill()
        exporter.wait()


def zombie_state(pid: int) -> str:
    """Process ``pid``'s state letter (Z: a zombie)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_opened_memory_is_not_the_importers_device_memory():
    found = importer("""
        free_, total = ctypes.c_size_t(), ctypes.c_size_t()
        cuda.cuMemGetInfo_v2(ctypes.byref(free_), ctypes.byref(total))
        found["used"] = total.value - free_.value
    """)
    assert found == {"used": 0}


def test_an_interprocess_event_needs_timing_disabled(cuda):
    event = handle()
    assert cuda.cuEventCreate(ctypes.byref(event), INTERPROCESS) == INVALID_VALUE
    assert cuda.cuEventCreate(ctypes.byref(event), DISABLE_TIMING) == SUCCESS
    h = IpcHandle()
    assert cuda.cuIpcGetEventHandle(ctypes.byref(h), event) == INVALID_VALUE   # not one
    assert cuda.cuEventDestroy_v2(event) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), INTERPROCESS | DISABLE_TIMING) == SUCCESS
    assert cuda.cuIpcGetEventHandle(ctypes.byref(h), event) == SUCCESS
    opened = handle()
    assert cuda.cuIpcOpenEventHandle(ctypes.byref(opened), h) == INVALID_CONTEXT
    assert cuda.cuEventDestroy_v2(event) == SUCCESS


def pending_write(cuda, sim, wait: bool) -> list:
    """The exporter's stream writes 7s into memory the importer reads; the exporter's streams
    paused until the importer has queued its read, so the write is still pending then. The
    importer waits on the exporter's interprocess event, or not at all."""
    address = alloc(cuda, bytes(8))
    stream, event = handle(), handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), INTERPROCESS | DISABLE_TIMING) == SUCCESS
    memory, event_handle = export(cuda, address), IpcHandle()
    before = sim.counters()["host_synchronizations"]
    sim.set_paused(True)
    try:
        assert cuda.cuMemsetD8Async(address, 7, 8, stream) == SUCCESS
        assert cuda.cuEventRecord(event, stream) == SUCCESS
        assert cuda.cuIpcGetEventHandle(ctypes.byref(event_handle), event) == SUCCESS
        child = importer(f"""
            status, pointer = open_memory(handles[0])
            event, stream = handle(), handle()
            cuda.cuIpcOpenEventHandle(ctypes.byref(event), handles[1])
            cuda.cuStreamCreate(ctypes.byref(stream), 1)
            if {wait}:
                cuda.cuStreamWaitEvent(stream, event, 0)
            out = handle()       # pinned: a copy into pageable memory would return when done
            cuda.cuMemHostAlloc(ctypes.byref(out), 8, 0)
            cuda.cuMemcpyDtoHAsync_v2(out, pointer, 8, stream)
            if not {wait}:      # read while the exporter's streams are still paused
                cuda.cuStreamSynchronize(stream)
            found["query"] = cuda.cuEventQuery(event)
            print("queued", flush=True)
            sys.stdin.readline()  # what it prints next comes after the parent's readline:
            cuda.cuStreamSynchronize(stream)   # read by communicate, not left in its buffer
            found["read"] = list(ctypes.string_at(out, 8))
            cuda.cuMemFreeHost(out)
            found["query after"] = cuda.cuEventQuery(event)
            cuda.cuEventDestroy_v2(event)
            cuda.cuStreamDestroy_v2(stream)
            cuda.cuIpcCloseMemHandle(pointer)
        """, memory, event_handle, stdin=subprocess.PIPE)
        assert child.stdout.readline().strip() == "queued"
    finally:
        sim.set_paused(False)
    out, _ = child.communicate("", timeout=60)
    found = json.loads(out.strip().splitlines()[-1])
    assert sim.counters()["host_synchronizations"] == before   # the exporter never waited
    assert cuda.cuStreamSynchronize(stream) == SUCCESS
    assert found["query"] == NOT_READY                  # the exporter's record, still pending
    if wait:
        assert found["query after"] == SUCCESS
    for call, argument in ((cuda.cuEventDestroy_v2, event), (cuda.cuStreamDestroy_v2, stream),
                           (cuda.cuMemFree_v2, address)):
        assert call(argument) == SUCCESS
    return found["read"]


def test_an_importer_waiting_on_the_interprocess_event_reads_the_pending_write(cuda, sim):
    assert pending_write(cuda, sim, wait=True) == [7] * 8


def test_an_importer_that_does_not_wait_reads_stale_memory(cuda, sim):
    assert pending_write(cuda, sim, wait=False) == [0] * 8


def test_what_an_importer_never_closed_is_reported_at_its_exit(cuda, tmp_path):
    address = alloc(cuda, bytes(8))
    report = tmp_path / "report"
    code = IMPORTER.replace("import ctypes, json, sys",
                            f"import os; os.environ['CUDASIM_REPORT'] = {str(report)!r}\n"
                            "import ctypes, json, sys")
    child = subprocess.run([sys.executable, "-c", code + "open_memory(handles[0])\n",
                            bytes(export(cuda, address)).hex()], capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert "never released: 1 allocations" in report.read_text()
    assert cuda.cuMemFree_v2(address) == SUCCESS


def test_another_devices_memory_opens_with_peer_access_where_there_is_any(cuda):
    """Device 1's memory opened in device 0's context: mapped with peer access ("lazily"),
    unless the devices cannot reach each other (CUDASIM_PEER_ACCESS=0 in the importer)."""
    context, address = handle(), u64()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 1) == SUCCESS
    assert cuda.cuCtxPushCurrent_v2(context) == SUCCESS
    try:
        assert cuda.cuMemAlloc_v2(ctypes.byref(address), 8) == SUCCESS
        assert cuda.cuMemcpyHtoD_v2(address.value, bytes([5] * 8), 8) == SUCCESS
        memory = export(cuda, address.value)
    finally:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(handle()))
    body = """
        status, pointer = open_memory(handles[0])
        found["open"] = status
        if status == 0:
            found["read"] = read(pointer, 8)
            cuda.cuIpcCloseMemHandle(pointer)
    """
    assert importer(body, memory) == {"open": SUCCESS, "read": [SUCCESS, [5] * 8]}
    no_peers = IMPORTER.replace("import ctypes, json, sys",
                                "import os; os.environ['CUDASIM_PEER_ACCESS'] = '0'\n"
                                "import ctypes, json, sys")
    child = subprocess.run([sys.executable, "-c", no_peers + textwrap.dedent(body) +
                            "\nprint(json.dumps(found))", bytes(memory).hex()],
                           capture_output=True, text=True, timeout=60)
    assert json.loads(child.stdout.strip().splitlines()[-1]) == {"open": PEER_UNSUPPORTED}
    assert cuda.cuCtxPushCurrent_v2(context) == SUCCESS
    assert cuda.cuMemFree_v2(address.value) == SUCCESS
    cuda.cuCtxPopCurrent_v2(ctypes.byref(handle()))
    cuda.cuDevicePrimaryCtxRelease_v2(1)


def test_a_wait_is_for_the_last_record_made_before_it_not_an_earlier_one(cuda, sim):
    """CUDA's rule: cuStreamWaitEvent waits for the event's most recent record at the call.
    The exporter records its event after a slow write on one stream (record 1), then again
    on an idle stream (record 2); an importer waiting then is released by record 2 alone,
    and reads the memory before the write has run."""
    address = alloc(cuda, bytes(8))
    busy, idle, event = handle(), handle(), handle()
    for stream in (busy, idle):
        assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), INTERPROCESS | DISABLE_TIMING) == SUCCESS
    event_handle = IpcHandle()
    assert cuda.cuIpcGetEventHandle(ctypes.byref(event_handle), event) == SUCCESS
    sim.set_delay_us(4_000_000)                  # the write runs 4 s from now
    try:
        assert cuda.cuMemsetD8Async(address, 7, 8, busy) == SUCCESS
        assert cuda.cuEventRecord(event, busy) == SUCCESS    # record 1: after the write
        assert cuda.cuEventRecord(event, idle) == SUCCESS    # record 2: nothing before it
        found = importer("""
            event, stream = handle(), handle()
            cuda.cuIpcOpenEventHandle(ctypes.byref(event), handles[1])
            cuda.cuStreamCreate(ctypes.byref(stream), 1)
            status, pointer = open_memory(handles[0])
            cuda.cuStreamWaitEvent(stream, event, 0)
            out = handle()
            cuda.cuMemHostAlloc(ctypes.byref(out), 8, 0)
            cuda.cuMemcpyDtoHAsync_v2(out, pointer, 8, stream)
            cuda.cuStreamSynchronize(stream)
            found["read"] = list(ctypes.string_at(out, 8))
            cuda.cuMemFreeHost(out)
            cuda.cuEventDestroy_v2(event)
            cuda.cuStreamDestroy_v2(stream)
            cuda.cuIpcCloseMemHandle(pointer)
        """, export(cuda, address), event_handle)
        assert cuda.cuStreamSynchronize(busy) == SUCCESS
    finally:
        sim.set_delay_us(2000)
    assert found["read"] == [0] * 8            # released by record 2: the write had not run
    assert read(cuda, address, 8) == [7] * 8
    for call, argument in ((cuda.cuEventDestroy_v2, event), (cuda.cuStreamDestroy_v2, busy),
                           (cuda.cuStreamDestroy_v2, idle), (cuda.cuMemFree_v2, address)):
        assert call(argument) == SUCCESS


def test_a_wait_on_an_event_its_exporter_destroyed_ends(cuda, sim):
    """Undefined on a GPU; the simulator ends the wait rather than hang the importer."""
    stream, event = handle(), handle()
    assert cuda.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING) == SUCCESS
    assert cuda.cuEventCreate(ctypes.byref(event), INTERPROCESS | DISABLE_TIMING) == SUCCESS
    event_handle = IpcHandle()
    assert cuda.cuIpcGetEventHandle(ctypes.byref(event_handle), event) == SUCCESS
    sim.set_paused(True)
    try:
        assert cuda.cuEventRecord(event, stream) == SUCCESS   # never runs while paused
        child = importer("""
            event, stream = handle(), handle()
            cuda.cuIpcOpenEventHandle(ctypes.byref(event), handles[0])
            cuda.cuStreamCreate(ctypes.byref(stream), 1)
            cuda.cuStreamWaitEvent(stream, event, 0)
            print("waiting", flush=True)
            found["synchronize"] = cuda.cuStreamSynchronize(stream)
            cuda.cuEventDestroy_v2(event)
            cuda.cuStreamDestroy_v2(stream)
        """, event_handle, stdin=subprocess.PIPE)
        assert child.stdout.readline().strip() == "waiting"
        assert cuda.cuEventDestroy_v2(event) == SUCCESS
        out, _ = child.communicate("", timeout=60)
    finally:
        sim.set_paused(False)
    assert json.loads(out.strip().splitlines()[-1]) == {"synchronize": SUCCESS}
    assert cuda.cuStreamSynchronize(stream) == SUCCESS
    assert cuda.cuStreamDestroy_v2(stream) == SUCCESS
