"""NumPy's __array_interface__ (version 3), both ways, and View.__array__."""

import sys

import numpy as np
import pytest

import arrayport as ap
from lifetime_checks import assert_view_keeps_source_alive
from producer import spec
from optional import needs, optional_module

ml_dtypes = optional_module("ml_dtypes")


class Holder:
    """A hand-written producer: any dict, and whatever must stay alive with it."""

    def __init__(self, interface, keep=None):
        self.__array_interface__ = interface
        self.keep = keep


def interface_of(array, **changes):
    d = dict(array.__array_interface__)
    d.update(changes)
    return d


# ---- import ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "uint64", "float16",
                                   "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("layout", ["c", "transposed", "sliced", "reversed", "0-d", "empty"])
def test_import_matches_what_numpy_sees(dtype, layout):
    base = np.arange(24).astype(dtype).reshape(4, 6)
    source = {"c": base, "transposed": base.T, "sliced": base[1:, 2::2],
              "reversed": base[::-1, ::-3], "0-d": base[1, 2][()] if False else base[1, 2, ...],
              "empty": base[:0]}[layout]
    holder = Holder(source.__array_interface__, keep=source)
    view = ap.View.from_array_interface(holder)
    seen_by_numpy = np.asarray(holder)
    assert view.protocol == "array_interface" and view.owner is holder
    assert (view.shape, view.strides, view.dtype) == (
        seen_by_numpy.shape, seen_by_numpy.strides, seen_by_numpy.dtype)
    assert view.ptr == seen_by_numpy.__array_interface__["data"][0]
    assert np.array_equal(np.asarray(view), source)


def test_memory_is_shared_and_read_only_is_kept():
    source = np.zeros(4)
    view = ap.view(Holder(source.__array_interface__, keep=source))
    np.asarray(view)[2] = 5
    assert source[2] == 5
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    assert ap.view(Holder(frozen.__array_interface__, keep=frozen)).readonly


def test_offset_moves_into_buffer_data():
    source = np.arange(10, dtype=np.int64)
    d = {"version": 3, "shape": (3,), "typestr": "<i8", "data": source, "offset": 16}
    view = ap.view(Holder(d))
    assert np.asarray(view).tolist() == [2, 3, 4]
    assert np.asarray(Holder(d)).tolist() == [2, 3, 4]  # as NumPy reads it


def test_offset_next_to_a_pointer_is_refused_as_ambiguous():
    source = np.arange(10, dtype=np.int64)
    d = interface_of(source, shape=(3,), offset=16)
    assert np.asarray(Holder(d, keep=source)).tolist() == [0, 1, 2]  # NumPy ignores it
    with pytest.raises(BufferError, match="offset 16 applies only when data is a buffer"):
        ap.view(Holder(d, keep=source))
    assert ap.view(Holder(interface_of(source, offset=0), keep=source)).shape == (10,)


def test_data_may_be_a_buffer_and_the_view_holds_it(live):
    memory = bytearray(np.arange(6, dtype=np.int32).tobytes())
    d = {"version": 3, "shape": (2, 2), "typestr": "<i4", "data": memory, "offset": 8}
    view = ap.view(Holder(d))
    assert np.asarray(view).tolist() == [[2, 3], [4, 5]] and not view.readonly
    with pytest.raises(BufferError):
        memory.extend(b"x")  # the buffer is held while the View lives
    assert live.delta() == {"buffer_leases": 1}
    del view
    assert live.delta() == {}


def test_data_buffer_must_contain_the_whole_array():
    d = {"version": 3, "shape": (5,), "typestr": "<i4", "data": bytearray(16)}
    with pytest.raises(BufferError, match="reaches bytes 0..20 of a 16-byte data buffer"):
        ap.view(Holder(d))
    reversed_out = {"version": 3, "shape": (2,), "typestr": "<i4", "data": bytearray(16),
                    "strides": (-4,)}
    with pytest.raises(BufferError, match="reaches bytes -4..4"):
        ap.view(Holder(reversed_out))


