"""DLPack exchange speed: arrayport beside NumPy, PyTorch and tvm-ffi, in one run.

    python benchmarks/bench_dlpack.py [--repeat 15] [--number 20000]

Each row times one exchange of a small (3, 4) float32 array, and reports the median over
`--repeat` runs of `--number` calls, in nanoseconds per call (including the deallocation
of what the call returns). The "peer" column is the best-known path for the same input.
"""

from __future__ import annotations

from _timing import arguments, namespace_with_libraries, print_table

ROWS = [
    ("from_dlpack(numpy array)", "ap.from_dlpack(np_array)", "np.from_dlpack(np_array)", None),
    ("from_dlpack(torch tensor)", "ap.from_dlpack(torch_tensor)",
     "np.from_dlpack(torch_tensor)", "torch"),
    ("np.from_dlpack(View vs ndarray)", "np.from_dlpack(view)", "np.from_dlpack(np_array)", None),
    ("torch.from_dlpack(View vs ndarray)", "torch.from_dlpack(view)",
     "torch.from_dlpack(np_array)", "torch"),
    ("tvm_ffi.from_dlpack(View vs ndarray)", "tvm_ffi.from_dlpack(view)",
     "tvm_ffi.from_dlpack(np_array)", "tvm_ffi"),
]


def main():
    args = arguments(__doc__.splitlines()[0])
    print_table(ROWS, namespace_with_libraries(), args)


if __name__ == "__main__":
    main()
