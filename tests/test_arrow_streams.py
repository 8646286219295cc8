"""Arrow streams, tables and the device interface on the host (issue 35): what
``__arrow_c_stream__`` and ``__arrow_c_device_array__`` give arrayport, and what a View
gives through them.

- A stream of one array (empty ones skipped) is a zero-copy View; of none, an empty View;
  of several, ``arrayport.view`` refuses with NeedsCopy and the converters make one
  concatenating copy. The stream is released once, every array once.
- A struct of one column (a record batch, a table, a DuckDB result) is that column; of
  several, refused with the advice to take one.
- A device array on the CPU (pyarrow's: device id -1) is a host View; a View's device export
  carries its device and no event when nothing is pending.
- A View's stream export is one array, which pyarrow, DuckDB and a hand-written reader take
  without a copy.

Hand-made producers (tests/helpers/arrow_structs.py) need NumPy only; pyarrow, Polars and
DuckDB cases skip without them. The CUDA half (sync events) is tests/test_gpu_arrow.py."""

import ctypes
import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrow_structs import (Array, ArrayStream, DeviceArray, Made, MadeStream, Schema,
                           device_capsules, fixed_size_list)
from optional import optional_module

pa = optional_module("pyarrow")
pl = optional_module("polars")
duckdb = optional_module("duckdb")
needs_pyarrow = pytest.mark.skipif(pa is None, reason="needs pyarrow (the [test] extra)")
needs_polars = pytest.mark.skipif(pl is None, reason="needs polars (the [interop] extra)")
needs_duckdb = pytest.mark.skipif(duckdb is None, reason="needs duckdb (the [interop] extra)")

_pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
_pointer_of.restype = ctypes.c_void_p
_pointer_of.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.fixture(autouse=True)
def nothing_held():
    gc.collect()
    before = _core.live_arrow_arrays(), _core.live_counts()["exported"]
    yield
    gc.collect()
    assert (_core.live_arrow_arrays(), _core.live_counts()["exported"]) == before


def values_address(view):
    return view.__array_interface__["data"][0]


# ---- streams: hand-made ------------------------------------------------------------------------

def test_a_stream_of_one_array_is_a_zero_copy_view_and_everything_is_released_once():
    chunk = Made("i", np.arange(6, dtype=np.int32), offset=2, length=3)
    stream = MadeStream([chunk])
    view = ap.View.from_arrow(stream.capsule())
    assert view.shape == (3,) and view.readonly and not view.is_copy
    assert values_address(view) == chunk.values.ctypes.data + 2 * 4
    chunk.values[3] = 99                                  # shared: the View sees it
    assert ap.to_numpy(view).tolist() == [2, 99, 4]
    assert stream.released == 1 and chunk.released == {"array": 0, "schema": 1}
    del view
    gc.collect()
    assert chunk.released == {"array": 1, "schema": 1}


def test_empty_arrays_of_a_stream_are_skipped_and_an_empty_stream_is_an_empty_view():
    empty = Made("f", np.zeros(0, np.float32))
    full = Made("f", np.arange(4, dtype=np.float32))
    stream = MadeStream([empty, full, Made("f", np.zeros(0, np.float32))])
    view = ap.View.from_arrow(stream.capsule())
    assert values_address(view) == full.values.ctypes.data and view.shape == (4,)
    assert empty.released["array"] == 1                   # not kept: released at once
    del view

    # A stream that ends at once: the schema's shape with no rows.
    schema_only = MadeStream([fixed_size_list(3, Made("g", np.zeros(0)), length=0)])
    schema_only.next = 1                                  # its one array already taken
    empty_view = ap.View.from_arrow(schema_only.capsule())
    assert empty_view.shape == (0, 3) and empty_view.dtype.name == "float64"
    assert ap.to_numpy(empty_view).shape == (0, 3)


def test_a_stream_of_several_arrays_needs_a_copy_which_the_converters_make():
    chunks = [Made("l", np.arange(3, dtype=np.int64)), Made("l", np.arange(3, 5, dtype=np.int64))]
    with pytest.raises(ap.NeedsCopy, match="the stream holds 2 arrays .5 rows.") as refused:
        ap.View.from_arrow(MadeStream(chunks).capsule())
    joined = refused.value.resolve()
    assert joined.is_copy and ap.to_numpy(joined).tolist() == [0, 1, 2, 3, 4]
    del refused, joined
    gc.collect()
    assert all(chunk.released["array"] == 1 for chunk in chunks)


