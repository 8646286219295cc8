"""The Arrow C data interface, consumer side (issue 35, its import half): Arrow arrays as
read-only Views, zero-copy — pointer identity, values, offsets, read-only, release exactly
once; nulls and layouts without a strided form refused with a message; hostile structs
(built by hand: tests/helpers/arrow_structs.py) refused cleanly, released once.

The hand-built producer needs only NumPy and ctypes; the pyarrow cases skip without it."""

import gc
import json
import threading

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrow_structs import Made, fixed_size_list, metadata_bytes
from optional import optional_module

pa = optional_module("pyarrow")
needs_pyarrow = pytest.mark.skipif(pa is None, reason="needs pyarrow (the [test] extra)")


@pytest.fixture(autouse=True)
def nothing_left_held():
    yield
    gc.collect()
    assert _core.live_arrow_arrays() == 0


# ---- the hand-built producer (NumPy and ctypes only) -------------------------------------------

@pytest.mark.parametrize("fmt, dtype", [("c", "int8"), ("C", "uint8"), ("s", "int16"),
                                        ("S", "uint16"), ("i", "int32"), ("I", "uint32"),
                                        ("l", "int64"), ("L", "uint64"), ("e", "float16"),
                                        ("f", "float32"), ("g", "float64")])
def test_every_fixed_width_number_is_shared_with_its_offset(fmt, dtype):
    values = np.arange(10).astype(dtype)
    made = Made(fmt, values, length=6, offset=3)
    view = ap.View.from_arrow(made.capsules())
    assert view.dtype == ap.DType(dtype) and view.shape == (6,) and view.readonly
    assert view.ptr == values.ctypes.data + 3 * values.itemsize     # the same memory
    assert np.asarray(view).tolist() == values[3:9].tolist()
    assert made.array_released and made.released["array"] == 0    # moved out, not released
    values[4] = 99                                                   # one memory, two names
    assert np.asarray(view)[1] == 99
    with pytest.raises(ValueError):
        np.asarray(view)[0] = 1                                      # read-only
    del view
    gc.collect()
    assert made.released == {"array": 1, "schema": 0}    # the schema stays its capsule's


def test_the_release_runs_once_from_another_thread():
    made = Made("i", np.arange(4, dtype=np.int32))
    view = ap.View.from_arrow(made.capsules())
    holder = [view]
    del view
    thread = threading.Thread(target=lambda: (holder.clear(), gc.collect()))
    thread.start()
    thread.join()
    assert made.released["array"] == 1


def test_a_moved_array_cannot_be_taken_twice():
    made = Made("i", np.arange(4, dtype=np.int32))
    schema, array = made.capsules()
    first = ap.View.from_arrow((schema, array))
    with pytest.raises(BufferError, match="already released"):
        ap.View.from_arrow((schema, array))
    del first
    gc.collect()
    assert made.released["array"] == 1


def test_nested_fixed_size_lists_are_n_dimensional():
    values = np.arange(48, dtype=np.float32)
    inner = fixed_size_list(4, Made("f", values))
    outer = fixed_size_list(3, inner, length=3, offset=1)           # rows 1..3 of 4
    view = ap.View.from_arrow(outer.capsules())
    assert view.shape == (3, 3, 4)
    np.testing.assert_array_equal(np.asarray(view), values.reshape(4, 3, 4)[1:])
    assert view.ptr == values.ctypes.data + 12 * 4


def _tensor_array(shape, permutation, rows=3):
    cells = int(np.prod(shape))
    values = np.arange(rows * cells, dtype=np.int32)
    described = {"shape": list(shape)}
    if permutation is not None:
        described["permutation"] = list(permutation)
    metadata = metadata_bytes({b"ARROW:extension:name": b"arrow.fixed_shape_tensor",
                               b"ARROW:extension:metadata": json.dumps(described).encode()})
    return values, fixed_size_list(cells, Made("i", values), metadata=metadata)


@pytest.mark.parametrize("shape, permutation", [((2, 3), None), ((2, 3), (1, 0)),
                                                ((2, 3, 4), (2, 0, 1)),
                                                ((2, 3, 4), (1, 2, 0)), ((5,), None)])
