"""The Arrow C data interface, producer side (issue 35): a View as an Arrow array through
the PyCapsule protocol — zero-copy (the consumer's buffer is the View's memory), the View
kept alive until the consumer releases the array, exactly once, on any thread; layouts and
types Arrow cannot hold refused, never exported wrong.

A hand-written consumer (ctypes: tests/helpers/arrow_structs.py) needs only NumPy; the
pyarrow cases skip without it."""

import ctypes
import gc
import threading

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrow_structs import Array, Made, Schema
from optional import optional_module

pa = optional_module("pyarrow")
needs_pyarrow = pytest.mark.skipif(pa is None, reason="needs pyarrow (the [test] extra)")

_pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
_pointer_of.restype = ctypes.c_void_p
_pointer_of.argtypes = [ctypes.py_object, ctypes.c_char_p]


def exported():
    gc.collect()
    return _core.live_counts()["exported"]


def take(capsules):
    """Move the structs out of the capsules as a consumer does: copy them, NULL the
    capsules' release callbacks. Returns (schema, array) ctypes copies."""
    schema_capsule, array_capsule = capsules
    schema_at = _pointer_of(schema_capsule, b"arrow_schema")
    array_at = _pointer_of(array_capsule, b"arrow_array")
    schema, array = Schema.from_address(schema_at), Array.from_address(array_at)
    moved = Schema(), Array()
    ctypes.memmove(ctypes.addressof(moved[0]), schema_at, ctypes.sizeof(Schema))
    ctypes.memmove(ctypes.addressof(moved[1]), array_at, ctypes.sizeof(Array))
    schema.release = type(schema.release)()
    array.release = type(array.release)()
    return moved


def test_a_one_dimensional_view_is_a_primitive_array_over_its_memory():
    values = np.arange(6, dtype=np.int16)
    before = exported()
    schema, array = take(ap.view(values).__arrow_c_array__())
    assert schema.format == b"s" and schema.n_children == 0
    assert (array.length, array.null_count, array.offset, array.n_buffers) == (6, 0, 0, 2)
    assert array.buffers[0] is None and array.buffers[1] == values.ctypes.data
    assert exported() == before + 1                   # the View is held by the array
    array.release(ctypes.pointer(array))
    schema.release(ctypes.pointer(schema))
    assert not array.release and not schema.release
    assert exported() == before                       # released once: the View let go


def test_an_n_dimensional_view_is_nested_fixed_size_lists():
    values = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    schema, array = take(ap.view(values).__arrow_c_array__())
    assert schema.format == b"+w:3"
    child = schema.children[0].contents
    assert child.format == b"+w:4" and child.name == b"item"
    assert child.children[0].contents.format == b"g"
    assert array.length == 2 and array.n_buffers == 1 and array.n_children == 1
    inner = array.children[0].contents.children[0].contents
    assert inner.length == 24 and inner.buffers[1] == values.ctypes.data
    array.release(ctypes.pointer(array))
    schema.release(ctypes.pointer(schema))


def test_capsules_dropped_unread_release_what_they_hold():
    before = exported()
    capsules = ap.view(np.arange(4.0)).__arrow_c_array__()
    assert exported() == before + 1
    del capsules
    assert exported() == before


def test_the_release_may_come_from_another_thread():
    before = exported()
    schema, array = take(ap.view(np.arange(4.0)).__arrow_c_array__())
    worker = threading.Thread(target=lambda: array.release(ctypes.pointer(array)))
    worker.start()
    worker.join()
    schema.release(ctypes.pointer(schema))
    assert exported() == before


@pytest.mark.parametrize("make, message", [
    (lambda: np.arange(6.0)[::-2], "not C-contiguous|is not; export a copy"),
    (lambda: np.arange(12.0).reshape(3, 4).T, "export a copy"),
    (lambda: np.array(2.0), "0-d View has no Arrow form"),
    (lambda: np.zeros(3, bool), "no fixed-width number type for bool"),
    (lambda: np.zeros(3, np.complex64), "no fixed-width number type for complex64"),
])
def test_what_arrow_cannot_hold_is_refused(make, message):
    before = exported()
    view = ap.view(make())
    with pytest.raises(BufferError, match=message):
        view.__arrow_c_array__()
    with pytest.raises(BufferError, match=message):
        view.__arrow_c_schema__()
    assert exported() == before
    if "copy" in message:                              # the way out the message names
        assert len(view.copy().__arrow_c_array__()) == 2


def test_requested_schema_is_honoured_when_it_matches_and_otherwise_ignored():
    view = ap.view(np.arange(4, dtype=np.int32))
    same = Made("i", np.arange(1, dtype=np.int32)).capsules()[0]
    other = Made("l", np.arange(1, dtype=np.int64)).capsules()[0]
    for requested in (same, other, view.__arrow_c_schema__()):
        schema, array = take(view.__arrow_c_array__(requested))
        assert schema.format == b"i"                  # what arrayport exports, always
        array.release(ctypes.pointer(array))
        schema.release(ctypes.pointer(schema))
    with pytest.raises(TypeError, match="requested_schema must be an 'arrow_schema' capsule"):
        view.__arrow_c_array__(requested_schema="i")


def test_a_view_round_trips_through_arrow_to_the_same_memory():
    values = np.arange(12, dtype=np.uint32).reshape(3, 4)
    back = ap.View.from_arrow(ap.view(values).__arrow_c_array__())
    assert back.shape == (3, 4) and back.ptr == values.ctypes.data and back.readonly
    np.testing.assert_array_equal(np.asarray(back), values)


@needs_pyarrow
def test_pyarrow_takes_views_directly():
    values = np.arange(12, dtype=np.float32)
    before = exported()
    column = pa.array(ap.view(values))
    assert column.type == pa.float32() and column.buffers()[1].address == values.ctypes.data
    rows = pa.array(ap.view(values.reshape(3, 4)))
    assert rows.type == pa.list_(pa.field("item", pa.float32(), nullable=False), 4)
    assert rows.to_pylist()[2] == [8.0, 9.0, 10.0, 11.0]
    values[0] = 42.0                                   # one memory
    assert column[0].as_py() == 42.0 and rows[0][0].as_py() == 42.0
    assert pa.table({"x": column}).num_rows == 12
    read_only = ap.view(np.frombuffer(bytes(16), dtype=np.float64))
    assert pa.array(read_only).to_pylist() == [0.0, 0.0]     # Arrow never writes
    del column, rows
    assert exported() == before
