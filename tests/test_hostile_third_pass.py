"""The third hostile pass (issue 40), one test per case found, on any machine. The host
readers of memory the GPU is still writing are in tests/test_host_readers.py (the
decision) and tests/test_gpu_host_readers.py (the values, on the simulator); a pinned
validity bitmap counted before its sync event, and the bugs that needed a second device,
in the GPU suite (tests/test_gpu_arrow.py, tests/test_gpu_simulator.py).

Here: Arrow arrays that claim nulls without a bitmap; metadata and formats that raised
OverflowError or RecursionError, or were read more leniently than Arrow's C readers read
them; an Arrow object whose one-array export fails while its stream works; contracts and
converters that treated Python lists two ways; a shared-memory handle that claims read-only
for a writable segment; and the stream facts no test pinned down."""

import gc
import json

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrow_structs import Made, MadeStream, device_capsules, fixed_size_list, metadata_bytes
from optional import optional_module

pa = optional_module("pyarrow")
na = optional_module("nanoarrow")
torch = optional_module("torch")
needs_pyarrow = pytest.mark.skipif(pa is None, reason="needs pyarrow (the [test] extra)")
needs_nanoarrow = pytest.mark.skipif(na is None, reason="needs nanoarrow (the [test] extra)")
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch (the [test] extra)")

CUDA = 2


@pytest.fixture(autouse=True)
def nothing_left_held():
    yield
    gc.collect()
    assert _core.live_arrow_arrays() == 0


def refused_and_released_once(made, capsules, message):
    with pytest.raises(BufferError, match=message):
        ap.View.from_arrow(capsules)
    gc.collect()
    assert made.released["array"] == 1 or (made.released["array"] == 0
                                           and not made.array_released)


# ---- case 3: a positive null count with no validity bitmap ------------------------------------

@pytest.mark.parametrize("on", ["host", "cuda"])
def test_a_null_count_without_a_bitmap_is_refused(on):
    made = Made("i", np.arange(4, dtype=np.int32), null_count=2, validity=None)
    capsules = (made.capsules() if on == "host" else
                device_capsules(made, device_type=CUDA, device_id=0))
    refused_and_released_once(made, capsules, "claims 2 nulls and has no validity bitmap")


def test_a_list_level_claiming_nulls_without_a_bitmap_is_refused():
    made = fixed_size_list(2, Made("i", np.arange(4, dtype=np.int32)), null_count=1)
    refused_and_released_once(made, made.capsules(), "claims 1 null and has no validity")


def test_a_zero_null_count_without_a_bitmap_is_still_fine():
    made = Made("i", np.arange(4, dtype=np.int32), null_count=0, validity=None)
    assert np.asarray(ap.View.from_arrow(made.capsules())).tolist() == [0, 1, 2, 3]


# ---- cases 4 and 5: metadata and formats, strictly, and BufferError for all of it ------------

def tensor_array(described_json: bytes, width=6):
    values = np.arange(3 * width, dtype=np.int32)
    metadata = metadata_bytes({b"ARROW:extension:name": b"arrow.fixed_shape_tensor",
                               b"ARROW:extension:metadata": described_json})
    return fixed_size_list(width, Made("i", values), metadata=metadata)


@pytest.mark.parametrize("described, message", [
    (b'{"shape": [18446744073709551618]}', "'shape' holds 18446744073709551618, not an integer"),
    (b'{"shape": [3, 6148914691236517206]}', "does not fit lists of 6"),
    (b'{"shape": [0, 4611686018427387904, 4]}', "spans more elements than 64 bits count"),
    (b'{"shape": [Infinity]}', "'shape' holds inf, not an integer"),
    (b'{"shape": ' + b"[" * 20000 + b"}", "metadata cannot be read as JSON: RecursionError"),
    (b'{"shape": [1.9, 2]}', "'shape' holds 1.9, not an integer"),
    (b'{"shape": [true, 2]}', "'shape' holds True, not an integer"),
    (b'{"shape": [-2, -3]}', "'shape' holds -2, not an integer"),
    (b'{"shape": "23"}', "'shape' must be a list of integers, got str"),
    (b'{"shape": [2, 3], "permutation": [1.0, 0]}', "'permutation' holds 1.0"),
    (b'[2, 3]', "must be a JSON object, got list"),
    (b'{"shape": [2, 3], "shape": [6]}', "a key appears twice"),
    (b'{"shape": [2, 3], "permutation": null}', "'permutation' must be a list"),
    (b'{"shape": [2, 3], "dim_names": ["x"]}', "'dim_names' must be a list of 2 strings"),
    (b'{"shape": [2, 3], "dim_names": "xy"}', "'dim_names' must be a list of 2 strings"),
    (b'{"shape": [2, 3', "metadata cannot be read as JSON"),
])
def test_tensor_metadata_is_read_strictly_and_refused_as_a_buffer_error(described, message):
    width = 0 if b"4611686018427387904" in described else 6
    made = tensor_array(described, width)
    refused_and_released_once(made, made.capsules(), message)


