"""The buffer protocol (PEP 3118), both ways: View.from_buffer / ap.view on every standard
exporter, every format NumPy uses, and View's own buffer export."""

import array
import ctypes
import gc
import mmap
import sys

import numpy as np
import pytest

import arrayport as ap
from lifetime_checks import assert_view_keeps_source_alive
from producer import spec
from optional import needs

# PEP 3118 request flags (CPython's values).
PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND = 0, 0x1, 0x4, 0x8
PyBUF_STRIDES = 0x10 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x20 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x40 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x80 | PyBUF_STRIDES
PyBUF_RECORDS_RO = PyBUF_STRIDES | PyBUF_FORMAT

NUMPY_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]


def address_of(buffer_object) -> int:
    """The address of a writable buffer's first byte, as ctypes sees it."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer_object))


# ---- import from the standard exporters ------------------------------------------------------

def test_bytes_are_read_only_and_shared():
    data = b"hello arrayport"
    view = ap.View.from_buffer(data)
    assert (view.shape, view.dtype, view.readonly, view.protocol) == ((15,), "uint8", True, "buffer")
    assert view.owner is data
    assert bytes(memoryview(view)) == data
    with pytest.raises((BufferError, ValueError)):
        np.asarray(view)[0] = 1  # read-only all the way through


def test_bytearray_mutation_is_visible_both_ways():
    data = bytearray(b"abcdef")
    view = ap.view(data)
    assert view.ptr == address_of(data) and not view.readonly
    np.asarray(view)[0] = ord("X")
    assert data[:1] == b"X"
    data[1] = ord("Y")
    assert bytes(memoryview(view))[:2] == b"XY"


def test_bytearray_cannot_resize_while_viewed_and_can_after():
    data = bytearray(8)
    view = ap.view(data)
    with pytest.raises(BufferError):
        data.extend(b"more")
    del view
    gc.collect()
    data.extend(b"more")
    assert len(data) == 12


def test_memoryview_slices_keep_their_strides():
    base = bytearray(range(12))
    sliced = memoryview(base).cast("i")[::-2]
    view = ap.view(sliced)
    assert view.dtype == "int32" and view.shape == (2,) and view.strides == (-8,)
    assert np.asarray(view).tolist() == np.frombuffer(base, np.int32)[::-2].tolist()


@pytest.mark.parametrize("typecode", list("bBhHiIlLqQfd"))
def test_array_array_every_typecode(typecode):
    source = array.array(typecode, [1, 2, 3])
    view = ap.view(source)
    assert view.shape == (3,) and view.itemsize == source.itemsize
    assert view.ptr == source.buffer_info()[0]
    np.asarray(view)[2] = 7
    assert source[2] == 7


def test_mmap_is_shared_and_cannot_close_while_viewed():
    region = mmap.mmap(-1, 64)
    view = ap.view(region)
    np.asarray(view)[:5] = np.frombuffer(b"mmap!", np.uint8)
    assert region[:5] == b"mmap!"
    with pytest.raises(BufferError):
        region.close()
    del view
    gc.collect()
    region.close()


def test_read_only_mmap_stays_read_only(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(16)))
    with open(path, "rb") as f:
        region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = ap.view(region)
    assert view.readonly and bytes(memoryview(view)) == bytes(range(16))
    del view
    region.close()


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_buffers_of_every_dtype(dtype):
    source = np.arange(6).astype(dtype).reshape(2, 3)[:, ::-1]
    view = ap.View.from_buffer(source)
    assert view.dtype == dtype
    assert (view.shape, view.strides, view.ptr) == (
        source.shape, source.strides, source.__array_interface__["data"][0])


def test_numpy_scalars_are_zero_dimensional():
    view = ap.view(np.float32(2.5))
    assert view.shape == () and view.dtype == "float32" and view.readonly
    assert np.asarray(view)[()] == 2.5


@pytest.mark.parametrize("source,reason", [
    (np.zeros(3, ">i4"), "native byte order"),
    (np.zeros(3, "i4,f4"), "no DLPack equivalent"),
    (np.zeros(3, "U2"), "repeat count"),  # NumPy spells it "2w"
    (np.zeros(3, "S1"), "char"),
    (np.zeros(2, np.longdouble), "no DLPack equivalent"),
])
def test_formats_dlpack_cannot_hold_are_refused(source, reason):
    with pytest.raises(BufferError, match=f"^buffer: .*{reason}"):
        ap.View.from_buffer(source)


def test_not_a_buffer_is_a_type_error():
    with pytest.raises(TypeError, match="^buffer: builtins.int does not support the buffer"):
        ap.View.from_buffer(3)


# ---- the exact Py_buffer an exporter hands over ----------------------------------------------

@pytest.mark.parametrize("fmt,itemsize,expected", [
    (None, 1, "uint8"), ("B", 1, "uint8"), ("@b", 1, "int8"), ("?", 1, "bool"),
    ("<h", 2, "int16"), ("=H", 2, "uint16"), ("i", 4, "int32"), ("<I", 4, "uint32"),
    ("l", ctypes.sizeof(ctypes.c_long), f"int{8 * ctypes.sizeof(ctypes.c_long)}"),
    ("<l", 4, "int32"), ("=L", 4, "uint32"), ("q", 8, "int64"), ("Q", 8, "uint64"),
    ("n", 8, "int64"), ("N", 8, "uint64"), ("e", 2, "float16"), ("<f", 4, "float32"),
    ("d", 8, "float64"), ("Zf", 8, "complex64"), ("<Zd", 16, "complex128"),
    (">b", 1, "int8"), ("!B", 1, "uint8"),
])
def test_every_pep3118_format_numpy_uses(buffer_exporter, fmt, itemsize, expected):
    exporter = buffer_exporter.Exporter(bytearray(4 * itemsize), fmt, itemsize, (4,),
                                        (itemsize,))
    assert ap.view(exporter).dtype == expected


@pytest.mark.parametrize("fmt,itemsize,reason", [
    (">i", 4, "native byte order"), ("!d", 8, "native byte order"),
    ("i", 8, "is 4 bytes but the exporter says itemsize 8"),
    ("<n", 8, "only with native sizes"), ("g", 16, "long double"), ("Zg", 32, "complex long double"),
    ("c", 1, "char"), ("3f", 12, "repeat count"), ("T{i:a:}", 4, "struct"), ("x", 1, "pad"),
    ("P", 8, "void pointer"), ("O", 8, "Python object"), ("", 1, "not a single"),
    ("ii", 8, "not a single"),
])
def test_malformed_or_foreign_formats_are_refused(buffer_exporter, fmt, itemsize, reason):
    exporter = buffer_exporter.Exporter(bytearray(4 * itemsize), fmt, itemsize, (4,),
                                        (itemsize,))
    with pytest.raises(BufferError, match=f"^buffer: .*{reason}"):
        ap.view(exporter)
    assert exporter.gets == exporter.releases == 1  # released even on failure


def test_suboffsets_are_refused(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(16), "B", 1, (4, 4), (4, 1),
                                        suboffsets=(0, -1))
    with pytest.raises(BufferError, match="^buffer: .*suboffsets"):
        ap.view(exporter)
    assert exporter.releases == 1


def test_negative_suboffsets_mean_no_indirection(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(16), "B", 1, (4, 4), (4, 1),
                                        suboffsets=(-1, -1))
    assert ap.view(exporter).shape == (4, 4)


def test_stride_not_a_multiple_of_itemsize_is_refused(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(16), "i", 4, (2,), (6,))
    with pytest.raises(BufferError, match="stride 6 is not a multiple of the item size 4"):
        ap.view(exporter)


def test_negative_shape_is_refused(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(16), "B", 1, (-1,), (1,))
    with pytest.raises(BufferError, match=r"^buffer: shape\[0\] is negative"):
        ap.view(exporter)


def test_missing_shape_means_a_flat_run_and_missing_strides_mean_c_order(buffer_exporter):
    flat = buffer_exporter.Exporter(bytearray(12), "i", 4, None, None, ndim=1)
    assert ap.view(flat).shape == (3,)
    c_order = buffer_exporter.Exporter(bytearray(24), "i", 4, (2, 3), None)
    assert ap.view(c_order).strides == (12, 4)


def test_refusing_exporter_gets_a_buffer_error_naming_it(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(4), refuse=True)
    with pytest.raises(BufferError, match="^buffer: Exporter refused to export its buffer"):
        ap.View.from_buffer(exporter)


def test_the_buffer_is_released_exactly_once_when_the_view_dies(buffer_exporter, live):
    exporter = buffer_exporter.Exporter(bytearray(16), "i", 4, (4,), (4,))
    view = ap.view(exporter)
    derived = np.asarray(view)  # a NumPy array keeps the View alive
    del view
    gc.collect()
    assert exporter.releases == 0 and live.delta() == {"buffer_leases": 1}
    del derived
    gc.collect()
    assert (exporter.gets, exporter.releases) == (1, 1)
    assert live.delta() == {}


def test_the_view_keeps_the_exporter_alive(buffer_exporter):
    exporter = buffer_exporter.Exporter(bytearray(16), "i", 4, (4,), (4,))
    before = sys.getrefcount(exporter)
    view = ap.view(exporter)
    assert view.owner is exporter and sys.getrefcount(exporter) > before
    del view
    gc.collect()
    assert sys.getrefcount(exporter) == before


def test_views_of_a_weakly_referenced_source_outlive_its_last_name():
    assert_view_keeps_source_alive(lambda: np.arange(4.0), ap.View.from_buffer)


# ---- export: memoryview(view) and raw requests -------------------------------------------------

@pytest.mark.parametrize("dtype,fmt", [
    ("bool", "?"), ("int8", "b"), ("uint8", "B"), ("int16", "h"), ("uint16", "H"),
    ("int32", "i"), ("uint32", "I"), ("int64", "q"), ("uint64", "Q"), ("float16", "e"),
    ("float32", "f"), ("float64", "d"), ("complex64", "Zf"), ("complex128", "Zd"),
])
def test_memoryview_of_a_view_has_the_right_format(dtype, fmt):
    source = np.arange(12).astype(dtype).reshape(3, 4)[::2, ::-1]
    m = memoryview(ap.view(source))
    assert (m.format, m.itemsize, m.shape, m.strides, m.readonly) == (
        fmt, source.itemsize, source.shape, source.strides, False)
    back = np.asarray(m)
    assert np.shares_memory(back, source) and np.array_equal(back, source)


def test_read_only_view_exports_a_read_only_buffer(buffer_exporter):
    source = np.arange(4.0)
    source.flags.writeable = False
    view = ap.view(source)
    assert memoryview(view).readonly
    with pytest.raises(BufferError, match="read-only but a writable buffer was requested"):
        buffer_exporter.request(view, PyBUF_WRITABLE | PyBUF_RECORDS_RO)


def test_writes_through_the_exported_buffer_reach_the_source():
    source = np.zeros(4, np.int32)
    memoryview(ap.view(source))[1] = 42
    assert source[1] == 42


def test_contiguity_requests(buffer_exporter):
    c = ap.view(np.zeros((2, 3)))
    f = ap.view(np.zeros((2, 3)).T)
    strided = ap.view(np.zeros((4, 4))[::2, ::2])
    assert buffer_exporter.request(c, PyBUF_C_CONTIGUOUS)["strides"] == (24, 8)
    assert buffer_exporter.request(f, PyBUF_F_CONTIGUOUS)["strides"] == (8, 24)
    assert buffer_exporter.request(f, PyBUF_ANY_CONTIGUOUS)["shape"] == (3, 2)
    with pytest.raises(BufferError, match="C-contiguous buffer was requested"):
        buffer_exporter.request(f, PyBUF_C_CONTIGUOUS)
    with pytest.raises(BufferError, match="Fortran-contiguous buffer was requested"):
        buffer_exporter.request(c.__dlpack__ and strided, PyBUF_F_CONTIGUOUS)
    with pytest.raises(BufferError, match="contiguous buffer was requested; the View is strided"):
        buffer_exporter.request(strided, PyBUF_ANY_CONTIGUOUS)
    with pytest.raises(BufferError, match="did not ask for strides"):
        buffer_exporter.request(strided, PyBUF_ND)


def test_simple_request_gets_plain_bytes(buffer_exporter):
    view = ap.view(np.arange(3, dtype=np.int32))
    info = buffer_exporter.request(view, PyBUF_SIMPLE)
    assert (info["ndim"], info["shape"], info["format"], info["len"], info["itemsize"]) == (
        1, None, None, 12, 1)
    assert buffer_exporter.request(view, PyBUF_FORMAT)["format"] == "B"
    nd = buffer_exporter.request(view, PyBUF_ND | PyBUF_FORMAT)
    assert (nd["shape"], nd["strides"], nd["format"]) == ((3,), None, "i")
    assert nd["obj"] is view


def test_exporting_many_buffers_frees_every_shape_block():
    view = ap.view(np.zeros((2, 3, 4)))
    for _ in range(1000):
        memoryview(view).release()
    assert sys.getrefcount(view) == 2  # no buffer still holds it


@needs("ml_dtypes")
def test_types_without_a_pep3118_format_are_refused(producer):
    import ml_dtypes

    bf16 = ap.view(np.zeros(3, ml_dtypes.bfloat16))
    with pytest.raises(BufferError, match="^buffer: bfloat16 has no PEP 3118 format"):
        memoryview(bf16)
    float4 = ap.from_dlpack(producer.capsule(spec(shape=(4,), dtype=(17, 4, 1))))
    with pytest.raises(BufferError, match="float4_e2m1fn has no PEP 3118 format"):
        memoryview(float4)
    lanes = ap.from_dlpack(producer.capsule(spec(shape=(4,), dtype=(2, 32, 4))))
    with pytest.raises(BufferError, match="float32x4 has no PEP 3118 format"):
        memoryview(lanes)


def test_device_memory_is_not_exported_as_a_buffer(producer):
    cuda = ap.from_dlpack(producer.capsule(spec(device=(2, 0))))
    with pytest.raises(BufferError, match=r"^buffer: the View's memory is on cuda:0"):
        memoryview(cuda)
    pinned = ap.from_dlpack(producer.capsule(spec(device=(3, 0))))
    assert memoryview(pinned).shape == (2, 3)  # pinned host memory is host memory


def test_exports_share_one_layout_block_that_lives_with_the_view():
    """Shape and byte strides are worked out at a View's first export and kept by the View
    (no allocation per export): exports made before and after, alive together and outliving
    every other reference to the View, all read the same right layout."""
    import gc
    import weakref
    array = np.arange(24, dtype=np.int16).reshape(4, 6)[::2, ::-3]
    v = ap.view(array)
    first = memoryview(v)
    exports = [memoryview(v) for _ in range(100)]
    alive = weakref.ref(v)
    del v
    gc.collect()
    assert alive() is not None  # the exports hold the View
    for m in (first, *exports):
        assert m.shape == (2, 2) and m.strides == (24, -6) and m.tolist() == array.tolist()
    del first, exports, m
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("source", [
    b"abcdefgh", bytearray(b"abcdefgh"), b"",
    memoryview(b"abcdefgh"), memoryview(bytearray(8)).cast("i"),
    memoryview(np.arange(12, dtype=np.float32).reshape(3, 4)[::2, ::-1]),
    memoryview(np.zeros(3, dtype=np.longdouble)),        # a format DLPack has no type for
    memoryview(np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])),   # a struct
], ids=["bytes", "bytearray", "empty", "memoryview", "cast", "strided", "longdouble", "struct"])
def test_the_bytes_fast_path_gives_what_the_protocol_path_gives(source):
    """ap.view takes bytes, bytearray and memoryview straight to their buffer: the same View
    as View.from_buffer (the protocol path), or the same refusal."""
    def outcome(make):
        try:
            v = make(source)
        except Exception as error:  # noqa: BLE001 — the refusal itself is compared
            return type(error), str(error)
        return (v.shape, v.strides, v.dtype, v.readonly, v.protocol, v.ptr, v.owner is source,
                bytes(v.host_copy()) if v.size else b"")
    assert outcome(ap.view) == outcome(ap.View.from_buffer)
