"""Round trips through arrayport with real NumPy and PyTorch (CPU): every dtype each
supports, every layout class; memory really shared (write one side, read the other)."""

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module

torch = optional_module("torch")
ml_dtypes = optional_module("ml_dtypes")

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]


def numpy_layouts(dtype):
    base = (np.arange(4 * 6 * 5) % 7).astype(dtype).reshape(4, 6, 5)
    return {
        "contiguous": base,
        "0-d": np.array(3, dtype=dtype),
        "size-0": base[:, :0],
        "size-1 dims": base[:1, 2:3, :],
        "transposed": base.transpose(2, 0, 1),
        "sliced with offset": base[1:3, 2:, 1:4],
        "negative strides": base[::-1, :, ::-2],
        "32 dims": np.zeros((1,) * 30 + (2, 3), dtype=dtype),
    }


LAYOUTS = list(numpy_layouts("int8"))


def write_marker(array):
    """Write a distinctive value into the last element; return the index written."""
    index = tuple(extent - 1 for extent in array.shape)
    array[index] = True if array.dtype == bool else 1
    return index


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_round_trip_shares_memory(dtype, layout):
    source = numpy_layouts(dtype)[layout]
    view = ap.from_dlpack(source)
    assert view.shape == source.shape and view.strides == source.strides
    assert view.dtype == source.dtype and view.itemsize == source.itemsize
    assert view.ptr == source.__array_interface__["data"][0]
    assert view.is_c_contiguous == source.flags.c_contiguous
    assert view.is_f_contiguous == source.flags.f_contiguous
    back = np.from_dlpack(view)
    assert back.dtype == source.dtype and back.shape == source.shape
    np.testing.assert_array_equal(back, source)
    if source.size:
        source[...] = 0
        index = write_marker(back)
        assert source[index] == 1  # the same memory


@needs('torch')
@pytest.mark.parametrize("layout", [name for name in LAYOUTS if name != "negative strides"])
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_to_torch_through_arrayport_shares_memory(dtype, layout):
    source = numpy_layouts(dtype)[layout]
    tensor = torch.from_dlpack(ap.from_dlpack(source))
    assert tuple(tensor.shape) == source.shape
    np.testing.assert_array_equal(tensor.numpy(), source)
    if source.size:
        source[...] = 0
        index = write_marker(tensor)
        assert source[index] == 1


TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32",
                "uint64", "float16", "bfloat16", "float32", "float64", "complex32",
                "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
                "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]


def torch_layouts(dtype):
    base = torch.arange(4 * 6 * 5, dtype=torch.float32).remainder(7).reshape(4, 6, 5)
    base = base.to(dtype) if dtype != torch.complex32 else base.to(torch.complex64).to(dtype)
    return {
        "contiguous": base,
        "0-d": base[0, 0, 0],
        "size-0": base[:, :0],
        "size-1 dims": base[:1, 2:3, :],
        "transposed": base.permute(2, 0, 1),
        "sliced with offset": base[1:3, 2:, 1:4],
        "32 dims": torch.zeros((1,) * 30 + (2, 3)).to(dtype),
    }


def as_bytes(tensor):
    """The tensor's elements as raw bytes (works for every dtype)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8).tolist() if tensor.numel() else []


@needs('torch')
@pytest.mark.parametrize("layout", list(torch_layouts(torch.int8)) if torch else ["-"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_round_trip_shares_memory(dtype, layout):
    dtype = getattr(torch, dtype)
    source = torch_layouts(dtype)[layout]
    view = ap.from_dlpack(source)
    assert view.shape == tuple(source.shape)
    assert view.element_strides == source.stride()
    assert view.dtype == dtype
    assert view.ptr == source.data_ptr()
    back = torch.from_dlpack(view)
    assert back.dtype == dtype and back.shape == source.shape and back.stride() == source.stride()
    assert as_bytes(back) == as_bytes(source)
    if source.numel():
        index = tuple(extent - 1 for extent in source.shape)
        marker = torch.ones((), dtype=torch.float32).to(dtype) if dtype != torch.complex32 \
            else torch.ones((), dtype=torch.complex64).to(dtype)
        back[index] = marker
        assert as_bytes(source[index]) == as_bytes(marker)


@needs('ml_dtypes', 'torch')
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2",
                                   "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"])
def test_minifloats_cross_between_torch_and_numpy_through_arrayport(dtype):
    """NumPy alone refuses these; arrayport maps them through ml_dtypes, both directions."""
    source = torch.arange(1, 7, dtype=torch.float32).reshape(2, 3).to(getattr(torch, dtype))
    with pytest.raises(Exception):
        np.from_dlpack(source)
    array = ap.to_numpy(source)
    assert array.dtype == np.dtype(getattr(ml_dtypes, dtype))
    np.testing.assert_array_equal(array.astype(np.float32), source.float().numpy())
    array[0, 0] = array[1, 2]  # shared memory, torch → numpy
    assert source[0, 0] == source[1, 2]
    back = torch.from_dlpack(ap.from_dlpack(array.T))  # numpy (ml_dtypes) → torch
    assert back.dtype == source.dtype and back.data_ptr() == source.data_ptr()
    assert back.stride() == (1, 3)


def test_readonly_numpy_stays_readonly_through_arrayport():
    source = np.arange(6.0)
    source.flags.writeable = False
    view = ap.from_dlpack(source)
    assert view.readonly
    back = np.from_dlpack(view)
    assert not back.flags.writeable
    with pytest.raises(BufferError, match="read-only View cannot be exported as a legacy"):
        view.__dlpack__()


@needs('torch')
def test_torch_float4_packed_pairs():
    source = torch.zeros(3, 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    view = ap.from_dlpack(source)
    assert view.dtype == ap.DType("float4_e2m1fnx2")
    assert (view.nbytes, view.itemsize) == (6, 1)
    assert torch.from_dlpack(view).dtype == torch.float4_e2m1fn_x2
