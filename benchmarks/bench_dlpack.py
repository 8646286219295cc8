"""DLPack exchange speed: arrayport beside NumPy, PyTorch and tvm-ffi, in one run.

    python benchmarks/bench_dlpack.py [--repeat 15] [--number 20000]

Each row times one exchange of a small (3, 4) float32 array, and reports the median over
`--repeat` runs of `--number` calls, in nanoseconds per call (including the deallocation
of what the call returns). The "peer" column is the best-known path for the same input.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import timeit

import numpy as np

import arrayport as ap


def median_ns(statement, namespace, number, repeat):
    timer = timeit.Timer(statement, globals=namespace)
    timer.timeit(number // 10 or 1)  # warm-up
    return statistics.median(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def cases(namespace):
    """(label, arrayport statement, peer statement, needs) rows."""
    rows = [
        ("from_dlpack(numpy array)", "ap.from_dlpack(np_array)", "np.from_dlpack(np_array)", None),
        ("from_dlpack(torch tensor)", "ap.from_dlpack(torch_tensor)",
         "np.from_dlpack(torch_tensor)", "torch"),
        ("np.from_dlpack(View vs ndarray)", "np.from_dlpack(view)", "np.from_dlpack(np_array)", None),
        ("torch.from_dlpack(View vs ndarray)", "torch.from_dlpack(view)",
         "torch.from_dlpack(np_array)", "torch"),
        ("tvm_ffi.from_dlpack(View vs ndarray)", "tvm_ffi.from_dlpack(view)",
         "tvm_ffi.from_dlpack(np_array)", "tvm_ffi"),
    ]
    return [row for row in rows if row[3] is None or row[3] in namespace]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()

    namespace = {"ap": ap, "np": np, "np_array": np.ones((3, 4), np.float32)}
    namespace["view"] = ap.from_dlpack(namespace["np_array"])
    versions = [f"arrayport {ap.__version__}", f"numpy {np.__version__}"]
    for module in ("torch", "tvm_ffi"):
        if importlib.util.find_spec(module) is not None:
            namespace[module] = __import__(module)
            versions.append(f"{module} {getattr(namespace[module], '__version__', '?')}")
    if "torch" in namespace:
        namespace["torch_tensor"] = namespace["torch"].ones((3, 4))

    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
          + ", ".join(versions))
    print(f"# median of {args.repeat} x {args.number} calls, ns per call")
    print(f"{'case':<38} {'arrayport':>10} {'peer':>10} {'ratio':>7}  peer statement")
    for label, ours, peer, _ in cases(namespace):
        ours_ns = median_ns(ours, namespace, args.number, args.repeat)
        peer_ns = median_ns(peer, namespace, args.number, args.repeat)
        print(f"{label:<38} {ours_ns:>10.0f} {peer_ns:>10.0f} {ours_ns / peer_ns:>7.2f}  {peer}")
    missing = [m for m in ("torch", "tvm_ffi") if m not in namespace]
    if missing:
        print(f"# not installed, rows skipped: {', '.join(missing)}")


if __name__ == "__main__":
    main()
