"""Soak test: a million exchanges through every import and export path, memory watched.

    python reliability/soak.py [--count 1000000] [--warmup 20000] [--paths view,to_numpy]
    python reliability/soak.py --gpu [--count ...]   # the GPU paths, on the CUDA simulator
    python reliability/soak.py --rocm [--count ...]  # ROCm's, on the HIP simulator

For each path: run ``--warmup`` exchanges, then take resident memory (``/proc/self/statm``),
``tracemalloc``'s current size and arrayport's live counters; run ``--count`` exchanges;
take them again. A path passes when both memory figures grew by less than 1 MiB and every
live counter is back where it was. ``--gpu``: the GPU paths instead, on the project's CUDA
driver simulator (tests/cudasim, loaded as the process's driver): CUDA Array Interface and
exchange-table imports with and without a consumer stream, exports to a consumer's stream,
device copies through the result pool and the strided kernel, uploads through the pinned
ring, Arrow device exports — and the simulator's live allocations, events and streams must
be back where they were too (each path's streams synchronized every 1,000 exchanges, as a
program's would be: the simulator's queues are not the leak looked for). ``--rocm``: ROCm's
paths on the HIP runtime simulator (tests/hipsim), the same way: CUDA Array Interface
imports of HIP memory with and without a consumer stream (HIP's compiled floor), exports
to a consumer's stream, device copies (the HIP driver's transfers), copies to and from the
host, Arrow device exports. Prints one line per path and exits 1 if any failed.
Not a timed test: a script, run by hand or by the nightly job (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import pickle
import sys
import time
import tracemalloc

import numpy as np

import arrayport as ap

LIMIT = 1 << 20  # bytes of growth allowed after warm-up
PAGE = os.sysconf("SC_PAGE_SIZE")


class InterfaceHolder:
    def __init__(self, array):
        self.__array_interface__ = array.__array_interface__
        self.array = array


def paths():
    """name -> a function doing one exchange (its results dropped at once)."""
    array = np.arange(12.0).reshape(3, 4)
    readonly = array.copy()
    readonly.flags.writeable = False
    view = ap.view(array)
    raw = bytes(48)
    holder = InterfaceHolder(array)
    found = {
        "view(ndarray)": lambda: ap.view(array),
        "view(read-only ndarray)": lambda: ap.view(readonly),
        "from_dlpack(numpy capsule)": lambda: ap.from_dlpack(array.__dlpack__(max_version=(1, 3))),
        "view(bytes) buffer": lambda: ap.view(raw),
        "view(__array_interface__)": lambda: ap.view(holder),
        "view(__array__)": lambda: ap.View.from_array(array),
        "View.__dlpack__ versioned -> numpy": lambda: np.from_dlpack(view),
        "View.__dlpack__ unconsumed": lambda: view.__dlpack__(max_version=(1, 3)),
        "View.__dlpack__ legacy unconsumed": lambda: view.__dlpack__(),
        "memoryview(View)": lambda: memoryview(view).release(),
        "View.__array_interface__": lambda: view.__array_interface__,
        "to_numpy(View)": lambda: ap.to_numpy(view),
        "host_copy": lambda: view.host_copy(),
        "from_dlpack(copy=True)": lambda: ap.from_dlpack(array, copy=True),
        "np.add(View, View)": lambda: np.add(view, view),
        "np.mean(View)": lambda: np.mean(view, axis=0),
        # issue 19: layout operations and contracts
        "View[1:, ::-2].T.reshape": lambda: view[1:, ::-2].T.reshape(2, 1, 2),
        "View.view_as / as_readonly": lambda: view.view_as("uint8").as_readonly(),
        "require met (zero-copy)": lambda: ap.require(array, dtype="float64", ndim=2),
        "require order='F' (a copy)": lambda: ap.require(array, order="F"),
        "require refused (RequirementError)": lambda: _refused(array),
        # issue 17: pickle 5 out of band, in band
        "pickle 5 out of band round trip": lambda: _pickle_round_trip(view, 5),
        "pickle 4 in band round trip": lambda: _pickle_round_trip(view, 4),
    }
    if importlib.util.find_spec("torch") is not None:
        import torch
        tensor = torch.ones(3, 4)
        found["to_torch(View)"] = lambda: ap.to_torch(view)
        found["view(torch) exchange API"] = lambda: ap.view(tensor)
        found["torch.from_dlpack(View)"] = lambda: torch.from_dlpack(view)
    if importlib.util.find_spec("tvm_ffi") is not None:
        import tvm_ffi
        found["tvm_ffi.from_dlpack(View)"] = lambda: tvm_ffi.from_dlpack(view)
    if importlib.util.find_spec("ml_dtypes") is not None:
        import ml_dtypes
        bf16 = np.ones(8, ml_dtypes.bfloat16)
        found["view(bfloat16 ndarray)"] = lambda: ap.view(bf16)
    return found


def _synchronized(exchange, *streams):
    """``exchange``, with ``streams`` drained every 1,000 calls, as a program's would be (the
    simulator's queues are not the leak looked for)."""
    calls = [0]

    def run():
        exchange()
        calls[0] += 1
        if calls[0] % 1000 == 0:
            for stream in streams:
                stream.synchronize()
    return run


