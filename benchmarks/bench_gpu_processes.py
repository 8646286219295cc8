"""A CUDA device View handed to another process, beside the host route and PyTorch's
CUDA sharing, in one run (issue 55).

    python benchmarks/bench_gpu_processes.py [--mib 64] [--repeat 30]

Rows (milliseconds per handoff, medians of --repeat; the exporter waits for the receiver's
answer each time):
1. arrayport, pool IPC (a "cuda-pool" handle): a new ``empty_shared(device="cuda:0")``
   View each time (a block of the sharing pool), its ``share()`` handle sent over a pipe;
   the receiver opens it (``View.from_shared``: the pool's descriptor fetched and the pool
   imported once, the block imported), orders its stream after the exporter's event,
   answers and drops the View (the block freed there).
2. the same View handed over again.
3. arrayport, CUDA IPC (a "cuda-ipc" handle): a View of ``cuMemAlloc`` memory (what
   PyTorch's caching allocator hands out), the same one each time (the receiver maps and
   unmaps its allocation each time).
4. the host route, what a user does without device sharing: ``copy(device="cpu").share()``
   in the exporter, ``from_shared`` and ``copy(device="cuda:0")`` in the receiver.
5. NVIDIA's cuda.core, where installed: a ``DeviceMemoryResource`` made with
   ``ipc_enabled=True`` handed to the receiver once (its pool's descriptor crosses as
   multiprocessing passes descriptors), then each ``Buffer`` sent through the pipe
   (pickled: its ``cuMemPoolExportPointer`` bytes), imported as it is unpickled, closed
   after the answer (the receiver closed it and waited for that free before answering):
   a new Buffer each time, and the same Buffer again. cuda.core orders
   nothing between the processes (no interprocess event: the user's to do) where arrayport
   records and waits on one; on the simulator its receiver grants its device access to the
   imported pool once (``cuMemPoolSetAccess``), which cuda.core 1.2 leaves out and the
   simulator, taking the stricter reading, requires.
6. PyTorch: a CUDA tensor through a ``torch.multiprocessing`` queue (its CUDA IPC), where
   PyTorch sees a CUDA GPU.
Without a CUDA driver the rows run on the project's driver simulator (each process loads its
own copy; memory and events cross as the driver shares them): what is measured there is the
host's work (Python, ctypes, the simulator's mapping), not a GPU's. There each row also says
the CUDA driver calls one handoff makes in the exporter and in the receiver (the
simulator's counts; the receiver's unmapping, done on its closer thread, included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "helpers")]

from _timing import cpu_model, python_calls  # noqa: E402


def _driver() -> str:
    """Which CUDA driver this run uses: the GPU's, or the simulator (installed here, and
    found by the children through LD_LIBRARY_PATH)."""
    import ctypes
    try:   # asked of the loader, not of arrayport (which would keep its answer)
        ctypes.CDLL("libcuda.so.1")
        return "the GPU's CUDA driver"
    except OSError:
        pass
    import cudasim
    path = cudasim.install()
    if path is None:
        sys.exit(f"bench_gpu_processes: no CUDA driver, and the simulator cannot be built: "
                 f"{cudasim.unavailable()}")
    os.environ["LD_LIBRARY_PATH"] = os.path.dirname(path) + os.pathsep + \
        os.environ.get("LD_LIBRARY_PATH", "")
    return "the CUDA driver simulator"


def _counters() -> dict:
    """This process's driver calls by name so far (the simulator's counts; {} on a GPU)."""
    path = os.environ.get("CUDASIM_LIBRARY")
    if not path:
        return {}
    import cudasim
    return {name: count for name, count in cudasim.Simulator(path).counters().items()
            if name.startswith("cu") and name != "cuGetProcAddress"}


def _answer_each(connection, answer) -> None:
    """A receiving child's loop: "counters" is answered with its driver calls so far,
    ``None`` ends it, any other message is answered by ``answer(message)``."""
    while True:
        message = connection.recv()
        if message is None:
            return
        connection.send(_counters() if message == "counters" else answer(message))


def _receiver(connection):
    """Child: open what arrives and answer its bytes (``_answer_each``)."""
    import arrayport as ap

    def open_it(message):
        kind, payload = message
        if kind == "ipc":
            return ap.View.from_shared(payload).nbytes
        if kind == "python calls":   # per open of a handle (each its own: opened once)
            handles = iter(payload)
            return python_calls(lambda: ap.View.from_shared(next(handles)).nbytes,
                                repeat=len(payload) - 1)
        # the host route: map the segment, upload it
        return ap.View.from_shared(payload).copy(device="cuda:0").nbytes
    _answer_each(connection, open_it)


def _cuda_core_receiver(resource, connection, grant: bool):
    """Child: ``resource`` (cuda.core's IPC memory resource) arrived mapped here; each Buffer
    (imported as it was unpickled) is closed, that free waited for, and its size answered
    (CUDA: an importer's free is complete before the exporter's; and a block is imported
    once per process): ``_answer_each``."""
    from cuda.core import Device
    device = Device(resource.device_id)
    device.set_current()
    stream = device.create_stream()
    if grant:
        from cuda.bindings import driver
        access = driver.CUmemAccessDesc()
        access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = resource.device_id
        access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        (status,) = driver.cuMemPoolSetAccess(int(resource.handle), [access], 1)
        assert status == driver.CUresult.CUDA_SUCCESS, status

    def close_it(buffer) -> int:
        size = buffer.size
        buffer.close(stream)
        stream.sync()
        return size
    _answer_each(connection, close_it)


def _torch_receiver(queue, answers):
    while True:
        tensor = queue.get()
        if tensor is None:
            return
        answers.put(tensor.numel())
        del tensor


FRESH = "arrayport pool IPC, a new View each time"
HOST = "host route (copy to host, share, upload)"


def _cumemalloc_view(nbytes: int):
    """A View of ``nbytes`` of ordinary device memory (``cuMemAlloc``), as another
    library's allocator hands out: shared by its CUDA IPC handle."""
    import arrayport as ap
    from arrayport import _core
    from arrayport.gpu import cuda
    memory = cuda.driver.allocate_device(0, nbytes)
    return _core.view_from_pointer(memory.address, (nbytes,), None, ap.DType("uint8"),
                                   readonly=False, owner=memory, device=(2, 0),
                                   protocol="benchmark")


def _answer(connection):
    """The receiver's answer; an error where it gave none in a minute (it failed: its
    traceback is above)."""
    if not connection.poll(60):
        raise RuntimeError("the receiving process did not answer (see its error above)")
    return connection.recv()


def _median_ms(handoff, repeat: int, receiver=None) -> tuple[float, dict, dict]:
    """(median milliseconds of ``handoff``, driver calls per handoff by name in this process
    and in the receiver at the other end of ``receiver``, a pipe that answers "counters";
    empty where not counted), the first, warming, handoff left out."""
    def calls() -> tuple[dict, dict]:
        if receiver is None:
            return _counters(), {}
        receiver.send("counters")
        return _counters(), _answer(receiver)
    handoff()                                   # warm-up: the receiver's first open
    before = calls()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        handoff()
        samples.append(time.perf_counter() - start)
    after = calls()
    per_handoff = [{name: (count - before[side].get(name, 0)) / repeat
                    for name, count in after[side].items() if count != before[side].get(name, 0)}
                   for side in (0, 1)]
    return statistics.median(samples) * 1e3, per_handoff[0], per_handoff[1]


def _cuda_core_rows(nbytes: int, repeat: int, simulated: bool) -> dict:
    """Row 5: cuda.core's IPC memory resource ({} where cuda.core is not installed)."""
    try:
        from cuda.core import Device, DeviceMemoryResource, DeviceMemoryResourceOptions
    except ImportError:
        return {}
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    resource = DeviceMemoryResource(device, DeviceMemoryResourceOptions(ipc_enabled=True))
    context = multiprocessing.get_context("spawn")
    parent, child_end = context.Pipe()
    child = context.Process(target=_cuda_core_receiver, args=(resource, child_end, simulated))
    child.start()
    rows = {}
    try:
        def fresh():
            buffer = resource.allocate(nbytes, stream=stream)
            parent.send(buffer)
            assert _answer(parent) == nbytes
            buffer.close(stream)
        kept = resource.allocate(nbytes, stream=stream)

        def again():
            parent.send(kept)
            assert _answer(parent) == nbytes
        rows["cuda.core IPC memory resource, a new Buffer each time"] = _median_ms(
            fresh, repeat, parent)
        rows["cuda.core IPC memory resource, the same Buffer again"] = _median_ms(
            again, repeat, parent)
        kept.close(stream)
    finally:
        parent.send(None)
        child.join(60)
        stream.sync()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--calls", action="store_true",
                        help="also the driver calls by name (on the simulator), and the Python "
                             "calls of share() and of View.from_shared")
    args = parser.parse_args()
    driver = _driver()
    multiprocessing.set_start_method("spawn", force=True)   # CUDA cannot fork: cuda.core's
    import arrayport as ap                                  # pickles check the default
    nbytes = args.mib << 20
    print(f"CPU: {cpu_model()}; driver: {driver}; {args.mib} MiB, median of {args.repeat}")
    context = multiprocessing.get_context("spawn")
    parent, child_end = context.Pipe()
    child = context.Process(target=_receiver, args=(child_end,))
    child.start()
    rows = {}
    try:
        def fresh():
            view = ap.empty_shared(nbytes, "uint8", device="cuda:0")
            parent.send(("ipc", view.share()))
            assert _answer(parent) == nbytes
        kept = ap.empty_shared(nbytes, "uint8", device="cuda:0")

        def again():
            parent.send(("ipc", kept.share()))
            assert _answer(parent) == nbytes

        ordinary = _cumemalloc_view(nbytes)

        def ordinary_again():
            handle = ordinary.share()
            assert handle.kind == "cuda-ipc"
            parent.send(("ipc", handle))
            assert _answer(parent) == nbytes

        def host_route():
            parent.send(("host", kept.copy(device="cpu").share()))
            assert _answer(parent) == nbytes
        rows[FRESH] = _median_ms(fresh, args.repeat, parent)
        rows["arrayport pool IPC, the same View again"] = _median_ms(again, args.repeat,
                                                                     parent)
        rows["arrayport CUDA IPC (cuMemAlloc memory), the same View again"] = _median_ms(
            ordinary_again, args.repeat, parent)
        rows[HOST] = _median_ms(host_route, args.repeat, parent)
        if args.calls:   # the Python side's work: function calls per share() and per open
            shares = []
            exporter_calls = python_calls(lambda: shares.append(kept.share()))
            parent.send(("python calls", shares[-10:]))
            python_side = (exporter_calls, _answer(parent))
    finally:
        parent.send(None)
        child.join(60)
    rows.update(_cuda_core_rows(nbytes, args.repeat, driver != "the GPU's CUDA driver"))
    torch_row = "PyTorch torch.multiprocessing (CUDA IPC)"
    try:
        import torch
        import torch.multiprocessing as torch_mp
        cuda_here = torch.cuda.is_available()
    except ImportError:
        cuda_here = False
    if cuda_here:
        torch_context = torch_mp.get_context("spawn")
        queue, answers = torch_context.Queue(), torch_context.Queue()
        worker = torch_context.Process(target=_torch_receiver, args=(queue, answers))
        worker.start()
        tensor = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")

        def torch_handoff():
            queue.put(tensor)
            assert answers.get() == nbytes
        rows[torch_row] = _median_ms(torch_handoff, args.repeat)   # counted by no one
        queue.put(None)
        worker.join(60)
    width = max(map(len, rows)) + 2
    counted = bool(_counters())
    print(f"  {'handoff':<{width}} {'ms':>9}" + ("   driver calls per handoff: exporter, "
                                                 "receiver" if counted else ""))
    for name, (ms, exporter_calls, receiver_calls) in rows.items():
        calls = (f"   {sum(exporter_calls.values()):5.1f} {sum(receiver_calls.values()):5.1f}"
                 if counted and name != torch_row else "")
        print(f"  {name:<{width}} {ms:9.3f}{calls}")
        if args.calls and counted:
            for side, by_name in (("exporter", exporter_calls), ("receiver", receiver_calls)):
                print(f"      {side}: " + ", ".join(f"{call} {n:g}"
                                                   for call, n in sorted(by_name.items())))
    if args.calls:
        print(f"  Python calls (sys.setprofile), pool IPC: {python_side[0]:g} per share(), "
              f"{python_side[1]:g} per View.from_shared in the receiver")
    best = rows[FRESH][0]
    print(f"  ratio host route / pool IPC: {rows[HOST][0] / best:.1f}x")
    cuda_core_row = "cuda.core IPC memory resource, a new Buffer each time"
    if cuda_core_row in rows:
        print(f"  ratio arrayport / cuda.core, a new one each time: "
              f"{best / rows[cuda_core_row][0]:.2f}x (arrayport also orders the receiver "
              f"after the exporter's work: an interprocess event)")
    else:
        print("  (cuda.core is not installed)")
    if torch_row in rows:
        print(f"  ratio arrayport / PyTorch: {best / rows[torch_row][0]:.2f}x")
    else:
        print(f"  ({torch_row}: PyTorch sees no CUDA GPU here)")


if __name__ == "__main__":
    main()
