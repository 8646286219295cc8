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
5. PyTorch: a CUDA tensor through a ``torch.multiprocessing`` queue (its CUDA IPC), where
   PyTorch sees a CUDA GPU.
Without a CUDA driver the rows run on the project's driver simulator (each process loads its
own copy; memory and events cross as the driver shares them): what is measured there is the
host's work (Python, ctypes, the simulator's mapping), not a GPU's.
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

from _timing import cpu_model  # noqa: E402


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


def _receiver(connection):
    """Child: for each message, open what arrived and answer; ``None`` ends it."""
    import arrayport as ap
    while True:
        message = connection.recv()
        if message is None:
            return
        kind, payload = message
        if kind == "ipc":
            received = ap.View.from_shared(payload)
        else:   # the host route: map the segment, upload it
            received = ap.View.from_shared(payload).copy(device="cuda:0")
        connection.send(received.nbytes)
        del received


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


def _median_ms(handoff, repeat: int) -> float:
    handoff()                                   # warm-up: the receiver's first open
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        handoff()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    driver = _driver()
    import arrayport as ap
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
            assert parent.recv() == nbytes
        kept = ap.empty_shared(nbytes, "uint8", device="cuda:0")

        def again():
            parent.send(("ipc", kept.share()))
            assert parent.recv() == nbytes

        ordinary = _cumemalloc_view(nbytes)

        def ordinary_again():
            handle = ordinary.share()
            assert handle.kind == "cuda-ipc"
            parent.send(("ipc", handle))
            assert parent.recv() == nbytes

        def host_route():
            parent.send(("host", kept.copy(device="cpu").share()))
            assert parent.recv() == nbytes
        rows[FRESH] = _median_ms(fresh, args.repeat)
        rows["arrayport pool IPC, the same View again"] = _median_ms(again, args.repeat)
        rows["arrayport CUDA IPC (cuMemAlloc memory), the same View again"] = _median_ms(
            ordinary_again, args.repeat)
        rows[HOST] = _median_ms(host_route, args.repeat)
    finally:
        parent.send(None)
        child.join(60)
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
        rows[torch_row] = _median_ms(torch_handoff, args.repeat)
        queue.put(None)
        worker.join(60)
    width = max(map(len, rows)) + 2
    for name, ms in rows.items():
        print(f"  {name:<{width}} {ms:9.3f} ms")
    best = rows[FRESH]
    print(f"  ratio host route / pool IPC: {rows[HOST] / best:.1f}x")
    if torch_row in rows:
        print(f"  ratio arrayport / PyTorch: {best / rows[torch_row]:.2f}x")
    else:
        print(f"  ({torch_row}: PyTorch sees no CUDA GPU here)")


if __name__ == "__main__":
    main()