def test_nested_lists_in_a_stream_are_joined_row_after_row():
    first = fixed_size_list(2, Made("s", np.arange(4, dtype=np.int16)))
    second = fixed_size_list(2, Made("s", np.arange(10, 16, dtype=np.int16)), offset=1,
                             length=2)
    with pytest.raises(ap.NeedsCopy) as refused:
        ap.View.from_arrow(MadeStream([first, second]).capsule())
    assert ap.to_numpy(refused.value.resolve()).tolist() == [[0, 1], [2, 3], [12, 13], [14, 15]]
    del refused       # its Views hold arrays whose release callbacks the Mades own


@pytest.mark.parametrize("fail_at", [0, 1])
def test_a_failing_stream_is_a_buffer_error_with_its_message_and_nothing_leaks(fail_at):
    chunks = [Made("i", np.arange(3, dtype=np.int32)), Made("i", np.arange(3, dtype=np.int32))]
    stream = MadeStream(chunks, fail_at=fail_at)
    with pytest.raises(BufferError, match=r"get_next failed \(5\): disk on fire"):
        ap.View.from_arrow(stream.capsule())
    gc.collect()
    assert stream.released == 1
    assert chunks[0].released == {"array": 1 if fail_at == 1 else 0, "schema": 1}


def test_a_stream_whose_schema_fails_or_has_no_strided_form_is_refused_once():
    stream = MadeStream([Made("i", np.arange(3, dtype=np.int32))], schema_fails=True)
    with pytest.raises(BufferError, match="get_schema failed"):
        ap.View.from_arrow(stream.capsule())
    assert stream.released == 1
    strings = Made("u", None, n_buffers=3, buffers=[None, None, None], length=0)
    stream = MadeStream([strings])
    with pytest.raises(BufferError, match="arrow: .*string"):
        ap.View.from_arrow(stream.capsule())
    assert stream.released == 1 and strings.released["schema"] == 1


def test_a_released_or_foreign_stream_capsule_is_refused():
    stream = MadeStream([Made("i", np.arange(3, dtype=np.int32))])
    capsule = stream.capsule()
    ap.View.from_arrow(capsule)
    with pytest.raises(BufferError, match="already released"):
        ap.View.from_arrow(capsule)
    with pytest.raises(BufferError, match="expected an 'arrow_array_stream' capsule"):
        _core.view_from_arrow(Made("i", np.arange(3, dtype=np.int32)).capsules()[1])
    with pytest.raises(ValueError, match="stream must be None"):
        _core.view_from_arrow(MadeStream([]).capsule(), stream=5)


# ---- structs (record batches) ------------------------------------------------------------------

def struct_of(*columns, **options):
    length = options.pop("length", columns[0].array.length if columns else 0)
    return Made("+s", None, length=length, n_buffers=1, buffers=[None], children=columns,
                **options)


def test_a_struct_of_one_column_is_that_column():
    values = Made("f", np.arange(8, dtype=np.float32))
    batch = struct_of(fixed_size_list(2, values), offset=1, length=2)
    view = ap.View.from_arrow(batch.capsules())
    assert view.shape == (2, 2)
    assert ap.to_numpy(view).tolist() == [[2, 3], [4, 5]]
    assert values_address(view) == values.values.ctypes.data + 2 * 4


def test_a_struct_of_several_columns_is_refused_with_the_advice_to_take_one():
    batch = struct_of(Made("f", np.zeros(2, np.float32)), Made("f", np.zeros(2, np.float32)))
    with pytest.raises(BufferError, match="struct .record batch. of 2 columns.*take one"):
        ap.View.from_arrow(batch.capsules())
    assert not batch.array_released


def test_a_struct_row_that_reaches_past_its_column_is_refused():
    batch = struct_of(Made("f", np.zeros(2, np.float32)), length=3)
    with pytest.raises(BufferError, match="child array holds 2 elements"):
        ap.View.from_arrow(batch.capsules())


# ---- the device interface on the CPU -----------------------------------------------------------

