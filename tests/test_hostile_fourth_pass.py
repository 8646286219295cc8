"""The fourth hostile pass (issue 51), one test per case found, on any machine; the cases
that need the CUDA simulator are in the GPU suite (tests/test_gpu_fourth_pass.py).

Here: Arrow columns and tables whose nulls became NaN through ``__array__``; output
arguments (``Spec(writable=True)``) met by a private copy; stream values past a pointer's
range; ``explain`` announcing a copy the converter then refuses; ``empty_shared`` sizes
past what the system call takes; copy announcements under ``copy=True`` and nested
``warn_on_copies`` blocks; DLPack's codes added after the 1.3 tag."""

import gc
import warnings

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from optional import optional_module
from producer import spec

pa = optional_module("pyarrow")
pl = optional_module("polars")
torch = optional_module("torch")
needs_pyarrow = pytest.mark.skipif(pa is None, reason="needs pyarrow (the [test] extra)")
needs_polars = pytest.mark.skipif(pl is None, reason="needs polars (the [interop] extra)")
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch (the [test] extra)")


@pytest.fixture(autouse=True)
def nothing_left_held():
    yield
    gc.collect()
    assert _core.live_arrow_arrays() == 0


class _CopiesOnly:
    """A producer whose ``__array__`` can only copy (NumPy 2's refusal of ``copy=False``:
    NeedsCopy for ``arrayport.view``), counting the copies it makes; ``values`` what they
    hold (floats, as pyarrow's ``__array__`` makes of an int column with nulls)."""

    def __init__(self, values=(0.0, 1.0, 2.0)):
        self.values, self.copies = np.asarray(values), 0

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a copy is needed")
        self.copies += 1
        return self.values.copy()


class _CopiesOnlyWithStream(_CopiesOnly):
    """The same, with an Arrow stream: ``arrow``'s, or one that fails (None)."""

    def __init__(self, arrow=None, values=(0.0, 1.0, 2.0)):
        super().__init__(values)
        self.arrow = arrow

    def __arrow_c_stream__(self, requested_schema=None):
        if self.arrow is None:
            raise RuntimeError("boom")
        return self.arrow.__arrow_c_stream__(requested_schema)


# ---- 1. Arrow columns and tables: nulls refused, the type kept ----------------------------------

def _converters():
    routes = [("view", ap.view), ("to_numpy", ap.to_numpy),
              ("require", lambda x: ap.require(x, dtype="int32")),
              ("to", lambda x: ap.to(x, "numpy"))]
    if torch is not None:
        routes.append(("to_torch", ap.to_torch))
    return routes


@needs_pyarrow
@pytest.mark.parametrize("route", [name for name, _ in _converters()])
def test_a_chunked_column_with_a_null_is_refused_on_every_route(route):
    column = pa.table({"x": pa.array([1, None, 3], pa.int32())})["x"]
    assert isinstance(column, pa.ChunkedArray)
    convert = dict(_converters())[route]
    # Before: __array__'s copy, tensor([1., nan, 3.], dtype=torch.float64).
    with pytest.raises(BufferError, match="the array has 1 null.*fill them"):
        convert(column)


@needs_pyarrow
def test_explain_and_copy_warnings_agree_with_the_refusal_of_a_null_column():
    column = pa.chunked_array([pa.array([1, None, 3], pa.int32())])
    said = ap.explain(column, "numpy")
    assert said.refused and not said.copies and "1 null" in said.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error", ap.CopyWarning)     # nothing announced, nothing made
        with ap.warn_on_copies(), pytest.raises(BufferError, match="1 null"):
            ap.to_numpy(column)


