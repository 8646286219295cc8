"""Arrow's other readers and writers as arrayport's peers (issue 35): nanoarrow, whose
arrays speak only the Arrow PyCapsule protocol (no __dlpack__, no __array__), and Polars,
whose Series take Views and are viewed back — each both ways, zero-copy, values checked
and memory shared."""

import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from optional import optional_module

na = optional_module("nanoarrow")
pl = optional_module("polars")


@pytest.mark.skipif(na is None, reason="needs nanoarrow (the [test] extra)")
def test_nanoarrow_arrays_are_viewed_and_take_views_both_zero_copy():
    values = np.arange(6, dtype=np.int32)
    array = na.Array(ap.view(values))                  # nanoarrow reads the View's export
    assert not hasattr(array, "__dlpack__") and not hasattr(array, "__array__")
    view = ap.view(array)                              # and arrayport reads nanoarrow's
    assert view.protocol == "arrow" and view.readonly
    assert view.ptr == values.ctypes.data              # the same memory, both ways
    values[2] = 99
    assert np.asarray(view).tolist() == [0, 1, 99, 3, 4, 5]
    assert ap.to_numpy(array).tolist() == [0, 1, 99, 3, 4, 5]
    del view, array
    gc.collect()
    assert _core.live_arrow_arrays() == 0 and _core.live_counts()["exported"] == 0


@pytest.mark.skipif(na is None, reason="needs nanoarrow (the [test] extra)")
def test_nanoarrow_nulls_are_refused():
    with pytest.raises(BufferError, match="has 1 null"):
        ap.view(na.Array([1, None, 3], na.int64()))


@pytest.mark.skipif(pl is None, reason="needs polars (the [interop] extra)")
def test_polars_series_take_views_and_are_viewed_back_zero_copy():
    values = np.arange(5, dtype=np.float64)
    series = pl.Series(ap.view(values))
    assert series.to_list() == [0.0, 1.0, 2.0, 3.0, 4.0]
    back = ap.view(series)
    assert back.ptr == values.ctypes.data              # Polars kept the View's memory
    values[0] = 7.0
    assert series[0] == 7.0
    assert ap.to_numpy(series).tolist() == [7.0, 1.0, 2.0, 3.0, 4.0]