def test_a_cpu_device_array_is_a_host_view_with_the_id_convention():
    made = Made("g", np.arange(4.0))
    view = ap.View.from_arrow(device_capsules(made, device_type=1, device_id=-1))
    assert view.device == (1, 0) and values_address(view) == made.values.ctypes.data
    assert not made.device_struct.array.release             # moved out of the capsule
    del view
    gc.collect()
    assert made.released["array"] == 1


@pytest.mark.parametrize("device_type, device_id, message", [
    (1, -2, "device id -2 is out of range"),
    (2, -1, "device id -1 is out of range"),
    (99, 0, "device type 99 is not one Arrow defines"),
])
def test_a_device_array_with_a_bad_device_is_refused(device_type, device_id, message):
    made = Made("g", np.arange(4.0))
    with pytest.raises((BufferError, ValueError), match=message):
        ap.View.from_arrow(device_capsules(made, device_type=device_type, device_id=device_id))
    gc.collect()
    assert made.released["array"] <= 1


@pytest.mark.parametrize("device_type, message", [
    (4, "(?i)opencl.*sync event"), (7, "(?i)vulkan.*sync event"),
    (14, "(?i)oneapi.*sync event")])
def test_a_sync_event_arrayport_cannot_wait_for_is_refused_not_dropped(device_type, message):
    made = Made("g", np.arange(4.0))
    event = ctypes.c_void_p(0x1234)
    with pytest.raises(BufferError, match=message):
        ap.View.from_arrow(device_capsules(made, device_type=device_type, device_id=0,
                                           sync_event=ctypes.addressof(event)))
    gc.collect()
    assert made.released["array"] == 0 and made.device_struct.array.release  # not taken


def test_the_array_is_asked_first_and_the_device_array_when_it_cannot_be_given():
    class Producer:
        """pyarrow's shape: both methods; __arrow_c_array__ refuses data not on the CPU."""

        def __init__(self, on_host):
            self.made, self.on_host, self.asked = Made("g", np.arange(3.0)), on_host, []

        def __arrow_c_array__(self, requested_schema=None):
            self.asked.append("array")
            if not self.on_host:
                raise NotImplementedError("the data is not on the CPU")
            return self.made.capsules()

        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            self.asked.append("device")
            return device_capsules(self.made)

    host, elsewhere = Producer(True), Producer(False)
    assert ap.to_numpy(ap.View.from_arrow(host)).tolist() == [0, 1, 2]
    assert ap.to_numpy(ap.View.from_arrow(elsewhere)).tolist() == [0, 1, 2]
    assert (host.asked, elsewhere.asked) == (["array"], ["array", "device"])
    with pytest.raises(ValueError, match="stream must be None for cpu memory"):
        ap.View.from_arrow(Producer(True), stream=5)   # a stream: the device array, on CPU
    gc.collect()


def test_a_cpu_sync_event_means_nothing_and_is_not_read():
    made = Made("g", np.arange(4.0))
    view = ap.View.from_arrow(device_capsules(made, device_type=1, device_id=-1,
                                              sync_event=0x10))   # not a readable address
    assert view.device == (1, 0)
    del view


@pytest.mark.parametrize("device_type", [17, 18])
def test_device_kinds_arrow_has_no_number_for_are_refused(device_type):
    made = Made("g", np.arange(4.0))
    with pytest.raises(BufferError, match=f"device type {device_type} is not one Arrow"):
        ap.View.from_arrow(device_capsules(made, device_type=device_type, device_id=0))


def test_an_arrow_capsule_given_as_dlpack_says_where_it_goes():
    with pytest.raises(BufferError, match="Arrow capsule: read it with arrayport.View.from_arrow"):
        ap.from_dlpack(MadeStream([Made("i", np.arange(2, dtype=np.int32))]).capsule())


def test_a_device_array_of_device_memory_with_uncounted_nulls_is_refused():
    # The validity bitmap would be in device memory: arrayport cannot count it.
    bits = np.array([0b1111], np.uint8)
    made = Made("g", np.arange(4.0), null_count=-1, validity=bits.ctypes.data)
    made.keep.append(bits)
    with pytest.raises(BufferError, match="cannot count its nulls"):
        ap.View.from_arrow(device_capsules(made, device_type=2, device_id=0))
    gc.collect()
    assert made.released["array"] == 1


