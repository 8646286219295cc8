"""nanoarrow: arrays that speak only Arrow's PyCapsule interface (no DLPack, buffer or
``__array__``) — its arrays in the matrix (rows of fixed-size lists), its consumer,
``arrayport check``'s factory.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import arrow_rows, call, module


def _nanoarrow_column(rows):
    """A nanoarrow Array over ``rows`` (2-D, C-contiguous): a fixed-size list per row over
    the values' own buffer, no copy; a 1-D ``rows`` is the values themselves."""
    na = module("nanoarrow")
    values = na.c_array(rows.reshape(-1))
    if rows.ndim == 1:
        return na.Array(values)
    return na.Array(na.c_array_from_buffers(na.fixed_size_list(values.schema, rows.shape[1]),
                                            rows.shape[0], [None], children=[values]))


def _make_nanoarrow(base, layout):
    return _nanoarrow_column(arrow_rows(base, layout, "nanoarrow"))


def _view(x):
    import arrayport
    return arrayport.view(x)


# ---- what arrayport.libraries reads -----------------------------------------------------------

# How a user reaches it through arrayport, as the matrix's arrayport route does.
ARRAYPORT_CALL = "na.Array(ap.view(x))"

make = _make_nanoarrow
via_arrayport = call("nanoarrow", "Array", _view)


def routes():
    return {"arrow": call("nanoarrow", "Array")}


# No from_dlpack and no DLPack export: arrayport check runs nanoarrow over Arrow's
# capsules (its consumer there is its arrow route).
CHECK = (_nanoarrow_column, None, None)


def writable(x):
    return False


def host_values(x):
    """At most one chunk: read through arrayport (None); several: each read, then joined."""
    if x.n_chunks <= 1:
        return None
    import arrayport
    return np.concatenate([arrayport.to_numpy(arrayport.view(chunk), copy=True)
                           for chunk in x.iter_chunks()])
