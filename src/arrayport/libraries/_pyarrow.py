"""pyarrow at run time: the converters to pyarrow.Array and pyarrow.Tensor, and which of
them answers for a pyarrow type (``like``). Its cases for the command and the tests:
``arrayport.libraries.cases._pyarrow``."""

from __future__ import annotations

from arrayport import _core
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


TARGETS = {"pyarrow": _to_pyarrow, "pyarrow.Tensor": _to_pyarrow_tensor}


def like(tp):
    """A pyarrow.Tensor caller gets a Tensor back, any other pyarrow caller an Array."""
    return "pyarrow.Tensor" if tp.__name__ == "Tensor" else "pyarrow"
