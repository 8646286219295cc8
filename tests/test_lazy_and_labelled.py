"""Dask arrays (lazy) and xarray objects (labels around an array) as producers: a Dask
array has no memory until computed and its __array__ computes the whole graph silently, so
arrayport refuses it unless a copy is asked for with copy=True; an xarray DataArray is
viewed through the array in its .data — zero-copy when that is in memory, refused when it
is a Dask array."""

from __future__ import annotations

import numpy as np
import pytest

import arrayport as ap
from optional import optional_module

da = optional_module("dask.array")
xr = optional_module("xarray")
needs_dask = pytest.mark.skipif(da is None, reason="needs dask (not installed)")
needs_xarray = pytest.mark.skipif(xr is None, reason="needs xarray (pip install -e '.[interop]')")


class CountingSource:
    """An array-like Dask reads chunks from, counting the reads (a compute reads it)."""

    def __init__(self, array):
        self.array, self.reads = array, 0
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, key):
        self.reads += 1
        return self.array[key]


@needs_dask
@pytest.mark.parametrize("call", ["view", "to_numpy", "to_torch", "require", "to(jax)"])
def test_lazy_dask_arrays_are_refused_without_computing(call, live):
    source = CountingSource(np.arange(12.0).reshape(3, 4))
    lazy = da.from_array(source, chunks=2)
    reads = source.reads  # from_array reads an empty slice for its metadata
    convert = {"view": ap.view, "to_numpy": ap.to_numpy, "to_torch": ap.to_torch,
               "require": ap.require, "to(jax)": lambda x: ap.to(x, "jax")}[call]
    if call in ("to_torch", "to(jax)"):
        pytest.importorskip({"to_torch": "torch", "to(jax)": "jax"}[call])
    with pytest.raises(ap.NeedsCopy, match="lazy Dask array"):
        convert(lazy)
    assert source.reads == reads  # nothing was computed
    assert live.delta() == {}     # and nothing held


@needs_dask
def test_an_explicit_copy_computes_a_dask_array():
    lazy = da.from_array(np.arange(12.0).reshape(3, 4), chunks=2) * 2
    np.testing.assert_array_equal(ap.to_numpy(lazy, copy=True), np.arange(12.0).reshape(3, 4) * 2)
    with pytest.raises(BufferError):
        ap.to_numpy(lazy, copy=False)


@needs_xarray
def test_an_in_memory_data_array_is_viewed_zero_copy():
    data = np.arange(6.0).reshape(2, 3)
    labelled = xr.DataArray(data, dims=("y", "x"))
    view = ap.view(labelled)
    assert view.ptr == data.ctypes.data and not view.readonly
    ap.to_numpy(view)[1, 2] = 50  # written through arrayport, read through xarray
    assert float(labelled[1, 2]) == 50


@needs_xarray
@needs_dask
def test_a_dask_backed_data_array_is_refused_until_asked_to_copy():
    source = CountingSource(np.arange(6.0).reshape(2, 3))
    labelled = xr.DataArray(da.from_array(source, chunks=1), dims=("y", "x"))
    reads = source.reads
    with pytest.raises(ap.NeedsCopy, match="xarray.*lazy Dask array"):
        ap.view(labelled)
    assert source.reads == reads
    np.testing.assert_array_equal(ap.to_numpy(labelled, copy=True), source.array)


@needs_xarray
def test_a_data_array_can_be_made_from_a_view():
    data = np.arange(4.0)
    labelled = xr.DataArray(ap.to_numpy(ap.view(data)), dims=("x",))
    data[0] = 9
    assert float(labelled[0]) == 9