def test_fixed_shape_tensors_follow_the_canonical_extension(shape, permutation):
    # "shape" is each cell's physical row-major shape; logical dimension i is physical
    # dimension permutation[i] — NumPy's transpose(permutation) is the independent model.
    values, made = _tensor_array(shape, permutation)
    view = ap.View.from_arrow(made.capsules())
    physical = values.reshape(3, *shape)
    axes = (0, *[1 + p for p in (permutation or range(len(shape)))])
    np.testing.assert_array_equal(np.asarray(view), physical.transpose(axes))


@pytest.mark.parametrize("change, message", [
    (lambda m: setattr(m.array, "length", -1), "length -1"),
    (lambda m: setattr(m.array, "offset", -2), "offset -2"),
    (lambda m: setattr(m.array, "null_count", -7), "null count -7"),
    (lambda m: setattr(m.array, "n_buffers", 3), "3 buffers"),
    (lambda m: setattr(m.array, "n_children", 2), "2 children"),
    (lambda m: setattr(m.schema, "format", b"q"), "'q' is not an Arrow format string"),
    (lambda m: setattr(m.schema, "format", None), "has no format"),
    (lambda m: setattr(m.schema, "format", b"+w:x"), "not an Arrow format"),
    (lambda m: m.keep[0].__setitem__(1, None), "values buffer is NULL"),
])
def test_hostile_arrays_are_refused_and_released_once(change, message):
    made = Made("i", np.arange(4, dtype=np.int32))
    change(made)
    with pytest.raises(BufferError, match=message):
        ap.View.from_arrow(made.capsules())
    gc.collect()
    # taken and released once, or refused before it was taken (still the producer's)
    assert made.released["array"] == 1 or (made.released["array"] == 0
                                           and not made.array_released)


def test_a_released_schema_or_array_is_refused():
    made = Made("i", np.arange(4, dtype=np.int32))
    made.schema.release = type(made.schema.release)()
    with pytest.raises(BufferError, match="schema is NULL or was already released"):
        ap.View.from_arrow(made.capsules())
    made = Made("i", np.arange(4, dtype=np.int32))
    made.array.release = type(made.array.release)()
    with pytest.raises(BufferError, match="already released"):
        ap.View.from_arrow(made.capsules())


def test_a_child_shorter_than_its_rows_is_refused():
    made = fixed_size_list(4, Made("i", np.arange(8, dtype=np.int32)), length=3)
    with pytest.raises(BufferError, match="holds 8 elements, its parent's rows reach 12"):
        ap.View.from_arrow(made.capsules())
    gc.collect()
    assert made.released["array"] == 1


def test_nulls_are_counted_in_the_rows_taken_only():
    # validity bits 0b11111101: element 1 is null
    bitmap = np.array([0b11111101], dtype=np.uint8)
    values = np.arange(8, dtype=np.int32)
    with_null = Made("i", values, null_count=-1, validity=bitmap.ctypes.data)
    with pytest.raises(BufferError, match="has 1 null, which a View cannot hold"):
        ap.View.from_arrow(with_null.capsules())
    after_it = Made("i", values, length=6, offset=2, null_count=-1,
                    validity=bitmap.ctypes.data)
    assert np.asarray(ap.View.from_arrow(after_it.capsules())).tolist() == [2, 3, 4, 5, 6, 7]


def test_wrong_capsules_are_refused():
    made = Made("i", np.arange(4, dtype=np.int32))
    schema, array = made.capsules()
    with pytest.raises(BufferError, match="expected an 'arrow_schema' capsule"):
        ap.View.from_arrow((array, schema))
    with pytest.raises(BufferError, match="offers no Arrow PyCapsule protocol"):
        ap.View.from_arrow(object())
    assert made.released["array"] == 0 and not made.array_released    # never taken


# ---- pyarrow ---------------------------------------------------------------------------------

class ArrowOnly:
    """An object offering the Arrow PyCapsule protocol and nothing else (as nanoarrow's
    arrays and many database drivers do)."""

    def __init__(self, array):
        self._array = array

    def __arrow_c_array__(self, requested_schema=None):
        return self._array.__arrow_c_array__(requested_schema)


@needs_pyarrow
def test_ap_view_reads_an_object_that_speaks_only_arrow_and_pyarrow_gets_its_memory_back():
    start = pa.total_allocated_bytes()
    array = pa.array(np.arange(100, dtype=np.float64)).slice(10, 20)
    view = ap.view(ArrowOnly(array))
    assert view.protocol == "arrow" and view.readonly and view.shape == (20,)
    assert view.ptr == array.buffers()[1].address + 10 * 8
    np.testing.assert_array_equal(np.asarray(view), np.arange(10, 30, dtype=np.float64))
    del array
    gc.collect()
    assert pa.total_allocated_bytes() > start           # the View keeps the memory alive
    del view
    gc.collect()
    assert pa.total_allocated_bytes() == start          # released exactly once: all back


