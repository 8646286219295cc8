"""Copy bandwidth: View.copy beside NumPy, memcpy and PyTorch, in one run.

    python benchmarks/bench_copy.py [--repeat 15] [--size 4096] [--gpu-mib 256]

Host: a transposed float32 square (--size, default 4096: 64 MiB) and two 3-d
permutations of the same bytes, copied to new C-contiguous memory by ``View.copy()``,
by ``np.ascontiguousarray`` and — the ceiling — by a plain memcpy of the same number of
bytes, once into new memory (what a copying function does: allocate, then write) and
once into memory written before (the copy alone).
GPU (when PyTorch sees a CUDA device): host→device from pageable and pinned memory,
device→host, device→device and a transposed device→device copy of --gpu-mib MiB, beside
``tensor.cuda()`` / ``.cpu()`` / ``.clone()`` / ``.contiguous()``, each followed by a
device synchronization.
GB/s = bytes of the array / median time (each byte is read once and written once). The
statements of a row are timed in alternation, so drift weighs on all alike.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import time

import numpy as np

import arrayport as ap
from _timing import cpu_model


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--gpu-mib", type=int, default=256)
    parser.add_argument("--number", type=int, default=None, help="(ignored: one call per "
                        "sample; accepted so all benchmarks take the same options)")
    return parser.parse_args()


def alternating_medians(functions, repeat):
    """Median seconds of each function, timed one call at a time in alternation."""
    for function in functions:
        function()  # warm-up: first-touch, lazy loading
    samples = [[] for _ in functions]
    for _ in range(repeat):
        for function, taken in zip(functions, samples):
            start = time.perf_counter()
            function()
            taken.append(time.perf_counter() - start)
    return [statistics.median(taken) for taken in samples]


def host_cases(size):
    square = np.random.default_rng(0).random((size, size), dtype=np.float32)
    cube = square.reshape(size // 16, 64, size // 4)  # same bytes, 3-d
    return [
        (f"transposed {size}x{size} float32", square.T),
        (f"3-d {cube.shape} .transpose(2, 0, 1)", cube.transpose(2, 0, 1)),
        (f"3-d {cube.shape} .transpose(1, 2, 0)", cube.transpose(1, 2, 0)),
    ]


def memcpy_fresh(source_address, nbytes):
    def run():
        destination = np.empty(nbytes, np.uint8)
        ctypes.memmove(destination.ctypes.data, source_address, nbytes)
        return destination
    return run


def host_table(args):
    print(f"# host: {cpu_model()}, Python "
          f"{platform.python_version()}, arrayport {ap.__version__}, numpy {np.__version__}; "
          f"median of {args.repeat}, GB/s")
    print(f"{'case':<40} {'View.copy':>9} {'numpy':>8} {'memcpy new':>10} {'memcpy':>8} "
          f"{'vs numpy':>8} {'vs memcpy new':>13}")
    for label, array in host_cases(args.size):
        view = ap.view(array)
        flat = np.ascontiguousarray(array).reshape(-1)
        source = flat.ctypes.data
        written = np.empty_like(flat)
        times = alternating_medians([
            view.copy,
            lambda: np.ascontiguousarray(array),
            memcpy_fresh(source, flat.nbytes),
            lambda: ctypes.memmove(written.ctypes.data, source, flat.nbytes),
        ], args.repeat)
        ours, numpy_rate, fresh, bare = (array.nbytes / t / 1e9 for t in times)
        print(f"{label:<40} {ours:>9.2f} {numpy_rate:>8.2f} {fresh:>10.2f} {bare:>8.2f} "
              f"{ours / numpy_rate:>7.2f}x {ours / fresh:>12.0%}")


def gpu_table(args):
    try:
        import torch
    except ImportError:
        print("# gpu: PyTorch not installed, skipped")
        return
    if not torch.cuda.is_available():
        print("# gpu: no CUDA device, skipped")
        return
    count = args.gpu_mib * (1 << 20) // 4
    side = int(count ** 0.5)
    host = torch.rand(count)
    pinned = host.pin_memory()
    device = host.cuda()
    square = device[: side * side].view(side, side)
    host_view, pinned_view, device_view = ap.view(host), ap.view(pinned), ap.view(device)
    transposed_view = ap.view(square.T)
    sync = torch.cuda.synchronize

    def synced(function):
        def run():
            function()
            sync()
        return run

    print(f"# gpu: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"{args.gpu_mib} MiB float32, median of {args.repeat}, GB/s")
    print(f"{'case':<40} {'View.copy':>9} {'torch':>8} {'ratio':>7}  torch statement")
    rows = [
        ("host -> device (pageable)", lambda: host_view.copy(device="cuda:0"),
         lambda: host.cuda(), host.nbytes, "host.cuda()"),
        ("host -> device (pinned)", lambda: pinned_view.copy(device="cuda:0"),
         lambda: pinned.cuda(), host.nbytes, "pinned.cuda()"),
        ("device -> host", lambda: device_view.copy(device="cpu"), lambda: device.cpu(),
         host.nbytes, "device.cpu()"),
        ("device -> device", device_view.copy, device.clone, host.nbytes, "device.clone()"),
        (f"device transposed {side}x{side}", transposed_view.copy,
         lambda: square.T.contiguous(), square.nbytes, "square.T.contiguous()"),
    ]
    for label, ours, theirs, nbytes, statement in rows:
        times = alternating_medians([synced(ours), synced(theirs)], args.repeat)
        ours_rate, their_rate = (nbytes / t / 1e9 for t in times)
        print(f"{label:<40} {ours_rate:>9.2f} {their_rate:>8.2f} {ours_rate / their_rate:>6.2f}x"
              f"  {statement}")


def main():
    args = arguments()
    host_table(args)
    gpu_table(args)


if __name__ == "__main__":
    main()