@needs_pyarrow
def test_a_chunked_column_keeps_its_type_one_chunk_shared_several_joined_by_arrow():
    values = pa.array(np.arange(6, dtype=np.int32))
    one = pa.chunked_array([values.slice(1, 3)])
    shared = ap.to_numpy(one)
    assert shared.dtype == np.int32 and shared.tolist() == [1, 2, 3]
    assert shared.ctypes.data == values.buffers()[1].address + 4            # zero-copy
    several = pa.chunked_array([values.slice(0, 2), values.slice(4, 2)])
    joined = ap.to_numpy(several)
    assert joined.dtype == np.int32 and joined.tolist() == [0, 1, 4, 5]     # not float64
    said = ap.explain(several, "numpy")
    assert said.copies and said.route == "arrow" and "2 arrays" in said.reason
    with ap.warn_on_copies(), pytest.warns(ap.CopyWarning, match="2 arrays"):
        ap.to_numpy(several)
    assert ap.require(several, dtype="int32").dtype.name == "int32"
    # Nulls outside the rows taken are no nulls (a slice after them).
    after = pa.chunked_array([pa.array([None, 7, 8], pa.int32()).slice(1)])
    assert ap.to_numpy(after).tolist() == [7, 8]
    del shared, one, several, joined, values, after


@needs_pyarrow
def test_a_type_the_stream_cannot_give_is_left_to_array_s_copy_unless_it_holds_a_null():
    # Booleans and dictionary-encoded columns have no strided form: __array__'s copy of
    # them is exact, and is taken — unless a null would become NaN (or None) in it.
    assert ap.to_numpy(pa.chunked_array([[True, False]])).tolist() == [True, False]
    encoded = pa.chunked_array([pa.array([1, 2, 1]).dictionary_encode()])
    assert ap.to_numpy(encoded).tolist() == [1, 2, 1]
    for column in (pa.chunked_array([[True, None]]),
                   pa.chunked_array([pa.array([1, None, 1]).dictionary_encode()]),
                   pa.chunked_array([pa.DictionaryArray.from_arrays(
                       pa.array([0, 1, 0], pa.int8()), pa.array([1, None], pa.int64()))])):
        with pytest.raises(BufferError, match="1 null"):
            ap.to_numpy(column)


def test_a_stream_that_fails_leaves_array_s_copy_to_speak():
    assert ap.to_numpy(_CopiesOnlyWithStream()).tolist() == [0.0, 1.0, 2.0]


@needs_pyarrow
@pytest.mark.parametrize("make", [
    lambda: pa.table({"x": pa.array([1, None, 3], pa.int32()), "y": [1.0, 2.0, 3.0]}),
    lambda: pa.record_batch({"y": [1.0, 2.0, 3.0], "x": pa.array([1, None, 3], pa.int32())}),
    lambda: pa.table({"x": pa.nulls(3, pa.int32()), "y": [1.0, 2.0, 3.0]}),
], ids=["table", "record-batch", "all-null"])
def test_a_table_with_a_null_is_refused_not_read_as_nan(make):
    table = make()
    assert np.isnan(np.asarray(table)).any()          # what NumPy's reading of it does
    with pytest.raises(BufferError, match="column 'x' of the table holds .* null"):
        ap.to_numpy(table)
    assert ap.explain(table, "numpy").refused


@needs_pyarrow
@pytest.mark.parametrize("column", [
    lambda: pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int8()),
                                           pa.array([1, None], pa.int64())),
    lambda: pa.RunEndEncodedArray.from_arrays([2, 3], pa.array([1.0, None])),
], ids=["nulls-in-the-dictionary", "nulls-in-run-end-values"])
def test_a_table_column_whose_nulls_live_in_another_array_is_refused(column):
    table = pa.table({"x": column(), "y": [1.0, 2.0, 3.0]})
    with pytest.raises(BufferError, match="column 'x' of the table holds"):
        ap.to_numpy(table)


@needs_pyarrow
def test_a_table_without_nulls_in_its_rows_is_still_read_as_numpy_reads_it():
    table = pa.table({"x": pa.array([1, None, 3], pa.int32()), "y": [1.0, 2.0, 3.0]})
    rows = table.slice(2)                               # past the null
    assert ap.to_numpy(rows).tolist() == np.asarray(rows).tolist() == [[3.0, 3.0]]
    whole = pa.table({"x": pa.array([1, 2], pa.int32())})
    assert ap.to_numpy(whole).tolist() == [[1], [2]]


@needs_polars
def test_a_polars_series_with_a_null_gets_arrow_s_reason():
    series = pl.Series("x", [1, None, 3], dtype=pl.Int32)
    with pytest.raises(BufferError, match="the array has 1 null"):
        ap.to_numpy(series)
    with pytest.raises(BufferError, match="column 'x' of the table holds 1 null"):
        ap.to_numpy(pl.DataFrame({"x": series, "y": [1.0, 2.0, 3.0]}))


