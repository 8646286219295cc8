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


# The kernel's vector paths work in blocks of one cache line by one cache line (16 x 16
# four-byte or 8 x 8 eight-byte elements), prefetch four blocks ahead and stream results
# of 8 MiB and more; these layouts cross every block edge, leftover row and column.
BLOCK_LAYOUTS = [
    ((16, 16), (1, 0)), ((17, 33), (1, 0)), ((64, 80), (1, 0)), ((100, 3), (1, 0)),
    ((3, 100), (1, 0)), ((5, 37, 19), (2, 0, 1)), ((19, 37, 5), (1, 2, 0)),
    ((8, 24, 40), (0, 2, 1)), ((33, 2, 47), (2, 1, 0)), ((4, 5, 6, 7), (3, 1, 0, 2)),
    # Long destination rows are walked in bands of 8 blocks (partial last band), short
    # ones down the columns of blocks.
    ((1100, 300), (1, 0)), ((1000, 300), (1, 0)), ((3, 70, 600), (2, 0, 1)),
]


def random_bits(shape, dtype):
    """Random bit patterns (NaN payloads and signalling NaNs included) of ``dtype``."""
    raw = np.random.default_rng(1).integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize,
                                            dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "int32", "float64",
                                   "uint64", "complex128"])
@pytest.mark.parametrize("shape,axes", BLOCK_LAYOUTS)
def test_block_kernel_copies_every_bit(dtype, shape, axes):
    array = random_bits(shape, dtype).transpose(axes)
    for layout in (array, array[::-1], array[..., ::-1], array[1::2] if shape[0] > 2 else array):
        copy = ap.view(layout).host_copy()
        assert copy.is_c_contiguous and copy.is_copy
        assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(layout).tobytes()


def test_unaligned_source_is_copied_exactly():
    raw = bytearray(random_bits((1 + 40 * 24 * 4,), np.uint8).tobytes())
    array = np.frombuffer(raw, np.float32, offset=1, count=40 * 24).reshape(40, 24).T
    assert array.ctypes.data % 4 == 1
    copy = ap.view(array).host_copy()
    assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("dtype,shape", [("float32", (2048, 1100)), ("float64", (1100, 1030)),
                                         ("float32", (1000, 2100)), ("uint16", (2100, 2048))])
def test_streamed_copies_larger_than_the_caches(dtype, shape):
    """Results of 8 MiB and more are written with non-temporal stores."""
    array = random_bits(shape, dtype).T
    assert array.nbytes >= 8 << 20
    copy = ap.view(array).host_copy()
    assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(array).tobytes()
