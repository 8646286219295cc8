"""Copy bandwidth: View.copy beside NumPy, memcpy and PyTorch, in one run.

    python benchmarks/bench_copy.py [--repeat 15] [--size 4096] [--gpu-mib 256]
                                    [--large-mib 1,4,16,64,256,1024] [--paths]

Host: a transposed float32 square (--size, default 4096: 64 MiB), two 3-d permutations
of the same bytes, 1-, 2-, 8- and 16-byte transposes, a uint8 image (2160 x 3840 x 3) HWC -> CHW
and back, and a small (64 KiB) transpose where per-call cost shows — copied to new
C-contiguous memory by ``View.copy()``, by ``np.ascontiguousarray``, by PyTorch's
``.contiguous()`` (with its threads) and — the ceiling — by a plain memcpy of the same
number of bytes, once into new memory (what a copying function does: allocate, then
write) and once into memory written before (the copy alone). The kernel's choice (vector
path, cache sizes, threads) is printed first; ``--paths`` adds a column per vector path
the CPU runs, each forced and on one thread (the best path's share of memcpy into new
memory beside them), and one with every copy split across all the CPUs.
Streaming (issue 53): transposed float32 and float16 of --large-mib sizes (1 MiB to 1 GiB
by default, where the machine's available memory allows), ``View.copy`` with today's
streaming threshold and with the former one (half the last-level cache) beside NumPy and
memcpy into new memory, in ms, with the caches reported and the thresholds chosen.
GPU (when PyTorch sees a CUDA device): host→device from pageable memory (through
arrayport's pinned ring, and with the ring off: the driver's own staging) and from pinned
memory, device→host, device→device, a transposed copy to the device and to the host of --gpu-mib
MiB, and the strided layouts of issue 43 (row-sliced, transposed 512² and 2048², a uint8
image's HWC -> CHW, reversed rows, permuted 3-d and 4-d), beside ``tensor.cuda()`` /
``.cpu()`` / ``.clone()`` / ``.contiguous()``, each followed by a device synchronization;
the "bar" column is issue 43's ratio for the row, "<bar!" where it is missed.
GB/s = bytes of the array / median time (each byte is read once and written once). The
statements of a row are timed in alternation, so drift weighs on all alike.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import time

import numpy as np

import arrayport as ap
from _timing import cpu_model
from arrayport import _core


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--gpu-mib", type=int, default=256)
    parser.add_argument("--number", type=int, default=None, help="(ignored: one call per "
                        "sample; accepted so all benchmarks take the same options)")
    parser.add_argument("--paths", action="store_true",
                        help="also time View.copy on every vector path the CPU runs")
    parser.add_argument("--gpu-only", action="store_true",
                        help="only the GPU table (what scripts/gpu-check runs: a lent GPU's "
                             "few minutes go to its rows, not to the host's)")
    parser.add_argument("--large-mib", default="1,4,16,64,256,1024",
                        help="sizes (MiB, comma-separated) of the streaming table: transposed "
                             "float32 and float16 beside memcpy and NumPy; a size is left out "
                             "where the machine's available memory is under 5 times it")
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
    rng = np.random.default_rng(0)
    square = rng.random((size, size), dtype=np.float32)
    cube = square.reshape(size // 16, 64, size // 4)  # same bytes, 3-d
    raw = rng.integers(0, 256, max(size * size * 4, 2160 * 3840 * 3), dtype=np.uint8)
    image = raw[: 2160 * 3840 * 3].reshape(2160, 3840, 3)
    planes = np.ascontiguousarray(image.transpose(2, 0, 1))
    return [
        (f"transposed {size}x{size} float32", square.T),
        (f"3-d {cube.shape} .transpose(2, 0, 1)", cube.transpose(2, 0, 1)),
        (f"3-d {cube.shape} .transpose(1, 2, 0)", cube.transpose(1, 2, 0)),
        (f"transposed {size}x{size} uint8", raw[: size * size].reshape(size, size).T),
        (f"transposed {size}x{2 * size} float16",
         raw[: size * size * 4].view(np.float16).reshape(size, 2 * size).T),
        (f"transposed {size // 2}x{size} float64",
         raw[: size * size * 4].view(np.float64).reshape(size // 2, size).T),
        (f"transposed {size // 2}x{size // 2} complex128",
         raw[: size * size * 4].view(np.complex128).reshape(size // 2, size // 2).T),
        ("uint8 image HWC -> CHW (2160x3840x3)", image.transpose(2, 0, 1)),
        ("uint8 image CHW -> HWC (3x2160x3840)", planes.transpose(1, 2, 0)),
        ("small: transposed 128x128 float32", square[:128, :128].T),
    ]


def memcpy_fresh(source_address, nbytes):
    def run():
        destination = np.empty(nbytes, np.uint8)
        ctypes.memmove(destination.ctypes.data, source_address, nbytes)
        return destination
    return run


def kernel_line():
    info = _core.copy_kernel()
    sizes = ", ".join(f"{name} {info[name] >> 10} KiB" for name in ("l1d", "l2", "llc"))
    return (f"# kernel: {info['path']} path (this CPU runs: {', '.join(info['paths'])}); "
            f"{sizes}; bands of {info['band_lines']} source lines; streaming from "
            f"{info['streaming_bytes'] >> 20} MiB; up to {info['threads']} thread(s), "
            f"{info['thread_bytes'] >> 20} MiB each at least")


def former_streaming_bytes(info):
    """The streaming threshold before issue 53: half the last-level cache (8 MiB where
    none is reported), 1 MiB at least — timed beside today's rule in the same run."""
    return max(info["llc"] // 2 if info["llc"] else 8 << 20, 1 << 20)


def available_bytes() -> int:
    """MemAvailable (Linux); else the physical memory; 0 where neither is known."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def transposed_of(nbytes, dtype):
    """A transposed matrix of ``nbytes`` of ``dtype``: rows a power of two, about square
    (64 MiB float32: 4096 x 4096; float16: 4096 x 8192)."""
    count = nbytes // np.dtype(dtype).itemsize
    rows = 1 << ((count.bit_length() - 1) // 2)
    return np.ones((rows, count // rows), dtype).T


def streaming_table(args):
    """Transposed copies from 1 MiB to 1 GiB: View.copy with today's streaming threshold
    and with the former one (half the last-level cache), NumPy's copy, memcpy into new
    memory — one run, in alternation."""
    info = _core.copy_kernel()
    former = former_streaming_bytes(info)
    print(f"# streaming: from {info['streaming_bytes'] / (1 << 20):g} MiB (one core's L2 "
          f"{info['l2'] >> 10} KiB, within 1 MiB and half the last level "
          f"{info['llc'] >> 20} MiB); formerly from {former / (1 << 20):g} MiB; "
          f"ARRAYPORT_COPY_STREAMING_BYTES overrides; median of {args.repeat}, ms")
    print(f"{'case':<38} {'View.copy':>10} {'former':>9} {'numpy':>9} {'memcpy new':>10} "
          f"{'vs memcpy':>9} {'former vs':>9} {'vs former':>9}")
    available = available_bytes()
    for mib in (float(size) for size in args.large_mib.split(",") if size.strip()):
        nbytes = int(mib * (1 << 20))
        if available and 5 * nbytes > available:
            print(f"{f'{mib:g} MiB':<38} (left out: {available >> 20} MiB available)")
            continue
        for dtype in ("float32", "float16"):
            array = transposed_of(nbytes, dtype)
            view = ap.view(array)
            flat = array.T.reshape(-1)   # the same bytes, contiguous
            times = alternating_medians([
                view.copy, streaming_from(former, view.copy),
                lambda array=array: np.ascontiguousarray(array),
                memcpy_fresh(flat.ctypes.data, flat.nbytes),
            ], max(1, args.repeat if mib < 256 else min(args.repeat, 5)))
            ours, before, numpy_time, fresh = times
            label = f"transposed {array.shape[1]}x{array.shape[0]} {dtype} ({mib:g} MiB)"
            print(f"{label:<38} {ours * 1e3:>10.2f} {before * 1e3:>9.2f} "
                  f"{numpy_time * 1e3:>9.2f} {fresh * 1e3:>10.2f} {ours / fresh:>8.2f}x "
                  f"{before / fresh:>8.2f}x {ours / before:>8.2f}x")
            del array, view, flat


def with_kernel(setter, *setting):
    """A function that runs another with the copy kernel set by ``setter(*setting)`` (one
    of ``_core``'s setters, which return what they replaced), restoring it after."""
    def wrap(function):
        def run():
            previous = setter(*setting)
            try:
                return function()
            finally:
                setter(*previous) if isinstance(previous, tuple) else setter(previous)
        return run
    return wrap


def on_threads(threads, function):
    return with_kernel(_core.set_copy_threads, threads, 1)(function)


def on_path(path, function):
    return with_kernel(_core.force_copy_path, path)(function)


def streaming_from(nbytes, function):
    return with_kernel(_core.set_copy_streaming, nbytes)(function)


def host_table(args):
    try:
        import torch
    except ImportError:
        torch = None
    print(f"# host: {cpu_model()}, Python "
          f"{platform.python_version()}, arrayport {ap.__version__}, numpy {np.__version__}"
          f"{f', torch {torch.__version__} ({torch.get_num_threads()} threads)' if torch else ''}"
          f"; median of {args.repeat}, GB/s")
    print(kernel_line())
    paths = _core.copy_kernel()["paths"] if args.paths else []
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    extra = [*(f"{path} 1t" for path in paths), "1t/memcpy", f"{cpus} thr"] if args.paths else []
    print(f"{'case':<40} {'View.copy':>9} {'numpy':>8} {'torch':>8} {'memcpy new':>10} "
          f"{'memcpy':>8} {'vs numpy':>8} {'vs torch':>8} {'vs memcpy new':>13}"
          + "".join(f" {name:>9}" for name in extra))
    for label, array in host_cases(args.size):
        view = ap.view(array)
        flat = np.ascontiguousarray(array).reshape(-1)
        source = flat.ctypes.data
        written = np.empty_like(flat)
        tensor = torch.from_numpy(array) if torch is not None else None
        functions = [
            view.copy,
            lambda: np.ascontiguousarray(array),
            (lambda: tensor.contiguous()) if tensor is not None else (lambda: None),
            memcpy_fresh(source, flat.nbytes),
            lambda: ctypes.memmove(written.ctypes.data, source, flat.nbytes),
        ] + [on_threads(1, on_path(path, view.copy)) for path in paths] \
          + ([on_threads(cpus, view.copy)] if args.paths else [])
        times = alternating_medians(functions, args.repeat)
        ours, numpy_rate, torch_rate, fresh, bare, *forced = (array.nbytes / t / 1e9
                                                             for t in times)
        torch_cells = (f"{torch_rate:>8.2f}", f"{ours / torch_rate:>7.2f}x") if tensor is not None \
            else (f"{'-':>8}", f"{'-':>8}")
        print(f"{label:<40} {ours:>9.2f} {numpy_rate:>8.2f} {torch_cells[0]} {fresh:>10.2f} "
              f"{bare:>8.2f} {ours / numpy_rate:>7.2f}x {torch_cells[1]} {ours / fresh:>12.0%}"
              + "".join(f" {rate:>9.2f}" for rate in forced[:len(paths)])
              + (f" {forced[len(paths) - 1] / fresh:>9.0%} {forced[-1]:>9.2f}" if paths else ""))


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
    print(f"{'case':<40} {'View.copy':>9} {'torch':>8} {'ratio':>7} {'bar':>6}  torch statement")
    # The strided layouts of issue 43, each beside PyTorch's .contiguous() of the same view.
    wide = device[: 4096 * 8192].view(4096, 8192) if count >= 4096 * 8192 else None
    small = device[: 512 * 512].view(512, 512)
    mid = device[: 2048 * 2048].view(2048, 2048) if count >= 2048 * 2048 else square
    cube = device[: 256 ** 3].view(256, 256, 256) if count >= 256 ** 3 else None
    quad = device[: 64 ** 4].view(64, 64, 64, 64) if count >= 64 ** 4 else None
    pixels = 2160 * 3840 * 3
    image = (device.view(torch.uint8)[:pixels].view(2160, 3840, 3) if count * 4 >= pixels
             else None)
    # (label, the View copied, PyTorch's copy of the same values, its statement, the ratio
    # issue 43 asks of it: 0.7 for any strided device copy, 0.8 for the 2048² transpose)
    def same(tensor, bar=ANY_STRIDED_BAR):
        return ap.view(tensor), tensor.contiguous, "tensor.contiguous()", bar
    strided = [(f"device transposed {small.shape[0]}x{small.shape[1]}", *same(small.T)),
               (f"device transposed {mid.shape[0]}x{mid.shape[1]}",
                *same(mid.T, TRANSPOSE_2048_BAR if mid.shape[0] == 2048 else ANY_STRIDED_BAR)),
               # PyTorch has no negative strides: its flip is the same copy
               ("device reversed rows (negative stride)", ap.view(mid)[::-1],
                lambda: mid.flip(0), "mid.flip(0)", ANY_STRIDED_BAR)]
    if wide is not None:
        strided.insert(0, ("device row-sliced 4096x4096 of 4096x8192", *same(wide[:, :4096])))
    if image is not None:
        strided.append(("device uint8 HWC -> CHW 2160x3840x3", *same(image.permute(2, 0, 1))))
    if cube is not None:
        strided.append(("device permuted 3-d (2, 0, 1) 256^3", *same(cube.permute(2, 0, 1))))
    if quad is not None:
        strided.append(("device permuted 4-d (3, 1, 2, 0) 64^4",
                        *same(quad.permute(3, 1, 2, 0))))
    from arrayport.gpu import staging

    def through_the_driver():   # the ring switched off: the driver stages pageable memory
        threshold, staging.THRESHOLD_BYTES = staging.THRESHOLD_BYTES, 1 << 62
        try:
            host_view.copy(device="cuda:0")
        finally:
            staging.THRESHOLD_BYTES = threshold

    rows = [   # (label, ours, PyTorch's, bytes, its statement, issue 43's bar or None)
        ("host -> device (pageable)", lambda: host_view.copy(device="cuda:0"),
         lambda: host.cuda(), host.nbytes, "host.cuda()", None),
        ("host -> device (pageable, no ring)", through_the_driver,
         lambda: host.cuda(), host.nbytes, "host.cuda()", None),
        ("host -> device (pinned)", lambda: pinned_view.copy(device="cuda:0"),
         lambda: pinned.cuda(), host.nbytes, "pinned.cuda()", 0.95),
        ("device -> host", lambda: device_view.copy(device="cpu"), lambda: device.cpu(),
         host.nbytes, "device.cpu()", 1.5),
        ("device -> device", device_view.copy, device.clone, host.nbytes, "device.clone()",
         0.9),
        (f"device transposed {side}x{side}", transposed_view.copy,
         lambda: square.T.contiguous(), square.nbytes, "square.T.contiguous()",
         ANY_STRIDED_BAR),
        (f"device transposed {side}x{side} -> host", lambda: transposed_view.copy(device="cpu"),
         lambda: square.T.cpu(), square.nbytes, "square.T.cpu()", 0.9),
    ]
    for label, view, theirs, statement, bar in strided:
        rows.append((label, view.copy, theirs, view.nbytes, statement, bar))
    for label, ours, theirs, nbytes, statement, bar in rows:
        times = alternating_medians([synced(ours), synced(theirs)], args.repeat)
        ours_rate, their_rate = (nbytes / t / 1e9 for t in times)
        ratio = ours_rate / their_rate
        print(f"{label:<40} {ours_rate:>9.2f} {their_rate:>8.2f} {ratio:>6.2f}x "
              f"{bar_verdict(ratio, bar):>6}  {statement}")


# Issue 43's bars, ratios to PyTorch on the same GPU: any strided device -> device copy,
# and the transposed 2048² float32 (the others are written beside their rows).
ANY_STRIDED_BAR, TRANSPOSE_2048_BAR = 0.7, 0.8


def bar_verdict(ratio: float, bar: float | None) -> str:
    """The bar column: '≥0.90' where the ratio meets the bar, '<0.90!' where it misses."""
    if bar is None:
        return ""
    return f"≥{bar:.2f}" if ratio >= bar else f"<{bar:.2f}!"


def main():
    args = arguments()
    if not args.gpu_only:
        host_table(args)
        streaming_table(args)
    gpu_table(args)


if __name__ == "__main__":
    main()