@needs_pyarrow
def test_any_object_with_a_column_stream_is_read_through_it_not_its_array():
    # its __array__ makes floats with NaN, as pyarrow's does; its stream is the truth
    thing = _CopiesOnlyWithStream(pa.chunked_array([pa.array([1, None, 3], pa.int8())]),
                                  values=[1.0, np.nan, 3.0])
    with pytest.raises(BufferError, match="1 null"):
        ap.to_numpy(thing)
    clean = _CopiesOnlyWithStream(pa.chunked_array([pa.array([1, 2, 3], pa.int8())]))
    assert ap.to_numpy(clean).dtype == np.int8 and clean.copies == 0


# ---- 3. stream values past a pointer's range ----------------------------------------------------

@pytest.mark.parametrize("stream", [2**64, 2**64 + 5, 2**70])
def test_stream_values_past_a_pointer_are_refused_at_the_door(stream):
    with pytest.raises(ValueError, match="not a stream handle"):
        _core.check_stream(stream, 2)                     # CUDA: DLPack's values
    with pytest.raises(ValueError, match="not a stream handle"):
        _core.check_stream(stream, 10)                    # ROCm
    assert _core.check_stream(2**64 - 1, 2) == 2**64 - 1  # the largest pointer is one


class _DeviceArray:
    def __init__(self, stream):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<f4",
                                         "data": (0x1000, False), "version": 3,
                                         "stream": stream}


@pytest.mark.parametrize("stream", [2**64, 2**64 + 1])
def test_a_cuda_array_interface_stream_past_a_pointer_is_refused(stream):
    with pytest.raises(ValueError, match="cuda_array_interface: stream .* not a stream handle"):
        ap.view(_DeviceArray(stream))


# ---- 2. an output argument is the caller's own memory, never a copy -----------------------------

def _read_only(array):
    array.flags.writeable = False
    return array


def test_writable_true_refuses_read_only_memory_naming_the_argument():
    frozen = _read_only(np.zeros(3))

    @ap.accepts(out=ap.Spec(dtype="float64", writable=True))
    def fill(out):
        np.asarray(out)[...] = 7.0

    with pytest.raises(ap.RequirementError, match="argument 'out': expected writable memory, "
                                                  "got a read-only View; read-only memory is "
                                                  "refused, not copied") as caught:
        fill(frozen)       # before: met by a private copy, the 7s lost to the caller
    assert caught.value.constraint == "writable" and caught.value.argument == "out"
    assert "writable='copy'" in str(caught.value)
    writable = np.zeros(3)
    fill(writable)
    assert writable.tolist() == [7.0, 7.0, 7.0]        # the caller's memory, written


def test_writable_true_hands_over_the_caller_s_memory_itself():
    array = np.zeros((2, 3), np.float32)
    view = ap.require(array, writable=True)
    assert view.ptr == array.ctypes.data and not view.is_copy and not view.readonly


@pytest.mark.parametrize("constraints, constraint", [
    (dict(order="C"), "order"),
    (dict(align=4096), "align"),
    (dict(dtype="float32", cast=True), "dtype"),
])
def test_writable_true_refuses_what_only_a_copy_could_meet(constraints, constraint):
    array = np.zeros((4, 3))[:, ::2]                   # F-ish, strided, float64
    if constraint == "align":
        array = np.zeros(4096 + 8, np.uint8)[8:].view(np.float64)
    with pytest.raises(ap.RequirementError, match="writable=True: (only a copy would meet "
                                                  "it|a cast is a copy)") as caught:
        ap.require(array, writable=True, **constraints)
    assert caught.value.constraint == constraint


def test_writable_true_refuses_python_values_and_producers_that_only_copy():
    with pytest.raises(ap.RequirementError, match="a Python list holds no array memory to "
                                                  "write into") as caught:
        ap.require([1.0, 2.0], writable=True)
    assert caught.value.constraint == "writable"

    producer = _CopiesOnly()
    with pytest.raises(ap.RequirementError, match="expected the caller's own writable "
                                                  "memory, but array: "):
        ap.require(producer, writable=True)
    assert producer.copies == 0


