"""xarray: labelled arrays around another library's array (the core judges one by its
.data), in the matrix, with their unusual kinds.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, call, module
from arrayport.libraries.samples import numpy_layout


def _make_xarray(base, layout):
    import xarray as xr
    return xr.DataArray(numpy_layout(base, layout))


def _xarray_via_view(x):
    import xarray as xr

    import arrayport
    return xr.DataArray(arrayport.to_numpy(x))


def xarray_kinds() -> list[Kind]:
    def labelled(data):
        return module("xarray").DataArray(data)

    def lazy():
        return labelled(module("dask.array").from_array(np.arange(4.0), chunks=2))

    return [
        Kind("xarray", "plain", lambda: labelled(np.arange(6.0).reshape(2, 3)),
             lambda x: x.values),
        Kind("xarray", "dask", lazy, lambda x: x.values, False, needs=("dask",)),
    ]


# ---- what arrayport.libraries reads -----------------------------------------------------------

# How a user reaches it through arrayport, as the matrix's arrayport route does.
ARRAYPORT_CALL = 'xr.DataArray(ap.to_numpy(x))'

make = _make_xarray
kinds = xarray_kinds
via_arrayport = _xarray_via_view


def routes():
    return {"__array__": call("xarray", "DataArray")}


# A labelled array around NumPy's; xarray has no DLPack of its own.
CHECK = (lambda a: module("xarray").DataArray(a), None, None)


def writable(x):
    from arrayport.libraries.results import is_writable
    return is_writable(x.data)


def host_values(x):
    from arrayport.libraries.results import to_host_numpy
    return to_host_numpy(x.data)