def test_missing_data_means_the_objects_own_buffer():
    class Exporting(bytearray):
        __array_interface__ = {"version": 3, "shape": (2,), "typestr": "<u2"}

    source = Exporting(b"\x01\x00\x02\x00")
    view = ap.View.from_array_interface(source)
    assert np.asarray(view).tolist() == [1, 2]


def test_read_only_bytes_as_data_stay_read_only():
    d = {"version": 3, "shape": (4,), "typestr": "|u1", "data": b"abcd"}
    assert ap.view(Holder(d)).readonly


@pytest.mark.parametrize("spelling", ["f4", "=f4", "f", "float32", "single"])
def test_a_type_string_numpy_reads_is_read_as_numpy_reads_it(spelling):
    """Spellings without a byte order, struct codes and names (hip-python exports "B" and
    "float32"): NumPy's reader takes them, and so does arrayport — the same values."""
    source = np.arange(4, dtype=np.float32)
    d = dict(source.__array_interface__, typestr=spelling)
    view = ap.view(Holder(d, keep=source))
    assert view.dtype == "float32"
    assert ap.to_numpy(view).tolist() == np.asarray(Holder(d, keep=source)).tolist()


def test_the_source_lives_exactly_as_long_as_the_view():
    def make_holder():
        source = np.arange(3.0)
        return Holder(source.__array_interface__, keep=source)

    assert_view_keeps_source_alive(make_holder, ap.view)


@pytest.mark.parametrize("changes,error,message", [
    ({"version": 2}, BufferError, "version 2 is not supported"),
    ({"version": "3"}, TypeError, "version must be an int"),
    ({"shape": (2, -1)}, BufferError, r"shape\[1\] is negative"),
    ({"shape": [2, 2]}, TypeError, "shape must be a tuple of ints, got list"),
    ({"shape": 3}, TypeError, "shape must be a tuple of ints"),
    ({"shape": (2.0,)}, TypeError, "shape must hold ints, got float"),
    ({"shape": (True,)}, TypeError, "shape must hold ints, got bool"),
    ({"shape": (2**70,)}, BufferError, "does not fit in int64"),
    ({"typestr": 4}, TypeError, "typestr must be a str"),
    ({"typestr": "x4"}, BufferError, "not of the form.*nor a type NumPy reads"),
    ({"typestr": "i4,i4", "descr": [("float64", "|V8")]}, BufferError, "not of the form"),
    ({"typestr": "(2,)i4"}, BufferError, "not of the form"),
    ({"typestr": "a8"}, BufferError, "not of the form"),   # deprecated by NumPy: not read
    ({"typestr": ">f8"}, BufferError, "not in native byte order"),
    ({"typestr": "<f16"}, BufferError, r"floating point, 16 bytes\) has no DLPack"),
    ({"typestr": "|O8"}, BufferError, "Python object"),
    ({"typestr": "<M8"}, BufferError, "datetime"),
    ({"typestr": "|V8"}, BufferError, "raw bytes with no DLPack type name"),
    ({"typestr": "|V8", "descr": [("a", "<i4"), ("b", "<i4")]}, BufferError, "structured"),
    ({"data": (0, False)}, BufferError, "data is NULL for a tensor with 4 elements"),
    ({"data": (1.5, False)}, TypeError, "data pointer must be an int"),
    ({"data": (8, "no")}, TypeError, "read-only flag must be a bool"),
    ({"data": (8,)}, TypeError, r"data must be a \(pointer, readonly\) 2-tuple"),
    ({"data": 7}, TypeError, "data must be a"),
    ({"data": (-8, False)}, BufferError, "is not an address"),
    ({"strides": (4,)}, BufferError, "strides has 1 entries for 2 dimensions"),
    ({"strides": (8, 3)}, BufferError, "stride 3 is not a multiple of the item size"),
    ({"strides": "no"}, TypeError, "strides must be None or a tuple"),
    ({"mask": np.ones(4, bool)}, BufferError, "masked arrays are not supported"),
    ({"offset": -8}, BufferError, "offset -8 is negative"),
    ({"offset": None}, TypeError, "offset must hold ints, got NoneType"),  # NumPy refuses too
    ({"offset": 8}, BufferError, "offset 8 applies only when data is a buffer"),
    ({"offset": 2.0}, TypeError, "offset must hold ints"),
])
def test_malformed_dicts_get_clear_errors(changes, error, message):
    source = np.zeros((2, 2), np.float64)
    d = interface_of(source, **changes)
    with pytest.raises(error, match=f"^array_interface: .*{message}"):
        ap.View.from_array_interface(Holder(d, keep=source))