@needs_torch
def test_writable_true_refuses_a_lazy_conjugate_tensor_whose_copy_would_take_the_writes():
    lazy = torch.zeros(3, dtype=torch.complex64).conj()
    with pytest.raises(ap.RequirementError, match="conjugate"):
        ap.require(lazy, writable=True)


def test_writable_true_refuses_an_array_method_that_copies_whatever_copy_false_asks():
    class Fresh:                      # ignores copy=False: a new array at every call
        def __init__(self):
            self.data = [0.0, 0.0]

        def __array__(self, dtype=None, copy=None):
            return np.array(self.data)

    class Holds:                      # shares its own array, as copy=False asks
        def __init__(self):
            self.array = np.zeros(2)

        def __array__(self, dtype=None, copy=None):
            return self.array

    with pytest.raises(ap.RequirementError, match="returned a new array nobody else holds"):
        ap.require(Fresh(), writable=True)
    holder = Holds()
    np.asarray(ap.require(holder, writable=True))[:] = 5.0
    assert holder.array.tolist() == [5.0, 5.0]


def test_writable_true_with_cast_says_a_cast_is_a_copy():
    with pytest.raises(ap.RequirementError, match="writable=True: a cast is a copy"):
        ap.require(np.zeros(4, np.float32), dtype="float64", writable=True, cast=True)


def test_a_flag_given_as_1_is_refused_even_after_true_was_cached():
    ap.require(np.zeros(2), writable=True)
    with pytest.raises(TypeError, match="writable must be"):
        ap.require(np.zeros(2), writable=1)          # 1 == True: once taken from the cache


def test_writable_true_and_copy_true_contradict():
    with pytest.raises(ValueError, match="writable='copy'"):
        ap.require(np.zeros(3), writable=True, copy=True)


def test_writable_copy_is_the_asked_for_private_copy():
    frozen = _read_only(np.zeros(3))
    spec = ap.Spec(writable="copy")
    assert spec.writable == "copy" and repr(spec) == "Spec(writable='copy')"
    mine = ap.require(frozen, spec=spec)
    assert mine.is_copy and not mine.readonly
    import pickle
    assert pickle.loads(pickle.dumps(spec)) == spec


# ---- 3. explain and CopyWarning: the target's own checks speak first ---------------------------

@needs_torch
@needs_pyarrow
def test_explain_of_a_lazy_conjugate_for_arrow_is_arrow_s_refusal_not_a_copy():
    lazy = torch.zeros(3, dtype=torch.complex64).conj()
    said = ap.explain(lazy, "pyarrow")
    # Before: "a copy" (it stopped at the resolution, before Arrow's dtype check).
    assert said.refused and not said.copies and "complex64" in said.reason
    with pytest.raises(ap.TypeNotHeld, match="complex64"):
        ap.to(lazy, "pyarrow")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ap.CopyWarning)     # no copy announced for a refusal
        with ap.warn_on_copies(), pytest.raises(ap.TypeNotHeld):
            ap.to(lazy, "pyarrow")
    told = ap.explain(lazy, "numpy")                       # NumPy holds complex: a copy
    assert told.copies and "conjugate bit" in told.reason
    with ap.warn_on_copies(), pytest.warns(ap.CopyWarning, match="conjugate bit"):
        ap.to(lazy, "numpy")


def test_explain_never_reads_what_an_array_method_would_copy():
    on_disk = _CopiesOnly()          # an h5py / zarr dataset: its __array__ reads it all
    said = ap.explain(on_disk, "numpy")
    assert said.copies and on_disk.copies == 0    # explained, nothing read


@needs_pyarrow
def test_explain_does_not_join_arrow_chunks():
    values = pa.array(np.arange(4, dtype=np.int64))
    several = pa.chunked_array([values.slice(0, 2), values.slice(2, 2)])
    before = pa.total_allocated_bytes()
    assert ap.explain(several, "numpy").copies
    assert pa.total_allocated_bytes() == before


@needs_torch
def test_an_explain_inside_an_explained_conversion_leaves_its_state_alone():
    from arrayport import copy_watch
    with copy_watch._Explaining():
        assert copy_watch.unasked_core_copy("arrayport", "the outer reason", False, True)
        inner = ap.explain(_frozen(), "torch", readonly="share")   # tells a warning
        assert "ReadOnlySharedWarning" in inner.reason
        assert copy_watch.resolved_reason() == "the outer reason"
        assert copy_watch.told() == []