@pytest.mark.parametrize("fmt, message", [
    (b"+w:99999999999999999999", "the width is out of range"),
    (b"+w:2147483648", "the width is out of range"),
    (b"+w: 2", "not an Arrow format string"),
    (b"+w:+2", "not an Arrow format string"),
    (b"+w:4_0", "not an Arrow format string"),
    (b"+w:-1", "not an Arrow format string"),
    (b"+w:", "not an Arrow format string"),
    ("+w:٢".encode(), "not an Arrow format string"),     # an Arabic-Indic two
])
def test_list_widths_are_decimal_digits_within_int32(fmt, message):
    made = fixed_size_list(2, Made("i", np.arange(4, dtype=np.int32)))
    made.schema.format = fmt
    refused_and_released_once(made, made.capsules(), message)


@pytest.mark.parametrize("fmt", [b"+w:002", b"+w:00000000000002"])
def test_a_width_with_leading_zeros_is_the_number_c_reads(fmt):
    made = fixed_size_list(2, Made("i", np.arange(4, dtype=np.int32)))
    made.schema.format = fmt
    assert ap.View.from_arrow(made.capsules()).shape == (2, 2)


def test_named_dimensions_are_read():
    made = tensor_array(b'{"shape": [2, 3], "dim_names": ["y", "x"]}')
    assert ap.View.from_arrow(made.capsules()).shape == (3, 2, 3)


# ---- case 6: an Arrow object whose one array fails, and whose stream works ----------------------

class ArrayFailsStreamWorks:
    """What nanoarrow's Array of several chunks does: __arrow_c_array__ raises, its
    __arrow_c_stream__ gives the chunks."""

    def __init__(self, *chunks):
        self.made = [Made("l", np.asarray(chunk, dtype=np.int64)) for chunk in chunks]

    def __arrow_c_array__(self, requested_schema=None):
        raise ValueError("Can't export ArrowArray with non-contiguous Array")

    def __arrow_c_stream__(self, requested_schema=None):
        self.stream = MadeStream(self.made)
        return self.stream.capsule()


def test_a_failing_array_export_falls_back_to_the_stream():
    several = ArrayFailsStreamWorks([1, 2, 3], [4, 5])
    with pytest.raises(ap.NeedsCopy, match="the stream holds 2 arrays"):
        ap.view(several)
    np.testing.assert_array_equal(ap.to_numpy(ArrayFailsStreamWorks([1, 2, 3], [4, 5])),
                                  [1, 2, 3, 4, 5])
    one = ArrayFailsStreamWorks([7, 8])
    view = ap.view(one)                                   # one chunk: zero-copy
    assert view.ptr == one.made[0].values.ctypes.data and view.shape == (2,)


def test_when_both_fail_both_reasons_are_given():
    class BothFail(ArrayFailsStreamWorks):
        def __arrow_c_stream__(self, requested_schema=None):
            raise RuntimeError("no stream either")

    with pytest.raises(BufferError, match="no stream either.*before it.*non-contiguous"):
        ap.view(BothFail([1]))


@needs_nanoarrow
def test_nanoarrow_arrays_of_several_chunks():
    chunked = na.Array.from_chunks([[1, 2, 3], [4, 5]], na.int64())
    with pytest.raises(ap.NeedsCopy):
        ap.view(chunked)
    np.testing.assert_array_equal(ap.to_numpy(chunked), [1, 2, 3, 4, 5])


# ---- case 7: contracts answer in the caller's library, and lists follow one rule -------------

@needs_pyarrow
def test_a_contract_answers_an_arrow_list_array_with_an_arrow_list_array():
    @ap.accepts(x=ap.Spec(dtype="float32", ndim=2), returns="like:x")
    def doubled(x):
        return np.asarray(x) * 2

    rows = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3)
    answer = doubled(rows)
    assert isinstance(answer, pa.FixedSizeListArray)
    assert answer.to_pylist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]