@pytest.mark.parametrize("key", ["version", "shape", "typestr"])
def test_required_entries(key):
    d = interface_of(np.zeros(2))
    del d[key]
    with pytest.raises(BufferError, match=f"the dict has no '{key}' entry"):
        ap.View.from_array_interface(Holder(d))


def test_not_a_dict_and_no_attribute():
    with pytest.raises(TypeError, match="must be a dict, got list"):
        ap.View.from_array_interface(Holder([1, 2]))
    with pytest.raises(TypeError, match="has no __array_interface__"):
        ap.View.from_array_interface(object())


def test_numpy_integers_are_accepted_in_shapes():
    source = np.zeros(6)
    d = interface_of(source, shape=(np.int64(2), np.int32(3)))
    assert ap.view(Holder(d, keep=source)).shape == (2, 3)


# ---- export ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.int16).reshape(3, 4),
    lambda: np.arange(12.0).reshape(3, 4).T,
    lambda: np.arange(12.0)[::-2],
    lambda: np.zeros((0, 3), np.complex64),
    lambda: np.array(3, np.uint8),
])
def test_export_matches_numpys_own_interface(make):
    source = make()
    mine, numpys = ap.view(source).__array_interface__, source.__array_interface__
    for key in ("version", "shape", "typestr", "data"):
        assert mine[key] == numpys[key], key
    assert mine["descr"] == numpys["descr"]
    assert (mine["strides"] or source.strides) == (numpys["strides"] or source.strides)


def test_export_says_none_strides_only_for_c_order():
    assert ap.view(np.zeros((2, 3))).__array_interface__["strides"] is None
    assert ap.view(np.zeros((2, 3)).T).__array_interface__["strides"] == (8, 24)


def test_numpy_consumes_the_export_zero_copy_and_keeps_the_view_alive():
    source = np.arange(6.0)
    view = ap.view(source)
    holder = Holder(view.__array_interface__, keep=view)
    out = np.asarray(holder)
    assert np.shares_memory(out, source)
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    assert not np.asarray(Holder(ap.view(frozen).__array_interface__)).flags.writeable


def test_device_views_have_no_array_interface(producer):
    cuda = ap.from_dlpack(producer.capsule(spec(device=(2, 0))))
    assert not hasattr(cuda, "__array_interface__")
    with pytest.raises(AttributeError, match="memory is on cuda:0; the array interface"):
        cuda.__array_interface__
    pinned = ap.from_dlpack(producer.capsule(spec(device=(3, 0))))
    assert pinned.__array_interface__["shape"] == (2, 3)


@needs('ml_dtypes')
@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
                                  "float4_e2m1fn", "float6_e2m3fn"])
def test_types_without_a_typestr_are_read_by_the_named_raw_bytes_convention(name):
    # Views of types NumPy has no native type for offer no __array_interface__: NumPy reads
    # that dict before __array__ and would build an opaque record; without it NumPy asks
    # __array__, which shares the memory as the ml_dtypes type.
    source = np.zeros(3, getattr(ml_dtypes, name))
    view = ap.view(source)
    assert not hasattr(view, "__array_interface__")
    seen = np.asarray(view)
    assert seen.dtype == source.dtype and seen.ctypes.data == view.ptr
    # arrayport still reads the convention (|V<size> named by descr) from other producers.
    size = source.itemsize
    interface = {"version": 3, "shape": (3,), "typestr": f"|V{size}",
                 "descr": [(name, f"|V{size}")], "data": (view.ptr, False)}
    back = ap.view(Holder(interface, keep=view))
    assert back.dtype == view.dtype and back.ptr == view.ptr