@needs_pyarrow
def test_pyarrow_nulls_booleans_strings_and_dictionaries_are_refused():
    cases = [(pa.array([1, None, 3]), "has 1 null"),
             (pa.array([True, False]), "boolean"),
             (pa.array(["a", "b"]), "utf-8 string"),
             (pa.array(["a", "b"]).dictionary_encode(), "dictionary-encoded"),
             (pa.array([[1], [2, 3]]), "'\\+l' \\(list\\)")]
    for array, message in cases:
        with pytest.raises(BufferError, match=message):
            ap.View.from_arrow(array)
    # a validity bitmap with no null in the rows taken is fine
    assert np.asarray(ap.View.from_arrow(pa.array([None, 1, 2]).slice(1))).tolist() == [1, 2]


@needs_pyarrow
def test_pyarrow_embeddings_and_fixed_shape_tensors():
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 4)
    view = ap.view(ArrowOnly(embeddings.slice(1)))
    np.testing.assert_array_equal(np.asarray(view), np.arange(12, dtype=np.float32)
                                  .reshape(3, 4)[1:])
    tensor_type = pa.fixed_shape_tensor(pa.int32(), (2, 3))
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(18, dtype=np.int32)), 6)
    tensors = pa.ExtensionArray.from_storage(tensor_type, storage)
    np.testing.assert_array_equal(np.asarray(ap.View.from_arrow(tensors)),
                                  tensors.to_numpy_ndarray())


# ---- fuzzing the schema side (hypothesis) ------------------------------------------------------
# Format strings, nesting, lengths, offsets, null counts and extension metadata drawn at
# random over real buffers: every outcome is a View or a BufferError, and the array is
# released at most once. (Buffer sizes are not part of the C data interface: lengths are
# drawn within the memory given, which the producer is trusted to describe.)

from optional import hypothesis_api  # noqa: E402

given, settings, st, HealthCheck = hypothesis_api()

_FORMATS = st.sampled_from(["c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g", "b", "u",
                            "z", "+l", "+s", "n", "tss:", "d:5,2", "w:4", "+w:0", "+w:-1",
                            "+w:x", "+w:99999999999", ""]) | st.text(max_size=6)
_METADATA = st.one_of(st.none(), st.dictionaries(
    st.sampled_from([b"ARROW:extension:name", b"ARROW:extension:metadata", b"other"]),
    st.sampled_from([b"arrow.fixed_shape_tensor", b"{}", b'{"shape": [2, 2]}',
                     b'{"shape": [4], "permutation": [0]}', b'{"shape": [-1]}',
                     b'{"shape": [2, 2], "permutation": [0, 0]}', b"not json", b""]),
    max_size=3))


@pytest.mark.slow   # 300 random schemas, over a minute: pytest --slow (CI) runs it
@given(formats=st.lists(_FORMATS, min_size=1, max_size=3), metadata=_METADATA,
       length=st.integers(-2, 8), offset=st.integers(-1, 4), null_count=st.integers(-2, 2),
       n_buffers=st.integers(0, 3))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_schemas_give_a_view_or_a_buffer_error_and_one_release(
        formats, metadata, length, offset, null_count, n_buffers):
    values = np.zeros(64, dtype=np.float64)              # room for every length drawn
    made = Made("g", values, length=max(length, 0), offset=max(offset, 0))
    for fmt in reversed(formats[:-1]):                   # wrap in the outer formats
        made = Made(fmt, None, length=max(length, 0), n_buffers=1, buffers=[None],
                    children=(made,))
    made.schema.format = formats[-1].encode() if formats[-1] else None
    made.schema.metadata = None if metadata is None else metadata_bytes(metadata)
    made.array.length, made.array.offset = length, offset
    made.array.null_count, made.array.n_buffers = null_count, max(min(n_buffers, 2), 0)
    try:
        view = ap.View.from_arrow(made.capsules())
    except BufferError:
        view = None
    if view is not None:
        assert view.readonly and view.nbytes <= values.nbytes
        del view
    gc.collect()
    assert made.released["array"] <= 1
    assert made.released["array"] == 1 or not made.array_released