@needs_pyarrow
def test_explain_of_arrow_chunks_agrees_with_the_conversion():
    several = pa.chunked_array([pa.array([1, 2], pa.uint16()), pa.array([3], pa.uint16())])
    assert ap.explain(several, "numpy").copies
    if optional_module("jax") is not None:
        said = ap.explain(several, "jax")
        assert said.copies or said.refused     # what the conversion does, whichever
        try:
            ap.to(several, "jax")
            assert said.copies
        except (BufferError, TypeError, ValueError):
            assert said.refused


# ---- 4. survivors of mutation audit 3: the copy announcements ----------------------------------

def _frozen():
    array = np.arange(4.0)
    array.flags.writeable = False
    return array


def test_a_copy_asked_for_with_copy_true_is_never_announced():
    with ap.warn_on_copies(), warnings.catch_warnings():
        warnings.simplefilter("error", ap.CopyWarning)
        ap.to_numpy(_CopiesOnly(), copy=True)                 # the core's resolution
        ap.to(_CopiesOnly(), "numpy", copy=True)
        ap.require(np.zeros((3, 2)).T, order="C", copy=True)  # contracts
        ap.from_dlpack(np.zeros(3), copy=True)
        if torch is not None:
            ap.to_torch(_frozen(), copy=True)                 # an adapter's copied()
    with ap.warn_on_copies(), pytest.warns(ap.CopyWarning):   # the same, unasked: announced
        ap.to_numpy(_CopiesOnly())


def test_warn_on_copies_false_inside_an_enabled_state_turns_them_back_on_at_its_end():
    switch = ap.warn_on_copies()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ap.CopyWarning)
            with ap.warn_on_copies(False):
                ap.to_numpy(_CopiesOnly())                    # off inside the block
        with pytest.warns(ap.CopyWarning, match="arrayport copied the data"):
            ap.to_numpy(_CopiesOnly())                        # on again after it
        with ap.warn_on_copies():                             # a nested block ends ...
            pass
        with pytest.warns(ap.CopyWarning):
            ap.to_numpy(_CopiesOnly())                        # ... leaving the switch on
    finally:
        switch.__exit__(None, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ap.CopyWarning)
        ap.to_numpy(_CopiesOnly())                            # off once the switch is undone


# ---- 3. empty_shared sizes past a file's ---------------------------------------------------------

@pytest.mark.parametrize("shape, dtype", [((2**63,), "uint8"), ((2**62, 2), "uint8"),
                                          ((2**61,), "float64"), ((2**64,), "uint8")])
def test_empty_shared_past_a_file_size_is_a_value_error_before_the_system_call(shape, dtype):
    with pytest.raises(ValueError, match="empty_shared: shape .* fit in int64"):
        ap.empty_shared(shape, dtype)       # before: OverflowError from ftruncate


def test_empty_shared_of_an_extent_past_int64_is_a_value_error_before_the_system_call():
    with pytest.raises(ValueError, match="does not fit in int64"):
        ap.empty_shared((0, 2**70), "uint8")


def test_empty_shared_that_cannot_be_mapped_is_a_memory_error():
    with pytest.raises(MemoryError, match="cannot map"):
        ap.empty_shared((2**62,), "uint8")  # a file size, but no address space holds it


# ---- 5. DLPack's codes added after the 1.3 tag -------------------------------------------------

BCOMPLEX32 = (18, 32, 1)


def test_bcomplex32_is_a_dtype_through_the_dlpack_paths(producer, live):
    view = ap.from_dlpack(producer.capsule(spec(shape=(2, 3), dtype=BCOMPLEX32)))
    assert view.dtype.name == "bcomplex32" and view.dtype.code == ap.DTypeCode.BCOMPLEX
    assert view.itemsize == 4 and view.nbytes == 24 and view.strides == (12, 4)
    assert ap.DType("bcomplex32") == view.dtype
    for max_version in ((1, 3), None):             # versioned and legacy exports carry it
        again = ap.from_dlpack(view.__dlpack__(max_version=max_version))
        assert again.dtype == view.dtype and again.ptr == view.ptr
    assert view[1:, ::2].dtype.name == "bcomplex32"
    copied = view.copy()                              # a host copy of its bytes
    assert copied.dtype == view.dtype and copied.ptr != view.ptr
    with pytest.raises(ValueError, match="bits 32"):
        ap.DType(ap.DTypeCode.BCOMPLEX, 64)
    with pytest.raises(BufferError, match="needs bits 32, got 64"):
        ap.from_dlpack(producer.capsule(spec(dtype=(18, 64, 1))))


