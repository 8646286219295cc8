"""ap.view speed on every kind of input, beside NumPy's np.asarray / memoryview, in one run.

    python benchmarks/bench_view.py [--repeat 15] [--number 20000]

Imports: ap.view(x) against np.asarray(x) for a NumPy array, a PyTorch tensor, bytes and
an object carrying an __array_interface__ dict (and memoryview(x) where x has a buffer).
Exports: NumPy consuming a View through each protocol, against the same on an ndarray.
Medians in nanoseconds per call, including freeing what the call returns. Note that
np.asarray(ndarray) returns its argument unchanged (no object is made).
"""

from __future__ import annotations

from _timing import arguments, namespace_with_libraries, print_table


class InterfaceHolder:
    """A hand-written producer: an __array_interface__ dict as an instance attribute."""

    def __init__(self, array):
        self.__array_interface__ = array.__array_interface__
        self.array = array


ROWS = [
    ("view(numpy array)", "ap.view(np_array)", "np.asarray(np_array)", None),
    ("view(torch tensor)", "ap.view(torch_tensor)", "np.asarray(torch_tensor)", "torch"),
    ("view(bytes)", "ap.view(raw_bytes)", "np.asarray(raw_bytes)", None),
    ("view(bytes) vs memoryview", "ap.view(raw_bytes)", "memoryview(raw_bytes)", None),
    ("view(__array_interface__ object)", "ap.view(holder)", "np.asarray(holder)", None),
    ("np.asarray(View vs interface object)", "np.asarray(view)", "np.asarray(holder)", None),
    ("memoryview(View vs ndarray)", "memoryview(view)", "memoryview(np_array)", None),
    ("View.__array_interface__ vs ndarray's", "view.__array_interface__",
     "np_array.__array_interface__", None),
    # Zero-copy layout operations (issue 19): metadata only, beside NumPy's own.
    ("view[1:, ::-2] vs ndarray[1:, ::-2]", "view[1:, ::-2]", "np_array[1:, ::-2]", None),
    ("view.T vs ndarray.T", "view.T", "np_array.T", None),
    ("view.reshape(4, 3) vs ndarray's", "view.reshape(4, 3)", "np_array.reshape(4, 3)", None),
]


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = namespace_with_libraries()
    namespace["raw_bytes"] = bytes(48)
    namespace["holder"] = InterfaceHolder(namespace["np_array"])
    print_table(ROWS, namespace, args)


if __name__ == "__main__":
    main()
