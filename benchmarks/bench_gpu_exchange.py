"""CUDA tensors in and out of arrayport, beside the peers, per call (issue 42).

    python benchmarks/bench_gpu_exchange.py [--repeat 15] [--number 5000]

On a machine whose PyTorch sees a CUDA GPU, each row times arrayport and every peer that
is installed, in alternation, in one run (ns per call, medians), and prints arrayport's
ratio to each:
- import a CUDA tensor: ``ap.view(t)`` / ``tvm_ffi.from_dlpack(t)`` / cuda-core's
  ``StridedMemoryView.from_dlpack(t, stream_ptr=-1)``;
- with a consumer stream: ``ap.view(t, stream=s)`` / cuda-core's ``from_dlpack(t,
  stream_ptr=s)``;
- a device View to PyTorch: ``ap.to_torch(v)`` / ``torch.from_dlpack(v)``;
- CuPy to PyTorch: ``ap.to_torch(c)`` / ``torch.from_dlpack(c)``;
- a CUDA Array Interface import with a producer stream (a CuPy array's, or a Numba
  array's): ``ap.view(x, stream=s)`` / cuda-core's ``from_cuda_array_interface``.
The GPU rows' targets (issue 42): every ratio ≤ 1.0 against the row's best peer.

Without a CUDA GPU the same rows run on the CPU-side paths that exist there (a CPU
tensor; no streams), so the script runs anywhere; the GPU's figures come from a GPU run.
What each exchange asks of the driver is counted without a GPU by
benchmarks/bench_driver_calls.py, on the simulator.
"""

from __future__ import annotations

import importlib.util
import platform
import statistics
import timeit

import numpy as np

import arrayport as ap
from _timing import arguments, cpu_model


def timed(statements: dict[str, str], namespace: dict, number: int, repeat: int):
    """{name: median ns per call}, the statements timed in alternation."""
    timers = {name: timeit.Timer(statement, globals=namespace)
              for name, statement in statements.items()}
    for timer in timers.values():
        timer.timeit(number // 10 or 1)   # warm-up
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(repeat):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(number))
    return {name: statistics.median(taken) / number * 1e9 for name, taken in samples.items()}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def gpu_rows(namespace: dict) -> list[tuple[str, dict[str, str]]]:
    """(row, {who: statement}), arrayport first, for a machine with a CUDA GPU."""
    torch = namespace["torch"]
    namespace["t"] = torch.ones((3, 4), device="cuda")
    namespace["s"] = torch.cuda.Stream().cuda_stream
    namespace["v"] = ap.view(namespace["t"])
    rows = [
        ("import a CUDA tensor", {"ap.view": "ap.view(t)"}),
        ("with a consumer stream", {"ap.view": "ap.view(t, stream=s)"}),
        ("device View to PyTorch", {"ap.to_torch": "ap.to_torch(v)",
                                    "torch.from_dlpack": "torch.from_dlpack(v)"}),
    ]
    if "tvm_ffi" in namespace:
        rows[0][1]["tvm_ffi.from_dlpack"] = "tvm_ffi.from_dlpack(t)"
    if "SMV" in namespace:
        rows[0][1]["cuda.core from_dlpack"] = "SMV.from_dlpack(t, stream_ptr=-1)"
        rows[1][1]["cuda.core from_dlpack"] = "SMV.from_dlpack(t, stream_ptr=s)"
    if installed("cupy"):
        import cupy
        namespace["c"] = cupy.ones((3, 4), dtype=cupy.float32)
        namespace["cai"] = namespace["c"]
        rows.append(("CuPy to PyTorch", {"ap.to_torch": "ap.to_torch(c)",
                                         "torch.from_dlpack": "torch.from_dlpack(c)"}))
        cai = {"ap.view": "ap.view(cai, stream=s)"}
        if "SMV" in namespace:
            cai["cuda.core"] = "SMV.from_cuda_array_interface(cai, stream_ptr=s)"
        rows.append(("CUDA Array Interface import, stream", cai))
    return rows


def cpu_rows(namespace: dict) -> list[tuple[str, dict[str, str]]]:
    """The same rows where there is no CUDA GPU: CPU data, no streams."""
    rows = []
    if "torch" in namespace:
        torch = namespace["torch"]
        namespace["t"] = torch.ones((3, 4))
        namespace["v"] = ap.view(np.ones((3, 4), np.float32))
        first = {"ap.view": "ap.view(t)"}
        if "tvm_ffi" in namespace:
            first["tvm_ffi.from_dlpack"] = "tvm_ffi.from_dlpack(t)"
        if "SMV" in namespace:
            first["cuda.core from_dlpack"] = "SMV.from_dlpack(t, stream_ptr=-1)"
        rows.append(("import a CPU tensor", first))
        rows.append(("a CPU View to PyTorch", {"ap.to_torch": "ap.to_torch(v)",
                                               "torch.from_dlpack": "torch.from_dlpack(v)"}))
    return rows


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = {"ap": ap, "np": np}
    versions = [f"arrayport {ap.__version__}", f"numpy {np.__version__}"]
    for module in ("torch", "tvm_ffi", "cupy"):
        if installed(module):
            namespace[module] = __import__(module)
            versions.append(f"{module} {getattr(namespace[module], '__version__', '?')}")
    if installed("cuda.core"):
        try:
            from cuda.core.utils import StridedMemoryView
            namespace["SMV"] = StridedMemoryView
            versions.append("cuda-core")
        except ImportError:
            pass
    torch = namespace.get("torch")
    on_gpu = torch is not None and torch.cuda.is_available()
    where = (f"GPU: {torch.cuda.get_device_name(0)}" if on_gpu
             else "no CUDA GPU: CPU-side paths only")
    print(f"# {cpu_model()}, Python {platform.python_version()}; {where}")
    print(f"# {', '.join(versions)}")
    print(f"# median of {args.repeat} x {args.number} calls, ns per call; ratio = arrayport "
          f"/ peer")
    rows = gpu_rows(namespace) if on_gpu else cpu_rows(namespace)
    if not rows:
        print("# PyTorch is not installed: no rows")
    for label, statements in rows:
        medians = timed(statements, namespace, args.number, args.repeat)
        ours_name = next(iter(statements))
        ours = medians[ours_name]
        peers = "; ".join(f"{name} {ns:.0f} ({ours / ns:.2f})" for name, ns in medians.items()
                          if name != ours_name)
        print(f"{label:<38} {ours_name} {ours:>8.0f}   {peers or '(no peer installed)'}")


if __name__ == "__main__":
    main()