@needs_pyarrow
def test_to_pyarrow_holds_n_dimensional_data_as_nested_lists_zero_copy():
    data = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    arrow = ap.to(data, "pyarrow")
    assert (arrow.type.list_size, arrow.type.value_type.list_size) == (3, 4)
    assert arrow.type.value_type.value_type == pa.int16()
    assert arrow.to_pylist() == data.tolist()
    assert np.asarray(ap.view(arrow)).ctypes.data == data.ctypes.data
    assert ap.to(data.T, "pyarrow").to_pylist() == data.T.tolist()     # a copy: C order
    with pytest.raises(BufferError, match="copy=False"):
        ap.to(data.T, "pyarrow", copy=False)
    with pytest.raises(ValueError, match="0-d"):
        ap.to(np.float32(1), "pyarrow")


@pytest.mark.parametrize("convert", [
    lambda x, **kw: ap.to_numpy(x, **kw),
    lambda x, **kw: ap.to(x, "numpy", **kw),
    pytest.param(lambda x, **kw: ap.to_torch(x, **kw).numpy(), marks=needs_torch),
], ids=["to_numpy", "to(numpy)", "to_torch"])
@pytest.mark.parametrize("values", [[1, 2, 3], [[1.5, 2.0]], (4, 5), 7, 2.5, True])
def test_converters_take_python_values_as_numpy_asarray_does(convert, values):
    np.testing.assert_array_equal(convert(values), np.asarray(values))
    with pytest.raises(ap.NeedsCopy, match="holds no array memory to share"):
        convert(values, copy=False)


@pytest.mark.parametrize("values", [["a", "b"], [2**70], [object()]])
def test_python_values_no_view_can_hold_are_a_type_error_that_says_so(values):
    with pytest.raises(TypeError, match="numpy.asarray makes a .* array, which no View can hold"):
        ap.to_numpy(values)


def test_require_and_the_converters_agree_on_lists():
    assert ap.require([1, 2]).is_copy and ap.to_numpy([1, 2]).tolist() == [1, 2]
    with pytest.raises(ap.NeedsCopy):
        ap.require([1, 2], copy=False)
    with pytest.raises(ValueError, match="cannot become an array"):
        ap.to_numpy([[1, 2], [3]])
    with pytest.raises(TypeError, match="offers no array protocol"):
        ap.view([1, 2])                                   # view never copies


# ---- case 8: a handle that claims read-only for a writable segment -----------------------------

def test_a_read_only_claim_on_a_writable_segment_attaches_read_only():
    source = ap.view(np.arange(4.0))
    handle = source.share(readonly=False)
    try:
        writable = ap.View.from_shared(handle)
        handle.readonly = True
        claimed = ap.View.from_shared(handle)
        assert claimed.readonly and not writable.readonly
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(claimed)[0] = 1.0
        np.asarray(writable)[0] = 9.0                     # the same pages
        assert np.asarray(claimed)[0] == 9.0
        del writable, claimed
    finally:
        handle.unlink()


# ---- case 9: stream facts no test pinned down ---------------------------------------------------

def fake_cuda_view(readonly=False):
    """Host memory labelled cuda:0 — what the stream bookkeeping sees, no driver called."""
    memory = np.arange(6.0)
    return _core.view_from_pointer(memory.ctypes.data, (6,), None, "float64",
                                   readonly=readonly, owner=memory, device=(CUDA, 0),
                                   protocol="test")


class Producer:
    """A CUDA DLPack producer (not a View, so that arrayport imports its capsule)."""

    def __init__(self, view):
        self.view = view

    def __dlpack__(self, **kwargs):
        return self.view.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()


def test_an_import_with_stream_minus_one_leaves_no_pending_stream():
    imported = ap.view(Producer(fake_cuda_view()), stream=-1)
    assert _core.pending_stream(imported) is None       # -1 is "no synchronization", no stream
    ordered = ap.view(Producer(fake_cuda_view()), stream=7)
    assert _core.pending_stream(ordered) == 7


def test_the_cuda_array_interface_export_keeps_the_read_only_flag():
    assert fake_cuda_view(readonly=True).__cuda_array_interface__["data"][1] is True
    assert fake_cuda_view(readonly=False).__cuda_array_interface__["data"][1] is False
