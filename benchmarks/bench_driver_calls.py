"""What a GPU exchange costs where no GPU can be timed: CUDA driver calls, host
synchronizations and events created per exchange, counted by the CUDA driver simulator
(tests/cudasim/, issue 32), for arrayport and, beside it, NVIDIA's cuda-core doing the same
exchange and tvm-ffi where it can (when installed), with arrayport's ratio to each.

    python benchmarks/bench_driver_calls.py [--repeat N]

Exchanges, each with device 0's primary context current (as cuda-core's
``Device.set_current()`` leaves it, and as a CUDA user's thread has it):
- a CUDA Array Interface import with a consumer stream (the consumer waits on the
  producer's stream): ``ap.view(x, stream=C)`` / ``StridedMemoryView.from_cuda_array_interface``;
- a DLPack export, to a consumer stream, of memory with work pending on another stream:
  ``View.__dlpack__(stream=C)`` / ``Buffer.__dlpack__(stream=C)`` (a cuda-core Buffer does
  not track pending work, so it orders nothing: its count is what ordering nothing costs);
- a device-to-device copy on a stream, of memory with work pending on another stream:
  ``View.copy(stream=C)`` / ``Buffer.copy_to(stream=C)``, which orders nothing, and the
  same copy ordered as arrayport orders it, as a cuda-core user writes it (the copy waits
  for the pending work, the source's stream waits for the copy: two reused events);
- a CUDA Array Interface import without a stream: ``ap.view(x)`` /
  ``StridedMemoryView.from_cuda_array_interface(x, stream_ptr=-1)``;
- an import through a DLPack 1.3 exchange table (what PyTorch's CUDA tensors offer: here
  the test producer tests/helpers/exchange_producer.py, whose current work stream has the
  tensor's write pending), without and with a consumer stream: ``ap.view(t)`` /
  ``tvm_ffi.from_dlpack(t)``, and ``ap.view(t, stream=C)`` (cuda-core reads no exchange
  table, and the test producer has no ``__dlpack__`` for it; tvm-ffi takes no consumer
  stream: arrayport only — the CAI row with a consumer stream is the same wait); then the
  same two through a table written in C (tests/helpers/exchange_table.c), as PyTorch's is
  in C++: the test producer's ctypes callbacks charge both sides its own Python, and
  arrayport more (it asks the table's current work stream, to order pending work; tvm-ffi
  does not) — the C table's rows are arrayport's own cost beside tvm-ffi's;
- a copy of 4 KiB of pageable host memory to device 0: ``View.copy(device="cuda:0",
  stream=C)`` / the ctypes floor (a pool allocation, the transfer);
- a copy of device memory into new host memory, readable on return:
  ``View.copy(device="cpu", stream=C)`` / the ctypes floor (a NumPy array, the transfer, the
  host's wait for the stream);
- a strided device-to-device copy (a transposed 32 x 32 float32): one launch of
  arrayport's strided-copy kernel / the "ctypes floor": the least a Python library over
  ctypes does for it — a pool allocation and the launch, the kernel's function and its
  parameters prepared beforehand (cuda-core has no strided copy). Neither side's free is
  timed: results are kept until a batch is timed, then let go.
Then the same for ROCm, on the HIP runtime simulator (tests/hipsim/, issue 54), where its
bindings are installed: arrayport's stream order on the compiled HIP floor beside the same
calls made by arrayport's Python driver (the floor off) and by AMD's hip-python (a reused
event recorded on the producer's stream and waited on by the consumer's: the least a
Python library does for it) — a DLPack export to a consumer's stream and CUDA Array
Interface imports of HIP memory; a device copy (issued from C on the HIP floor; without
it, the Python driver's transfers) beside hip-python's allocation and transfer; a device to
host copy beside hip-python's transfer into a NumPy array and the host's wait; a strided
device copy (a transposed 32 x 32 float32: its 32 2-D transfers, from C or from Python). That
simulator has no paused streams: its stream threads run while a batch is timed (the
calling thread's CPU time is what is measured).
Counts are per exchange, averaged over N (they do not vary: the figures are exact). The
first exchange of each kind is left out (it retains the primary context, creates the event
it reuses). "host µs" is the median, over N rounds, of the CPU time the calling thread
spends per exchange in a batch of ``BATCH`` (results kept); in each round every library of
the row runs one batch, in turn, so a ratio is taken under the same conditions. Batches
are short because the simulator is not a GPU driver in one respect that matters here: its
look-ups (an address's allocation, a stream's queue) walk lists, so a call's cost grows
with the allocations and queued work a long batch keeps alive. The two look-ups a copy
repeats most no longer walk what is in use: an address found moves to the front of the
list (the next question about it is immediate), and a pool allocation searches only the
blocks not in use. Before, the 4,096 dead results arrayport holds between returns (its
memory policy) made each question about a copy's source walk them all: the strided row
grew from 22 to 160 µs per copy over eight rounds, and any call arrayport makes beyond its
peer's cost it that walk, which no GPU driver charges (its look-up is a tree). The
simulator's streams are paused while a batch is timed (the work queues and runs after
it): the time is Python's, ctypes' and the simulator's bookkeeping, not the waking of its
stream threads nor the waits on their locks, which a GPU driver has not; a copy's bytes
move on the simulator's stream threads, not in it. "py calls" counts the function
calls the interpreter makes per exchange (``sys.setprofile``): the Python side's work,
exact and the same on every machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "helpers")]

import cudasim  # noqa: E402
import hipsim  # noqa: E402

if cudasim.install() is None:
    sys.exit(f"bench_driver_calls: the simulator cannot be built: {cudasim.unavailable()}")
HIP_SIMULATED = hipsim.install() is not None

import numpy as np  # noqa: E402

import arrayport as ap  # noqa: E402
from arrayport import _core  # noqa: E402
from _timing import python_calls  # noqa: E402
import compiled_exchange_producer  # noqa: E402
from exchange_producer import ExchangeTensor  # noqa: E402
from sim_arrays import Context, DeviceArray, Stream  # noqa: E402

SIM = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
BATCH = 10               # exchanges per timed batch (see the module: why short)
HOST_WAITS = {"device → host copy"}   # rows timed with the streams running: they wait
ROUNDS_PER_REPEAT = 5    # timed rounds per --repeat (short batches: more of them)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def counted(exchange, repeat):
    """Driver calls by name per exchange (the first, warming, run left out). Results are
    kept until the count is taken: freeing one is not part of the exchange (and freeing
    memory with work pending synchronizes with the host, on the driver as here)."""
    kept = [exchange()]
    before = SIM.counters()
    for _ in range(repeat):
        kept.append(exchange())
    after = SIM.counters()
    kept.clear()
    return {name: (after[name] - before[name]) / repeat for name in after
            if after[name] != before[name]}


def host_microseconds(runs, repeat, batch=None, paused=True):
    """{library: the median over ``repeat`` rounds of the CPU time the calling thread
    spends per exchange, in microseconds}; in each round every library of ``runs``
    ({library: exchange}) times one batch, in turn (results kept until its batch is timed:
    freeing is not the exchange). CPU time, not wall time: the simulator's calls wait on
    locks its stream threads hold, a wait a GPU driver does not have; the CPU the thread
    spends is Python's, ctypes' and the simulator's bookkeeping. ``paused`` False for an
    exchange that waits for its stream (a copy into host memory): the work must run."""
    batch = batch or BATCH
    times = {library: [] for library in runs}
    for round_ in range(repeat * ROUNDS_PER_REPEAT):
        order = list(runs.items())
        order = order[round_ % len(order):] + order[:round_ % len(order)]
        for library, exchange in order:
            kept = []
            SIM.set_paused(paused)   # work queues, nothing runs: no stream thread is woken
            try:
                start = time.thread_time()
                for _ in range(batch):
                    kept.append(exchange())
                times[library].append((time.thread_time() - start) / batch)
            finally:
                SIM.set_paused(False)
            kept.clear()
    return {library: statistics.median(taken) * 1e6 for library, taken in times.items()}


def peer_exchanges(values, producer, consumer, table_tensor, compiled_tensor):
    """{exchange: [(peer, its side of the exchange)]} for the peers installed — cuda-core,
    tvm-ffi — and what to close afterwards."""
    peers: dict[str, list] = {}
    cleanup: list = []
    try:
        import tvm_ffi
    except ImportError:
        pass
    else:   # tvm-ffi reads the same exchange table (and orders nothing: no stream asked)
        peers["exchange-table import"] = [("tvm-ffi", lambda: tvm_ffi.from_dlpack(
            table_tensor))]
        if compiled_tensor is not None:
            peers["exchange-table import, C table"] = [("tvm-ffi", lambda: tvm_ffi.from_dlpack(
                compiled_tensor))]
    try:
        from cuda.core import Device
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        return peers, cleanup
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    buffer = device.allocate(values.nbytes, stream=stream)
    array = DeviceArray(values, device=0, stream=producer)
    # The same copy with the order arrayport keeps, as a cuda-core user writes it: the copy
    # waits for the work pending on the source's stream, and that stream's later writers
    # wait for the copy — two reused events (a Buffer tracks no pending work, so plain
    # copy_to orders nothing: the row's first peer).
    from cuda.core import Stream as CoreStream
    source_stream, copy_stream = (CoreStream.from_handle(int(producer)),
                                  CoreStream.from_handle(int(consumer)))
    before_copy, after_copy = source_stream.record(), copy_stream.record()

    def ordered_copy():
        source_stream.record(before_copy)
        copy_stream.wait(before_copy)
        result = buffer.copy_to(stream=copy_stream)
        copy_stream.record(after_copy)
        source_stream.wait(after_copy)
        return result
    for name, run in {
        "CAI import, consumer stream": lambda: StridedMemoryView.from_cuda_array_interface(
            array, stream_ptr=int(consumer)),
        "CAI import, no stream": lambda: StridedMemoryView.from_cuda_array_interface(
            array, stream_ptr=-1),
        "DLPack export to a consumer stream": lambda: buffer.__dlpack__(
            stream=int(consumer), max_version=(1, 3)),
        "device copy on a stream": lambda: buffer.copy_to(stream=stream),
    }.items():
        peers.setdefault(name, []).append(("cuda-core", run))
    peers["device copy on a stream"].append(("cuda-core+order", ordered_copy))
    cleanup += [lambda: buffer.close(stream), stream.sync, stream.close, array.free]
    return peers, cleanup


class _PoolFloor:
    """What the ctypes floors that allocate share: the simulator's library with the entry
    points they call declared, a block of arrayport's pool on device 0 in ``stream``'s
    order, and the block as an exchange's result (freed, ``cuMemFreeAsync``, when it is let
    go: not part of the timed exchange)."""

    def __init__(self, stream):
        import ctypes

        from arrayport.gpu import cuda as cuda_driver
        self.ctypes, self.stream = ctypes, stream
        self.library = library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
        self.pool = cuda_driver.driver.memory.result_pool(0).handle
        library.cuMemAllocFromPoolAsync.argtypes = [
            ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
        library.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                                          ctypes.c_void_p]
        library.cuMemFreeAsync.argtypes = [ctypes.c_uint64, ctypes.c_void_p]
        library.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        free = library.cuMemFreeAsync

        class Block:
            __slots__ = ("address",)

            def __init__(self, address):
                self.address = address

            def __del__(self):
                free(self.address, stream)

        self.Block = Block


def ctypes_floor(view, stream):
    """The least a Python library over ctypes does for a strided device copy of ``view`` on
    ``stream`` (device 0): a block of arrayport's pool, then one launch of arrayport's
    kernel — its function and its parameters (all but the destination) prepared here, once."""
    from arrayport.gpu import cuda as cuda_driver
    from arrayport.gpu.kernels import strided_copy
    floor = _PoolFloor(stream)
    kernel, grid, block, raw = _core.strided_copy_launch(view.shape, view.strides,
                                                         view.itemsize, view.ptr, 1 << 12)
    function = cuda_driver.driver.kernels.function(0, "strided_copy", kernel)
    params = strided_copy._STRUCTS[kernel].from_buffer_copy(raw)
    arguments = (floor.ctypes.c_void_p * 1)(floor.ctypes.addressof(params))
    launch, nbytes = floor.library.cuLaunchKernel, view.nbytes
    allocate, pool, address, Block = (floor.library.cuMemAllocFromPoolAsync, floor.pool,
                                      floor.ctypes.c_uint64(), floor.Block)
    at = floor.ctypes.byref(address)

    def exchange():   # (inlined: the floor makes no call it need not make)
        if allocate(at, nbytes, pool, stream) != 0:
            raise BufferError("cuMemAllocFromPoolAsync failed")
        params.dst = address.value
        if launch(function, *grid, *block, 0, stream, arguments, None) != 0:
            raise BufferError("cuLaunchKernel failed")
        return Block(address.value)

    return exchange


def ctypes_download(view, stream):
    """The least a Python library over ctypes does to copy ``view`` (device 0's memory) into
    a new NumPy array on ``stream``, readable on return: the array, the transfer, the host's
    wait for the stream."""
    import ctypes
    library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
    copy, wait = library.cuMemcpyAsync, library.cuStreamSynchronize
    copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    wait.argtypes = [ctypes.c_void_p]
    shape, dtype, source, nbytes = view.shape, np.dtype("float32"), view.ptr, view.nbytes

    def exchange():
        out = np.empty(shape, dtype)
        if copy(out.ctypes.data, source, nbytes, stream) != 0 or wait(stream) != 0:
            raise BufferError("cuMemcpyAsync or cuStreamSynchronize failed")
        return out

    return exchange


def ctypes_upload(view, stream):
    """The least a Python library over ctypes does to copy ``view`` (host memory) into a
    new block of arrayport's pool on device 0, on ``stream``: the allocation, the transfer."""
    floor = _PoolFloor(stream)
    copy, source, nbytes = floor.library.cuMemcpyAsync, view.ptr, view.nbytes
    allocate, pool, address, Block = (floor.library.cuMemAllocFromPoolAsync, floor.pool,
                                      floor.ctypes.c_uint64(), floor.Block)
    at = floor.ctypes.byref(address)

    def exchange():   # (inlined: the floor makes no call it need not make)
        if allocate(at, nbytes, pool, stream) != 0 or \
                copy(address.value, source, nbytes, stream) != 0:
            raise BufferError("cuMemAllocFromPoolAsync or cuMemcpyAsync failed")
        return Block(address.value)

    return exchange


def summary(counts):
    """(calls, host synchronizations, events created, calls by name) of one exchange."""
    counts = {name: n for name, n in counts.items()   # driver calls, not the simulator's
              if name.startswith("cu") or name == "host_synchronizations"}   # other counts
    syncs = counts.pop("host_synchronizations", 0)
    detail = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
    return sum(counts.values()), syncs, counts.get("cuEventCreate", 0), detail


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    SIM.set_delay_us(0)
    producer, consumer = Stream(0), Stream(0)
    values = np.arange(1024, dtype=np.float32)
    array = DeviceArray(values, device=0, stream=producer)
    pending = ap.view(array)          # a View whose data is pending on the producer's stream
    square = DeviceArray(np.arange(32 * 32, dtype=np.float32).reshape(32, 32), device=0)
    transposed = ap.view(square).T
    host = ap.view(np.arange(1024, dtype=np.float32))   # 4 KiB of pageable host memory

    ExchangeTensor.current_stream[0] = int(producer)
    table_tensor = ExchangeTensor(DeviceArray(values, device=0, stream=producer))
    compiled_tensor = None
    if compiled_exchange_producer.unavailable() is None:
        compiled_exchange_producer.set_stream(0, int(producer))
        compiled_tensor = compiled_exchange_producer.CompiledExchangeTensor(
            DeviceArray(values, device=0, stream=producer))
    else:
        print(f"(no C table rows: {compiled_exchange_producer.unavailable()})")
    peers, cleanup = peer_exchanges(values, producer, consumer, table_tensor, compiled_tensor)
    if not peers:
        print("(neither cuda-core nor tvm-ffi is installed: arrayport's counts only)")
    exchanges = {
        "CAI import, consumer stream": lambda: ap.view(array, stream=int(consumer)),
        "CAI import, no stream": lambda: ap.view(array),
        "DLPack export to a consumer stream": lambda: pending.__dlpack__(
            stream=int(consumer), max_version=(1, 3)),
        "device copy on a stream": lambda: pending.copy(stream=int(consumer)),
        "strided device copy on a stream": lambda: transposed.copy(stream=int(consumer)),
        "device → host copy": lambda: pending.copy(device="cpu", stream=int(consumer)),
        "host → device copy": lambda: host.copy(device="cuda:0", stream=int(consumer)),
        "exchange-table import": lambda: ap.view(table_tensor),
        "exchange-table import, consumer stream": lambda: ap.view(table_tensor,
                                                                  stream=int(consumer)),
    }
    if compiled_tensor is not None:
        exchanges["exchange-table import, C table"] = lambda: ap.view(compiled_tensor)
        exchanges["exchange-table import, C table, stream"] = lambda: ap.view(
            compiled_tensor, stream=int(consumer))
    print(f"CPU: {cpu_model()}; driver: the CUDA driver simulator; repeat {args.repeat}")
    print("ratio: arrayport's host µs over the row's peer (measured in the same run)")
    print(f"{'exchange':38} {'library':18} {'calls':>6} {'host syncs':>10} {'events':>7} "
          f"{'host µs':>8} {'ratio':>6} {'py calls':>8}  driver calls by name")
    with Context(0):
        transposed.copy(stream=int(consumer))   # the kernel loaded (the first copy's work)
        peers.setdefault("strided device copy on a stream", []).append(
            ("ctypes-floor", ctypes_floor(transposed, int(consumer))))
        peers.setdefault("device → host copy", []).append(
            ("ctypes-floor", ctypes_download(pending, int(consumer))))
        host.copy(device="cuda:0", stream=int(consumer))   # gpu.staging imported (its threshold)
        peers.setdefault("host → device copy", []).append(
            ("ctypes-floor", ctypes_upload(host, int(consumer))))
    for name, exchange in exchanges.items():
        runs = dict([("arrayport", exchange)] + peers.get(name, []))
        with Context(0):   # device 0's context current, as a CUDA user's thread has it
            micros = host_microseconds(runs, args.repeat, paused=name not in HOST_WAITS)
            for library, run in runs.items():
                calls, syncs, events, detail = summary(counted(run, args.repeat))
                interpreted = python_calls(run)
                ratio = "" if library == "arrayport" else \
                    f"{micros['arrayport'] / micros[library]:.2f}"
                print(f"{name:38} {library:18} {calls:6g} {syncs:10g} {events:7g} "
                      f"{micros[library]:8.1f} {ratio:>6} {interpreted:8g}  {detail}")
    producer.synchronize()
    consumer.synchronize()   # every copy read its source: the sources may go
    del pending, table_tensor, transposed
    if compiled_tensor is not None:
        compiled_tensor.array.free()
        del compiled_tensor
    array.free()
    square.free()
    for step in cleanup:
        step()
    producer.close()
    consumer.close()
    # The CUDA rows' dead results go back before the ROCm rows: a CAI import of HIP memory
    # asks CUDA's driver first, and the simulator's look-up of an address it does not know
    # walks every live allocation (a GPU driver's is a tree, whatever is allocated).
    ap.release_device_memory()
    rocm_rows(args.repeat)


def rocm_rows(repeat):
    """The ROCm table (see the module): arrayport on its HIP floor, arrayport's Python
    driver, hip-python."""
    try:
        from rocm.bindings import hip
    except ImportError:
        hip = None
    if not HIP_SIMULATED:
        print(f"\n(no ROCm rows: the HIP simulator cannot be built: {hipsim.unavailable()})")
        return
    import hip_arrays
    from arrayport.gpu import hip as hip_driver
    sim = hipsim.Simulator(os.environ["HIPSIM_LIBRARY"])
    sim.set_delay_us(0)
    producer, consumer = hip_arrays.Stream(0), hip_arrays.Stream(0)
    values = np.arange(1024, dtype=np.float32)
    array = hip_arrays.DeviceArray(values, stream=producer)
    pending = ap.view(values).copy(device="rocm:0", stream=int(producer))
    transposed = ap.view(values[:1024].reshape(32, 32)).copy(device="rocm:0").T

    def without_floor(exchange):
        def run():
            saved = hip_driver.HipDriver._on_floor
            hip_driver.HipDriver._on_floor = lambda self: False   # the core asks Python
            try:
                return exchange()
            finally:
                hip_driver.HipDriver._on_floor = saved
        return run

    exchanges = {
        "DLPack export to a consumer stream": lambda: pending.__dlpack__(
            stream=int(consumer), max_version=(1, 3)),
        "CAI import, consumer stream": lambda: ap.view(array, stream=int(consumer)),
        "CAI import, no stream": lambda: ap.view(array),
        "device copy on a stream": lambda: pending.copy(stream=int(consumer)),
        "device → host copy": lambda: pending.copy(device="cpu", stream=int(consumer)),
        "strided device copy on a stream": lambda: transposed.copy(stream=int(consumer)),
    }
    peers = {}
    if hip is not None:
        event = hip.hipEventCreateWithFlags(hip.hipEventDisableTiming)[1]

        def hip_python_wait():
            hip.hipEventRecord(event, int(producer))
            hip.hipStreamWaitEvent(int(consumer), event, 0)
        peers["DLPack export to a consumer stream"] = [("hip-python", hip_python_wait)]
        peers["CAI import, consumer stream"] = [("hip-python", hip_python_wait)]

        class HipCopy:   # hip-python's copy: new device memory, one transfer (freed after)
            def __init__(self):
                self.memory = hip.hipMalloc(values.nbytes)[1]
                hip.hipMemcpyAsync(self.memory, pending.ptr, values.nbytes,
                                   hip.hipMemcpyKind.hipMemcpyDeviceToDevice, int(consumer))

            def __del__(self):
                hip.hipFree(self.memory)
        peers["device copy on a stream"] = [("hip-python", HipCopy)]

        def hip_python_download():   # a NumPy array, the transfer, the host's wait
            out = np.empty_like(values)
            hip.hipMemcpyAsync(out, pending.ptr, values.nbytes,
                               hip.hipMemcpyKind.hipMemcpyDeviceToHost, int(consumer))
            hip.hipStreamSynchronize(int(consumer))
            return out
        peers["device → host copy"] = [("hip-python", hip_python_download)]
    print(f"\nROCm, on the HIP runtime simulator (floor ready: {_core.hip_floor_ready()}); "
          f"hip-python: the record and wait alone")
    print(f"{'exchange':38} {'library':20} {'calls':>6} {'host µs':>8} {'ratio':>6} "
          f"{'py calls':>8}")
    for name, exchange in exchanges.items():
        exchange()   # warm: the floor's event exists
        runs = dict([("arrayport", exchange), ("arrayport, no floor", without_floor(exchange))]
                    + peers.get(name, []))
        times = {library: [] for library in runs}
        for round_ in range(repeat * ROUNDS_PER_REPEAT):
            for library, run in runs.items():
                kept = []
                start = time.thread_time()
                for _ in range(BATCH):
                    kept.append(run())
                times[library].append((time.thread_time() - start) / BATCH)
                kept.clear()
        micros = {library: statistics.median(taken) * 1e6 for library, taken in times.items()}
        for library, run in runs.items():
            before = sim.counters()["calls"]
            kept = [run() for _ in range(repeat)]
            calls = (sim.counters()["calls"] - before) / repeat
            kept.clear()
            ratio = "" if library == "arrayport" else \
                f"{micros['arrayport'] / micros[library]:.2f}"
            print(f"{name:38} {library:20} {calls:6g} {micros[library]:8.2f} {ratio:>6} "
                  f"{python_calls(run):8g}")
    producer.synchronize()
    del pending, transposed
    if hip is not None:
        hip.hipEventDestroy(event)
    array.free()
    producer.close()
    consumer.close()


if __name__ == "__main__":
    main()