def test_a_view_device_export_of_host_memory_has_no_event():
    data = np.arange(5, dtype=np.uint16)
    schema, array = ap.view(data).__arrow_c_device_array__()
    struct = DeviceArray.from_address(_pointer_of(array, b"arrow_device_array"))
    # Arrow's convention for a device without ids: -1 (pyarrow's too)
    assert (struct.device_type, struct.device_id, struct.sync_event) == (1, -1, None)
    assert struct.array.length == 5
    assert ctypes.cast(struct.array.buffers, ctypes.POINTER(ctypes.c_void_p))[1] \
        == data.ctypes.data
    again = ap.View.from_arrow((schema, array))
    assert values_address(again) == data.ctypes.data
    del schema, array, again, struct


def test_device_export_keywords_follow_the_interface():
    view = ap.view(np.arange(3.0))
    view.__arrow_c_device_array__(some_future_keyword=None)     # None: accepted
    with pytest.raises(NotImplementedError, match="some_future_keyword"):
        view.__arrow_c_device_array__(some_future_keyword=1)
    with pytest.raises(TypeError, match="requested_schema must be an 'arrow_schema'"):
        view.__arrow_c_device_array__(requested_schema=object())


# ---- a View's stream export ----------------------------------------------------------------------

def read_stream(capsule):
    """Read a stream capsule as a consumer does: move it out, get_schema, get_next until
    the end, release. Returns (formats, [array lengths], [values addresses])."""
    source = ArrayStream.from_address(_pointer_of(capsule, b"arrow_array_stream"))
    stream = ArrayStream()
    ctypes.memmove(ctypes.addressof(stream), ctypes.addressof(source), ctypes.sizeof(stream))
    source.release = type(source.release)()
    schema = Schema()
    assert stream.get_schema(ctypes.byref(stream), ctypes.byref(schema)) == 0
    fmt = schema.format
    schema.release(ctypes.byref(schema))
    lengths, addresses = [], []
    while True:
        array = Array()
        assert stream.get_next(ctypes.byref(stream), ctypes.byref(array)) == 0
        if not array.release:
            break
        lengths.append(array.length)
        addresses.append(ctypes.cast(array.buffers, ctypes.POINTER(ctypes.c_void_p))[1])
        array.release(ctypes.byref(array))
    stream.release(ctypes.byref(stream))
    return fmt, lengths, addresses


def test_a_view_stream_is_one_array_over_its_memory_and_holds_it_until_released():
    data = np.arange(7, dtype=np.float32)
    view = ap.view(data)
    capsule = view.__arrow_c_stream__()
    assert _core.live_counts()["exported"] >= 1
    assert read_stream(capsule) == (b"f", [7], [data.ctypes.data])
    del capsule
    # A stream dropped unread releases its array.
    view.__arrow_c_stream__()
    gc.collect()


def test_a_view_stream_round_trips_through_arrayport():
    data = np.arange(12, dtype=np.int8).reshape(4, 3)
    again = ap.View.from_arrow(ap.view(data).__arrow_c_stream__())
    assert again.shape == (4, 3) and values_address(again) == data.ctypes.data


# ---- real producers and consumers --------------------------------------------------------------

@needs_pyarrow
def test_pyarrow_chunked_arrays_one_chunk_zero_copy_several_copied_by_converters():
    start = pa.total_allocated_bytes()
    values = pa.array(np.arange(6, dtype=np.float64))
    one = pa.chunked_array([values.slice(0, 0), values.slice(2, 3)])
    view = ap.view(one)
    assert values_address(view) == values.buffers()[1].address + 2 * 8
    several = pa.chunked_array([values.slice(0, 2), values.slice(4, 2)])
    with pytest.raises(ap.NeedsCopy, match="2 arrays"):
        ap.view(several)
    joined = ap.to_numpy(several)
    assert joined.tolist() == [0.0, 1.0, 4.0, 5.0]
    with pytest.raises(ap.NeedsCopy):
        ap.to_numpy(several, copy=False)
    empty = ap.view(pa.chunked_array([], type=pa.int32()))
    assert empty.shape == (0,) and empty.dtype.name == "int32"
    del view, one, several, joined, values, empty
    gc.collect()
    assert pa.total_allocated_bytes() == start


