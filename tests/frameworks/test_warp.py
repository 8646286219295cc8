"""NVIDIA Warp (wp.from_dlpack, wp.array's DLPack export and __array_interface__) on the
CPU with arrayport: both directions share memory, and each trap found probing Warp 1.19 is
pinned (see docs/interop-findings.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import arrayport as ap
from conftest import aligned

wp = pytest.importorskip("warp")
wp.config.quiet = True


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "negative"])
def test_to_warp_shares_memory(numbers, layout):
    data = {"contiguous": numbers, "transposed": numbers.T, "sliced": numbers[1:, ::2],
            "negative": numbers[::-1]}[layout]
    array = ap.to(data, "warp", copy=False)
    data[0, 0] = 100  # written on NumPy's side, read on Warp's
    np.testing.assert_array_equal(array.numpy(), data)


def test_view_of_an_array_shares_its_memory_both_ways():
    array = wp.array(np.arange(6, dtype=np.float32), device="cpu")
    view = ap.view(array)
    ap.to_numpy(view)[2] = 40
    assert array.numpy()[2] == 40
    array.fill_(3.0)  # written by Warp
    assert ap.to_numpy(view).tolist() == [3.0] * 6


def test_vector_arrays_view_as_their_scalars():
    array = wp.array(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=wp.vec3, device="cpu")
    view = ap.view(array)
    assert view.shape == (2, 3) and view.dtype.name == "float32"
    np.testing.assert_array_equal(ap.to_numpy(view), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("ndim", [0, 5])
def test_dimensions_warp_cannot_hold_are_refused(ndim, live):
    # Warp arrays have 1 to 4 dimensions; a 0-d import fails inside Warp with IndexError.
    with pytest.raises(ValueError, match="1 to 4 dimensions"):
        ap.to(np.zeros((1,) * ndim, np.float32), "warp")
    assert live.delta() == {}


@pytest.mark.parametrize("name", ["complex64", "float8_e4m3fn"])
def test_types_warp_lacks_are_refused(name):
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    with pytest.raises(TypeError, match="Warp has no type"):
        ap.to(np.zeros(2, dtype), "warp")


def test_read_only_memory_is_copied_unless_shared_on_purpose(numbers):
    numbers.flags.writeable = False
    array = ap.to(numbers, "warp")
    assert array.ptr != numbers.ctypes.data
    with pytest.raises(BufferError, match="read-only"):
        ap.to(numbers, "warp", copy=False)
    with pytest.warns(ap.ReadOnlySharedWarning):
        assert ap.to(numbers, "warp", readonly="share").ptr == numbers.ctypes.data


@pytest.mark.parametrize("name", ["bfloat16", "float16", "bool", "int8", "uint64", "float64"])
def test_dtypes_both_ways(name):
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    data = aligned((2, 3), dtype)
    array = ap.to(data, "warp", copy=False)
    back = ap.to_numpy(ap.view(array))
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back, data)


def test_indexed_arrays_offer_no_protocol():
    base = wp.array(np.arange(12, dtype=np.float32).reshape(3, 4), device="cpu")
    indexed = wp.indexedarray(base, [wp.array([0, 2], dtype=wp.int32, device="cpu")])
    with pytest.raises(TypeError, match="no array protocol"):
        ap.view(indexed)


def test_exports_are_released_when_the_array_goes(live, numbers):
    array = ap.to(numbers, "warp", copy=False)
    assert live.delta().get("exported") == 1
    del array
    assert live.delta().get("exported") is None
