"""The C side and the converters: the DLPack C exchange API from C, and ap.view /
ap.to_torch / ap.to_numpy beside tvm-ffi, torch.from_dlpack and np.from_dlpack, in one run.

    python benchmarks/bench_exchange.py [--repeat 15] [--number 20000]

The C loop builds tests/helpers/capi_consumer.c (a C compiler is needed; the row is
skipped without one) and times managed_tensor_from_py_object_no_sync + deleter per tensor,
for PyTorch's table and View's own; the C row's "peer" is PyTorch's Python-level
``__dlpack__`` call plus freeing the capsule. Targets (issue 5): C loop ≤ 80 ns per torch
tensor; ap.view(torch) ≤ 0.6× tvm_ffi.from_dlpack(torch); ap.to_torch(np) ≤ 0.5×
torch.from_dlpack(np); ap.to_numpy(torch) ≤ 0.5× np.from_dlpack(torch).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from _timing import arguments, median_ns, namespace_with_libraries, print_table

ROWS = [
    ("view(torch) vs tvm_ffi.from_dlpack", "ap.view(torch_tensor)",
     "tvm_ffi.from_dlpack(torch_tensor)", "tvm_ffi"),
    # issue 53: 1-D, and a 2-D view (a reshape: a tensor with autograd metadata, whose
    # requires_grad PyTorch's getter answered in 262 instructions)
    ("view(torch 1-D) vs tvm_ffi", "ap.view(torch_vector)",
     "tvm_ffi.from_dlpack(torch_vector)", "tvm_ffi"),
    ("view(torch reshaped 2-D) vs tvm_ffi", "ap.view(torch_reshaped)",
     "tvm_ffi.from_dlpack(torch_reshaped)", "tvm_ffi"),
    ("to_torch(np) vs torch.from_dlpack", "ap.to_torch(np_array)",
     "torch.from_dlpack(np_array)", "torch"),
    ("to_numpy(torch) vs np.from_dlpack", "ap.to_numpy(torch_tensor)",
     "np.from_dlpack(torch_tensor)", "torch"),
    ("tvm_ffi.from_dlpack(View vs torch)", "tvm_ffi.from_dlpack(view)",
     "tvm_ffi.from_dlpack(torch_tensor)", "tvm_ffi"),
]


def c_consumer():
    """The test suite's C consumer, built in a temporary folder; None without a compiler."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
    from producer import build_extension, compiler
    if compiler() is None:
        return None
    return build_extension("capi_consumer", Path(tempfile.mkdtemp(prefix="ap_bench_")))


def print_c_loop(consumer, namespace, args):
    print(f"{'C loop: exchange API import+delete':<38} {'ns/tensor':>10} "
          f"{'py __dlpack__':>13}")
    sources = [("torch tensor", namespace.get("torch_tensor"), "torch_tensor.__dlpack__()"),
               ("arrayport View", namespace["view"], "view.__dlpack__(max_version=(1, 3))")]
    for label, source, peer in sources:
        if source is None:
            continue
        c_ns = statistics.median(consumer.exchange_loop(source, args.number * 10)
                                 for _ in range(args.repeat))
        peer_ns = median_ns(peer, namespace, args.number, args.repeat)
        print(f"{'  ' + label:<38} {c_ns:>10.1f} {peer_ns:>13.0f}")


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = namespace_with_libraries()
    if "torch" in namespace:
        namespace["torch_vector"] = namespace["torch"].ones(12)
        namespace["torch_reshaped"] = namespace["torch"].ones(12).reshape(3, 4)
    print_table(ROWS, namespace, args)
    consumer = c_consumer()
    if consumer is None:
        print("# no C compiler: C loop skipped")
    else:
        print_c_loop(consumer, namespace, args)


if __name__ == "__main__":
    main()