def test_numpy_holds_bcomplex32_through_ml_dtypes_and_back(producer, live):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="needs ml_dtypes (the [test] extra)")
    if not hasattr(ml_dtypes, "bcomplex32"):
        pytest.skip("this ml_dtypes has no bcomplex32 (0.6 has)")
    values = np.array([1 + 2j, 3 - 4j], dtype=ml_dtypes.bcomplex32)
    view = ap.view(values)
    assert view.dtype.name == "bcomplex32" and view.ptr == values.ctypes.data
    back = ap.to_numpy(view)
    assert back.dtype == values.dtype and back.tolist() == [1 + 2j, 3 - 4j]
    back[0] = 5j                                       # shared, both ways
    assert values[0] == 5j
    # The layout DLPack names: two bfloat16, the real part first.
    pairs = np.frombuffer(values.tobytes(), dtype=ml_dtypes.bfloat16).astype(np.float32)
    assert pairs.tolist() == [0.0, 5.0, 3.0, -4.0]


@pytest.mark.parametrize("convert, library", [
    (lambda v: ap.to(v, "pyarrow"), "Arrow"),
    (lambda v: ap.to_torch(v), "PyTorch"),
    (lambda v: ap.to(v, "jax"), "JAX"),
], ids=["pyarrow", "torch", "jax"])
def test_libraries_without_bcomplex32_refuse_it_by_name(producer, live, convert, library):
    view = ap.from_dlpack(producer.capsule(spec(dtype=BCOMPLEX32)))
    try:
        convert(view)
    except ImportError:
        pytest.skip(f"needs {library}")
    except (TypeError, BufferError) as refusal:
        assert "bcomplex32" in str(refusal), str(refusal)
    else:
        raise AssertionError(f"{library} took bcomplex32")


def test_bcomplex32_is_refused_by_name_by_the_host_protocols(producer, live):
    view = ap.from_dlpack(producer.capsule(spec(dtype=BCOMPLEX32)))
    with pytest.raises(BufferError, match="bcomplex32"):
        memoryview(view)
    with pytest.raises((BufferError, AttributeError, TypeError), match="bcomplex32"):
        view.__array_interface__


@pytest.mark.parametrize("device_type, host_readable", [(19, False), (20, True), (21, False)])
def test_devices_added_after_1_3_are_described(producer, live, device_type, host_readable):
    device = (device_type, 0 if host_readable else 1)
    view = ap.from_dlpack(producer.capsule(spec(shape=(4,), device=device)))
    assert view.device == device and view.__dlpack_device__() == device
    assert view.device.type.is_host_accessible is host_readable
    if host_readable:
        assert ap.to_numpy(view).shape == (4,)          # the host reads it, zero-copy
    else:
        with pytest.raises(BufferError, match=str(view.device)):
            ap.to_numpy(view)


def test_tpu_host_memory_is_an_address_layout_operations_move(producer, live):
    view = ap.from_dlpack(producer.capsule(spec(shape=(4,), device=(20, 0))))
    assert view[1:].ptr == view.ptr + 4                  # as pinned CUDA memory's
    assert np.array_equal(ap.to_numpy(view[1:]), ap.to_numpy(view)[1:])


@pytest.mark.parametrize("dtype, device_type, message", [
    ((19, 32, 1), 1, "unknown dtype code 19"), ((99, 32, 1), 1, "unknown dtype code 99"),
    ((2, 32, 1), 22, "device type 22 is not a DLPack device type"),
    ((2, 32, 1), 99, "device type 99 is not a DLPack device type")])
def test_other_unknown_codes_are_still_refused_by_value(producer, live, dtype, device_type,
                                                        message):
    with pytest.raises(BufferError, match=message):
        ap.from_dlpack(producer.capsule(spec(dtype=dtype, device=(device_type, 0))))