def test_multi_lane_and_complex32_offer_no_interface_but_are_read_from_one(producer):
    lanes = ap.from_dlpack(producer.capsule(spec(shape=(2,), dtype=(2, 32, 4))))
    assert not hasattr(lanes, "__array_interface__")
    half = ap.from_dlpack(producer.capsule(spec(shape=(2,), dtype=(5, 32, 1))))
    assert not hasattr(half, "__array_interface__")
    interface = {"version": 3, "shape": (2,), "typestr": "|V4", "descr": [("complex32", "|V4")],
                 "data": (half.ptr, False)}
    assert ap.view(Holder(interface, keep=half)).dtype == "complex32"


def test_packed_sub_byte_views_have_no_interface(producer):
    packed = ap.from_dlpack(producer.capsule(spec(shape=(4,), dtype=(17, 4, 1))))
    assert not hasattr(packed, "__array_interface__")


def test_named_raw_bytes_with_a_size_mismatch_are_refused():
    d = {"version": 3, "shape": (2,), "typestr": "|V4", "descr": [("bfloat16", "|V4")],
         "data": bytearray(8)}
    with pytest.raises(BufferError, match="raw bytes with no DLPack type name"):
        ap.view(Holder(d))


# ---- __array__ -----------------------------------------------------------------------------

def test_array_method_shares_memory_and_honours_read_only():
    source = np.arange(4.0)
    out = ap.view(source).__array__()
    assert np.shares_memory(out, source)
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    assert not ap.view(frozen).__array__().flags.writeable


def test_array_method_numpy2_copy_semantics():
    source = np.arange(4, dtype=np.int32)
    view = ap.view(source)
    assert np.shares_memory(view.__array__(copy=False), source)
    assert not np.shares_memory(view.__array__(copy=True), source)
    converted = view.__array__(dtype=np.float64)
    assert converted.dtype == np.float64 and not np.shares_memory(converted, source)
    assert np.shares_memory(view.__array__(dtype=np.int32, copy=False), source)
    with pytest.raises(ValueError, match="converting int32 to float64 needs a copy, but copy=False"):
        view.__array__(dtype=np.float64, copy=False)
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        view.__array__(copy="yes")


def test_numpy_array_calls_follow_the_same_semantics():
    source = np.arange(4, dtype=np.int32)
    view = ap.view(source)
    assert np.shares_memory(np.array(view, copy=False), source)
    assert not np.shares_memory(np.array(view), source)  # np.array copies by default
    assert np.shares_memory(np.asarray(view), source)


@needs('ml_dtypes')
def test_array_method_gives_ml_dtypes_arrays():
    source = np.arange(3).astype(ml_dtypes.bfloat16)
    out = ap.view(source).__array__()
    assert out.dtype == ml_dtypes.bfloat16 and np.shares_memory(out, source)


def test_array_method_refuses_device_memory(producer):
    cuda = ap.from_dlpack(producer.capsule(spec(device=(2, 1))))
    with pytest.raises(BufferError, match="memory is on cuda:1; NumPy reads host memory only"):
        cuda.__array__()
    with pytest.raises(BufferError):
        np.asarray(cuda)  # never a silent device-to-host copy


def test_from_array_keeps_the_returned_array_alive():
    source = np.arange(5.0)

    class OnlyArray:
        def __array__(self, dtype=None, copy=None):
            return source[1:]

    view = ap.View.from_array(OnlyArray())
    assert view.protocol == "array" and view.owner.base is source
    refs = sys.getrefcount(view.owner)
    assert refs >= 2
    np.asarray(view)[0] = 9
    assert source[1] == 9


def test_from_array_rejects_non_arrays():
    class Liar:
        def __array__(self, dtype=None, copy=None):
            return [1, 2]

    with pytest.raises(TypeError, match=r"^array: Liar.__array__\(\) returned list"):
        ap.View.from_array(Liar())
    with pytest.raises(TypeError, match="has no __array__ method"):
        ap.View.from_array(3)
