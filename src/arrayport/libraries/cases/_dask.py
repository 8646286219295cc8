"""Dask: lazy arrays, a producer only (arrayport refuses them until computed; the converters
compute them when asked for a copy), in the matrix, with their unusual kinds.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, module
from arrayport.libraries.samples import numpy_layout


def _make_dask(base, layout):
    import dask.array as da
    # A lazy array over the NumPy layout: no memory of its own until computed.
    return da.from_array(numpy_layout(base, layout), chunks=-1)


def dask_kinds() -> list[Kind]:
    def lazy():
        return module("dask.array").from_array(np.arange(6.0).reshape(2, 3), chunks=1) * 2

    return [Kind("dask.array", "lazy", lazy, lambda d: d.compute(), False)]


# ---- what arrayport.libraries reads -----------------------------------------------------------

make = _make_dask
kinds = dask_kinds