@needs_pyarrow
def test_pyarrow_tables_and_record_batches_of_one_column():
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.float32)), 4)
    table = pa.table({"embedding": embeddings})
    view = ap.View.from_arrow(table)                          # Arrow asked: the column
    assert view.shape == (2, 4) and ap.to_numpy(view)[1].tolist() == [4, 5, 6, 7]
    batch = pa.record_batch({"x": pa.array([1, 2, 3], pa.int16())})
    assert ap.View.from_arrow(batch).shape == (3,)              # through its Arrow array
    # ap.view asks an object with __array__ for its array, as NumPy reads it: (rows, 1),
    # which pyarrow only copies; the converters make that copy.
    with pytest.raises(ap.NeedsCopy, match="RecordBatch.__array__"):
        ap.view(batch)
    assert ap.to_numpy(batch).shape == np.asarray(batch).shape == (3, 1)
    with pytest.raises(BufferError, match="2 columns"):
        ap.View.from_arrow(pa.table({"a": [1.0], "b": [2.0]}))


@needs_pyarrow
def test_view_reports_arrow_s_refusal_of_an_arrow_array():
    # pyarrow's DLPack export refuses too ("Can only use DLPack on arrays with no nulls"),
    # but Arrow's refusal says how many and what to do.
    with pytest.raises(BufferError, match="has 1 null.*fill them"):
        ap.view(pa.array([1.0, None, 3.0]))
    with pytest.raises(BufferError, match="utf-8 string"):
        ap.view(pa.array(["a", "b"]))


@needs_pyarrow
def test_pyarrow_reads_a_view_as_a_stream_and_a_device_array_zero_copy():
    data = np.arange(5, dtype=np.int32)
    chunked = pa.chunked_array(ap.view(data))  # a column's stream, as ChunkedArray gives
    assert chunked.num_chunks == 1 and chunked.chunk(0).buffers()[1].address == data.ctypes.data
    from_device = pa.array(ap.view(data))      # pa.array prefers __arrow_c_device_array__
    assert from_device.buffers()[1].address == data.ctypes.data
    del chunked, from_device


@needs_polars
def test_polars_series_through_its_stream():
    series = pl.Series("x", np.arange(5, dtype=np.float32))
    view = ap.view(series)
    assert ap.to_numpy(view).tolist() == [0, 1, 2, 3, 4]
    assert values_address(view) == values_address(ap.view(series.to_numpy()))
    chunked = pl.concat([series, series], rechunk=False)
    assert chunked.n_chunks() == 2
    with pytest.raises(ap.NeedsCopy, match="2 arrays"):
        ap.View.from_arrow(chunked)
    assert ap.to_numpy(chunked).tolist() == [0, 1, 2, 3, 4] * 2
    del view


@needs_duckdb
def test_duckdb_scans_a_view_and_its_results_become_views():
    data = np.arange(6, dtype=np.float64)
    view = ap.view(data)
    assert [row[0] for row in duckdb.sql("select * from view").fetchall()] == data.tolist()
    result = duckdb.sql("select range::DOUBLE as x from range(4)")
    assert ap.to_numpy(result).tolist() == [0.0, 1.0, 2.0, 3.0]     # its one column
    embeddings = duckdb.sql("select [i, i + 1]::FLOAT[2] as e from range(3) t(i)")
    assert ap.view(embeddings).shape == (3, 2)          # no __array__: the column is read
    with pytest.raises(BufferError, match="2 columns"):
        ap.view(duckdb.sql("select 1.0 as a, 2.0 as b"))
    del view


# ---- found by the fuzzer ------------------------------------------------------------------------

@pytest.mark.parametrize("length, offset", [(1, 2**63 - 1), (2**62, 2**62), (2**61, 0)])
def test_lengths_and_offsets_whose_sizes_overflow_are_refused_before_any_read(length, offset):
    # A bitmap is read over the rows only once they are known to fit: before, a struct
    # claiming 2**63 - 1 rows had its one-byte bitmap scanned for nulls far past its end.
    bits = np.zeros(1, np.uint8)
    column = Made("l", np.arange(2, dtype=np.int64))
    batch = struct_of(column, length=length, offset=offset, null_count=-1,
                      validity=bits.ctypes.data)
    batch.keep.append(bits)
    with pytest.raises(BufferError, match="child array holds 2|overflow"):
        ap.View.from_arrow(batch.capsules())
    primitive = Made("l", np.arange(2, dtype=np.int64), length=length, offset=offset)
    if length < 2**61:
        with pytest.raises(BufferError, match="overflow"):
            ap.View.from_arrow(primitive.capsules())
