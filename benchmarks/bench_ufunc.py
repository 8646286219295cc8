"""NumPy functions on Views against the same functions on ndarrays, in one run.

    python benchmarks/bench_ufunc.py [--repeat 15] [--number 20000]

What a View adds to a NumPy call: NumPy's override dispatch (``__array_ufunc__`` /
``__array_function__``), an ndarray over each View's memory, and the result wrapped as a
View. Float64 arrays of 10, 10^3, 10^4 and 10^6 elements; ``--number`` is the call count
for the smallest size and shrinks with the array so each timing takes about as long.
Medians in nanoseconds per call, including freeing the result.
"""

from __future__ import annotations

import copy

import numpy as np

import arrayport as ap
from _timing import arguments, namespace_with_libraries, print_table

SIZES = (10, 1_000, 10_000, 1_000_000)
class DispatchFloor:
    """The least any __array_ufunc__ costs: NumPy's override dispatch into a Python method
    that returns a result computed beforehand."""

    def __init__(self, result):
        self.result = result

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self.result


ROWS = [
    ("np.add(view, view)", "np.add(v, w)", "np.add(a, b)"),
    ("np.add(view, 1.5)", "np.add(v, 1.5)", "np.add(a, 1.5)"),
    ("np.add(view, view, out=view)", "np.add(v, w, out=o)", "np.add(a, b, out=c)"),
    ("np.exp(view)", "np.exp(v)", "np.exp(a)"),
    ("np.add.reduce(view)", "np.add.reduce(v)", "np.add.reduce(a)"),
    ("np.mean(view)", "np.mean(v)", "np.mean(a)"),
    ("np.concatenate([view, view])", "np.concatenate([v, w])", "np.concatenate([a, b])"),
]


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = namespace_with_libraries()
    for index, size in enumerate(SIZES):
        a, b, c = (np.random.default_rng(i).random(size) for i in range(3))
        namespace.update(a=a, b=b, c=c, v=ap.view(a), w=ap.view(b), o=ap.view(c))
        sized = copy.copy(args)
        sized.number = max(3, args.number * 10 // max(10, size // 100))
        namespace["floor"] = DispatchFloor(a)
        rows = [(f"{label} n={size:.0e}".replace("e+0", "e"), ours, peer, None)
                for label, ours, peer in ROWS]
        if index == 0:
            rows.append(("dispatch floor vs np.add(a, b)", "np.add(floor, floor)",
                         "np.add(a, b)", None))
        print_table(rows, namespace, sized, header=index == 0)


if __name__ == "__main__":
    main()
