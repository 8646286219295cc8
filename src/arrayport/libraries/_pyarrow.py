"""pyarrow: the converters to pyarrow.Array and pyarrow.Tensor, its tensors in the matrix, its
consumer of Arrow's capsules (``pa.array``), its unusual arrays (nulls, bit-packed bools,
chunks…)."""

from __future__ import annotations

import numpy as np

from arrayport import _core
from arrayport.libraries.toolkit import Kind, NotOffered, call, module
from arrayport.libraries.samples import numpy_layout
from arrayport.convert_steps import check_copy, copied, placed, no_type_for
from arrayport.dtypes import DTypeCode


def _pyarrow_type(view, who):
    import pyarrow as pa

    dtype = view.dtype
    if dtype.code in (DTypeCode.COMPLEX, DTypeCode.BOOL) or not dtype.numpy_native:
        raise no_type_for(who, "Arrow", dtype, "fixed-width type")
    return pa.from_numpy_dtype(dtype.to_numpy())


def _to_pyarrow(x, *, copy=None):
    """A ``pyarrow.Array``: one dimension as a primitive array, n dimensions as nested
    fixed-size lists (rows of the first dimension, as arrayport's Arrow export gives them;
    ``pyarrow.Tensor`` is the other n-D target). Arrow arrays are immutable, so read-only
    memory is shared; a layout that is not C-contiguous is copied."""
    import pyarrow as pa

    check_copy(copy, "to(pyarrow)")
    view = placed(_core.view_or_copy(x, copy=copy), None, copy)
    if view.ndim == 0:
        raise ValueError("to(pyarrow): an Arrow array is a column, and the data is 0-d; "
                         "reshape it to (1,)")
    arrow_type = _pyarrow_type(view, "to(pyarrow)")
    if not view.is_c_contiguous:
        view = copied(view, copy, "to(pyarrow)", "Arrow arrays are contiguous")
    if view.ndim > 1:
        return pa.array(view)            # the View's __arrow_c_array__: nested lists, shared
    return pa.Array.from_buffers(arrow_type, view.size, [None, pa.py_buffer(view)])


def _to_pyarrow_tensor(x, *, copy=None):
    """A ``pyarrow.Tensor`` (n-dimensional, strided, immutable)."""
    import pyarrow as pa

    check_copy(copy, "to(pyarrow.Tensor)")
    view = placed(_core.view_or_copy(x, copy=copy), None, copy)
    _pyarrow_type(view, "to(pyarrow.Tensor)")
    if any(s < 0 for s in view.element_strides):
        view = copied(view, copy, "to(pyarrow.Tensor)",
                          "Arrow tensors cannot hold negative strides")
    return pa.Tensor.from_numpy(_core.to_numpy(view))


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

TARGETS = {"pyarrow": _to_pyarrow, "pyarrow.Tensor": _to_pyarrow_tensor}
make = _make_pyarrow
kinds = _pyarrow_kinds


def like(tp):
    """A pyarrow.Tensor caller gets a Tensor back, any other pyarrow caller an Array."""
    return "pyarrow.Tensor" if tp.__name__ == "Tensor" else "pyarrow"


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
