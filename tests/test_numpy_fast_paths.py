"""NumPy arrays read and made through NumPy's C API (_csrc/numpy_arrays.h): the same Views
and arrays as the DLPack round trip gives, for every NumPy-native type and layout, and
the general path (with its errors) for everything NumPy's DLPack export refuses."""

import subprocess
import sys

import numpy as np
import pytest

import arrayport as ap

NATIVE_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                 np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                 np.complex128]


def layouts(dtype):
    base = np.arange(24).reshape(4, 6).astype(dtype)
    readonly = base.copy()
    readonly.flags.writeable = False
    return {
        "contiguous": base,
        "transposed": base.T,
        "sliced": base[1:, 2::2],
        "negative": base[::-1, ::-2],
        "0-d": base[1, 2, ...],
        "empty": base[:0],
        "readonly": readonly,
        "10-d": np.ones((1, 2) * 5, dtype)[..., ::2],
    }


def same_view(a, b):
    return (a.shape, a.strides, a.dtype, a.ptr, a.readonly, a.device) == \
        (b.shape, b.strides, b.dtype, b.ptr, b.readonly, b.device)


@pytest.mark.parametrize("dtype", NATIVE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_view_of_an_ndarray_matches_the_dlpack_round_trip(dtype, live):
    for name, array in layouts(dtype).items():
        fast = ap.view(array)
        through_capsule = ap.from_dlpack(array.__dlpack__(max_version=(1, 3)))
        assert same_view(fast, through_capsule), name
        assert fast.owner is array and fast.protocol == "dlpack", name
        assert ap.from_dlpack(array).owner is array, name
        del through_capsule
    assert live.delta() == {}


@pytest.mark.parametrize("dtype", NATIVE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_ndarray_of_a_view_shares_memory_and_keeps_the_view_alive(dtype):
    for name, array in layouts(dtype).items():
        view = ap.view(array)
        back = view.__array__()
        assert back.base is view and back.dtype == array.dtype, name
        assert back.__array_interface__ == array.__array_interface__, name
        assert back.flags.writeable == (not view.readonly), name
        assert ap.to_numpy(view).base is view, name
    source = np.zeros(3, dtype)
    back = ap.to_numpy(ap.view(source))  # the View lives on as the array's base
    back[1] = 1
    assert source[1] == 1


def test_read_only_views_give_read_only_arrays_even_if_the_source_is_unlocked():
    source = np.zeros(3)
    source.flags.writeable = False
    view = ap.view(source)
    source.flags.writeable = True  # the View recorded read-only; it stays so
    back = view.__array__()
    assert not back.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        back[0] = 1


@pytest.mark.parametrize("array, error", [
    (np.arange(3, dtype=">f8"), "native byte order"),
    (np.arange(3, dtype=np.longdouble), "longdouble"),
    (np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]), "float and complex dtypes"),
    (np.lib.stride_tricks.as_strided(np.zeros(10, "i4"), (3,), (6,)), "multiple of itemsize"),
], ids=["byte-swapped", "longdouble", "structured", "odd-strides"])
def test_what_numpys_dlpack_refuses_gets_the_general_paths_error(array, error):
    with pytest.raises(BufferError, match=error):
        ap.view(array)


def test_types_numpy_reads_only_through_ml_dtypes_take_the_general_path():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    source = np.arange(4).astype(ml_dtypes.bfloat16)
    view = ap.view(source)
    assert view.dtype.name == "bfloat16" and view.protocol == "array_interface"
    assert ap.to_numpy(view).dtype == source.dtype


def test_unaligned_arrays_are_described_as_they_are():
    raw = np.zeros(9, np.uint8)
    unaligned = np.ndarray((4,), dtype=np.int16, buffer=raw, offset=1)
    view = ap.view(unaligned)
    assert view.ptr == unaligned.__array_interface__["data"][0] and view.strides == (2,)
    np.asarray(view)[0] = 0x0101
    assert raw[1] == raw[2] == 1


def test_importing_arrayport_does_not_import_numpy():
    code = "import sys, arrayport; assert 'numpy' not in sys.modules, 'numpy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
