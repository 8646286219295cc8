"""pyarrow: the converters to pyarrow.Array and pyarrow.Tensor, its tensors in the matrix,
its consumer of Arrow's capsules (``pa.array``), its unusual arrays (nulls, bit-packed
bools, chunks…).

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._pyarrow``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered, call, module
from arrayport.libraries.samples import numpy_layout


def _make_pyarrow(base, layout):
    import pyarrow as pa
    # pyarrow.Tensor is Arrow's n-d array: immutable, so read-only by nature.
    if base.dtype == np.bool_:
        raise NotOffered("pyarrow.Tensor has no bool type (it stores NumPy bools as uint8)")
    try:
        return pa.Tensor.from_numpy(numpy_layout(base, layout))
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise NotOffered(f"pyarrow.Tensor: {exc}") from None


def _pyarrow_kinds() -> list[Kind]:
    def pa():
        import pyarrow as module
        return module

    def zero_copy_numpy(array):
        return array.to_numpy(zero_copy_only=True)

    return [
        Kind("pyarrow", "plain", lambda: pa().array([1, 2, 3], type=pa().int64()),
             zero_copy_numpy, False),
        Kind("pyarrow", "sliced", lambda: pa().array(list(range(10)), type=pa().int32()).slice(3, 4),
             zero_copy_numpy, False),
        Kind("pyarrow", "nulls", lambda: pa().array([1, None, 3]), None, False),
        Kind("pyarrow", "bool", lambda: pa().array([True, False, True]), None, False),
        Kind("pyarrow", "chunked", lambda: pa().chunked_array([[1, 2], [3]]),
             lambda a: a.to_numpy(), False),
        Kind("pyarrow", "tensor", lambda: pa().Tensor.from_numpy(np.arange(6.0).reshape(2, 3)),
             lambda t: t.to_numpy(), False),
        Kind("pyarrow", "timestamps", lambda: pa().array([0, 1], type=pa().timestamp("s")),
             None, False),
    ]


# ---- what arrayport.libraries reads -----------------------------------------------------------

# How a user reaches it through arrayport, as the matrix's arrayport route does.
ARRAYPORT_CALL = 'ap.to(x, "pyarrow.Tensor")'


make = _make_pyarrow
kinds = _pyarrow_kinds


def routes():
    return {"arrow": call("pyarrow", "array")}


def via_arrayport(x):
    import arrayport
    return arrayport.to(x, "pyarrow.Tensor")


# Arrow tensors are immutable: read-only by nature.
CHECK = (lambda a: module("pyarrow").Tensor.from_numpy(a), None,
         lambda a: module("pyarrow").Tensor.from_numpy(a))


def writable(x):
    return False


def _rows_of_lists(x) -> bool:
    import pyarrow as pa
    return isinstance(x, pa.Array) and pa.types.is_fixed_size_list(x.type)


def address_of(x):
    # pyarrow's __dlpack__ refuses rows of fixed-size lists: those are read through Arrow.
    import arrayport
    if _rows_of_lists(x):
        return arrayport.View.from_arrow(x.__arrow_c_array__()).ptr
    return arrayport.view(x).ptr


def host_values(x):
    if _rows_of_lists(x):  # one n-d array, as arrayport reads it
        import arrayport
        return arrayport.View.from_arrow(x.__arrow_c_array__())
    return np.array(x.to_numpy()) if hasattr(x, "to_numpy") else None