def _installed_simulator(name: str, flag: str):
    """The test helpers' simulator module ``name`` (cudasim, hipsim), installed as the
    process's driver before any is opened; the soak ends, saying why, where it cannot be
    built (``flag``: the option that asked for it)."""
    sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                 "helpers")]
    simulator = importlib.import_module(name)
    if simulator.install() is None:
        sys.exit(f"soak {flag}: the simulator cannot be built: {simulator.unavailable()}")
    return simulator


def gpu_paths():
    """name -> one GPU exchange, on the simulator (installed by main before any driver is
    opened); and the simulator, to read its live objects."""
    cudasim = _installed_simulator("cudasim", "--gpu")
    from exchange_producer import ExchangeTensor
    from sim_arrays import Context, DeviceArray, Stream
    from arrayport.gpu import staging

    Context(0).__enter__()   # device 0's context current, as a CUDA user's thread has it
    producer, consumer = Stream(0), Stream(0)
    values = np.arange(1024, dtype=np.float32)
    array = DeviceArray(values, stream=producer)
    pending = ap.view(array)
    ExchangeTensor.current_stream[0] = int(producer)
    table_tensor = ExchangeTensor(DeviceArray(values, stream=producer))
    square = ap.view(DeviceArray(np.arange(32 * 32, dtype=np.float32).reshape(32, 32))).T
    upload = np.ones(max(staging.THRESHOLD_BYTES, 1) // 4 + 1, np.float32)
    small_upload = ap.view(np.ones(1024, np.float32))
    on = int(consumer)

    found = {
        "gpu: CAI import": lambda: ap.view(array),
        "gpu: CAI import, consumer stream": lambda: ap.view(array, stream=on),
        "gpu: exchange-table import": lambda: ap.view(table_tensor),
        "gpu: exchange-table import, consumer stream": lambda: ap.view(table_tensor,
                                                                      stream=on),
        "gpu: DLPack export to a consumer stream": lambda: pending.__dlpack__(
            stream=on, max_version=(1, 3)),
        "gpu: device copy (result pool)": lambda: pending.copy(stream=on),
        "gpu: strided device copy (kernel)": lambda: square.copy(stream=on),
        "gpu: device → host copy": lambda: pending.copy(device="cpu", stream=on),
        "gpu: host → device copy, 4 KiB": lambda: small_upload.copy(device="cuda:0",
                                                                    stream=on),
        "gpu: upload through the pinned ring": lambda: ap.view(upload).copy(
            device="cuda:0", stream=on),
        "gpu: Arrow device export": lambda: pending.__arrow_c_device_array__(),
    }
    simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
    simulator.set_delay_us(0)   # work runs as soon as it may: no simulated latency
    return {name: _synchronized(run, consumer, producer)
            for name, run in found.items()}, simulator


def rocm_paths():
    """name -> one ROCm exchange, on the HIP simulator (installed before any runtime is
    opened); and the simulator, to read its live objects."""
    hipsim = _installed_simulator("hipsim", "--rocm")
    from hip_arrays import DeviceArray, Stream

    producer, consumer = Stream(0), Stream(0)
    values = np.arange(1024, dtype=np.float32)
    array = DeviceArray(values, stream=producer)
    pending = ap.view(values).copy(device="rocm:0", stream=int(producer))
    small_upload = ap.view(np.ones(1024, np.float32))
    on = int(consumer)

    found = {
        "rocm: CAI import": lambda: ap.view(array),
        "rocm: CAI import, consumer stream": lambda: ap.view(array, stream=on),
        "rocm: DLPack export to a consumer stream": lambda: pending.__dlpack__(
            stream=on, max_version=(1, 3)),
        "rocm: device copy": lambda: pending.copy(stream=on),
        "rocm: device → host copy": lambda: pending.copy(device="cpu", stream=on),
        "rocm: strided device copy (2-D transfers)": lambda: pending.reshape(32, 32).T.copy(
            stream=on),
        "rocm: host → device copy, 4 KiB": lambda: small_upload.copy(device="rocm:0",
                                                                     stream=on),
        "rocm: Arrow device export": lambda: pending.__arrow_c_device_array__(),
    }
    simulator = hipsim.Simulator(os.environ["HIPSIM_LIBRARY"])
    simulator.set_delay_us(0)   # work runs as soon as it may: no simulated latency
    return {name: _synchronized(run, consumer, producer)
            for name, run in found.items()}, simulator


def _refused(array):
    try:
        ap.require(array, dtype="int8")
    except ap.RequirementError:
        pass


def _pickle_round_trip(view, protocol):
    buffers = []
    data = pickle.dumps(view, protocol=protocol,
                        buffer_callback=buffers.append if protocol >= 5 else None)
    return pickle.loads(data, buffers=[bytearray(b.raw()) for b in buffers])


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def soak(name, exchange, count, warmup, simulator=None):
    """One path: flat when memory grew by less than LIMIT and every live count (arrayport's,
    and the simulator's allocations, events and streams where one is given) is back."""
    def live():
        # The device memory arrayport keeps by design (dead results held for reuse, the
        # pool's idle chunks) given back first: what stays is what leaked.
        if simulator:
            ap.release_device_memory()
        return ap._core.live_counts(), (simulator.live() if simulator else ())

    for _ in range(warmup):
        exchange()
    gc.collect()
    before = live()
    rss, traced = resident_bytes(), tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    for _ in range(count):
        exchange()
    seconds = time.perf_counter() - started
    gc.collect()
    after = live()
    rss_growth = resident_bytes() - rss
    traced_growth = tracemalloc.get_traced_memory()[0] - traced
    ok = rss_growth < LIMIT and traced_growth < LIMIT and after == before
    print(f"{'ok  ' if ok else 'FAIL'} {name:<44} {count:>9} x  rss {rss_growth / 1024:>+8.1f} "
          f"KiB  traced {traced_growth / 1024:>+8.1f} KiB  live {after == before!s:<5}"
          f"  {seconds:6.1f} s" + ("" if after == before else f"  {before} -> {after}"),
          flush=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000,
                        help="exchanges before the first measurement (--gpu: at least "
                             "10,000: the simulator keeps the last 4,096 freed addresses "
                             "reserved, and its memory grows until they are)")
    parser.add_argument("--paths", help="comma-separated substrings of path names")
    parser.add_argument("--gpu", action="store_true",
                        help="the GPU paths, on the CUDA driver simulator")
    parser.add_argument("--rocm", action="store_true",
                        help="ROCm's paths, on the HIP runtime simulator")
    args = parser.parse_args()
    tracemalloc.start()
    selected, simulator = (gpu_paths() if args.gpu else rocm_paths() if args.rocm
                           else (paths(), None))
    if args.gpu and args.warmup < 10_000:
        sys.exit("soak --gpu: --warmup must be at least 10000 (the simulator's own memory "
                 "grows until it keeps 4,096 freed addresses reserved)")
    if args.paths:
        wanted = args.paths.split(",")
        selected = {k: v for k, v in selected.items() if any(w in k for w in wanted)}
    print(f"# arrayport {ap.__version__}, numpy {np.__version__}, Python "
          f"{sys.version.split()[0]}; limit {LIMIT // 1024} KiB growth per path after warm-up")
    results = [soak(name, exchange, args.count, args.warmup, simulator)
               for name, exchange in selected.items()]
    print(f"# {sum(results)}/{len(results)} paths flat")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
