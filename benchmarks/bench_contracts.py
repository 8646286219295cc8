"""Contracts for library authors: ap.require and @ap.accepts beside hand-written NumPy checks.

    python benchmarks/bench_contracts.py [--repeat 15] [--number 20000]

``require(np_array, dtype="float32", ndim=2)`` with every constraint met, against what an
author writes by hand (``np.asarray(x, dtype=np.float32)`` and an ndim check); the same with
a Spec made once; and the per-call overhead of ``@ap.accepts`` on a two-argument function
against the same function undecorated, in one run. Medians, ns per call.
"""

from __future__ import annotations

from _timing import arguments, namespace_with_libraries, print_table


def hand_written(x, np):
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected 2 dimensions, got {x.ndim}")
    return x


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = namespace_with_libraries()
    ap, np = namespace["ap"], namespace["np"]
    namespace["hand_written"] = hand_written
    namespace["spec"] = ap.Spec(dtype="float32", ndim=2)
    namespace["other"] = np.ones(4, np.float32)

    def plain(x, y):
        return x

    @ap.accepts(x=ap.Spec(dtype="float32", ndim=2), y=ap.Spec(dtype="float32"))
    def checked(x, y):
        return x

    @ap.accepts(x=ap.Spec(dtype="float32", ndim=2), returns="like:x")
    def like(x):
        return x

    namespace.update(plain=plain, checked=checked, like=like, identity=lambda x: x)
    rows = [
        ("require(np, dtype, ndim) vs by hand", "ap.require(np_array, dtype='float32', ndim=2)",
         "hand_written(np_array, np)", None),
        ("require(np, spec=) vs by hand", "ap.require(np_array, spec=spec)",
         "hand_written(np_array, np)", None),
        ("require(torch, dtype, ndim) vs by hand", "ap.require(torch_tensor, dtype='float32', "
         "ndim=2)", "hand_written(torch_tensor, np)", "torch"),
        ("@accepts two arguments vs undecorated", "checked(np_array, other)",
         "plain(np_array, other)", None),
        ("@accepts returns='like:x' (numpy)", "like(np_array)", "identity(np_array)", None),
        ("@accepts returns='like:x' (torch)", "like(torch_tensor)", "identity(torch_tensor)",
         "torch"),
    ]
    print_table(rows, namespace, args)


if __name__ == "__main__":
    main()
