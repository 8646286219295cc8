"""The host strided-copy kernel against NumPy, on arbitrary strided layouts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrayport as ap


@st.composite
def strided_arrays(draw):
    dtype = draw(st.sampled_from(["uint8", "int16", "float32", "float64", "complex128"]))
    ndim = draw(st.integers(0, 5))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    padded_shape = [extent * 2 + 1 for extent in shape]
    base = np.arange(int(np.prod(padded_shape))).astype(dtype).reshape(padded_shape)
    slices = tuple(slice(draw(st.integers(0, 1)), None, draw(st.sampled_from([1, 2, -1, -2])))
                   for _ in shape)
    view = base[slices] if slices else base  # base[()] would be a scalar
    if ndim > 1 and draw(st.booleans()):
        view = view.transpose(draw(st.permutations(range(ndim))))
    return view


@settings(max_examples=300, deadline=None)
@given(strided_arrays())
def test_host_copy_matches_numpy(array):
    copy = ap.from_dlpack(array).host_copy()
    assert copy.is_c_contiguous and copy.is_copy and not copy.readonly
    result = ap.to_numpy(copy)
    assert result.shape == array.shape and result.dtype == array.dtype
    np.testing.assert_array_equal(result, array)
    assert result.tobytes() == np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("shape", [(1000, 3), (3, 1000), (7, 1, 9, 1, 11)])
def test_large_transposed_copies(shape):
    array = np.random.default_rng(0).standard_normal(shape).T[::-1]
    np.testing.assert_array_equal(ap.to_numpy(ap.from_dlpack(array, copy=True)), array)
