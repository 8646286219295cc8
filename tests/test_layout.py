"""Zero-copy layout operations on View (issue 19): indexing and slicing, permute/T,
reshape without a copy, view_as — NumPy's own rules are the oracle, on random layouts
(hypothesis): the same shape, strides, start address and values, or the same refusal."""

import gc
import weakref

import numpy as np
import pytest

import arrayport as ap
from optional import hypothesis_api
from producer import spec

# Without hypothesis, its property tests skip and the rest of the module runs.
given, settings, st, HealthCheck = hypothesis_api()

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def start(array):
    return array.__array_interface__["data"][0]


@st.composite
def strided_arrays(draw, max_ndim=4):
    """An ndarray over a bigger buffer: random shape, permuted axes, steps (negative too)."""
    ndim = draw(st.integers(0, max_ndim))
    shape = draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    dtype = draw(st.sampled_from(["float64", "int16", "uint8", "complex64"]))
    steps = draw(st.lists(st.sampled_from([1, 2, -1, -2]), min_size=ndim, max_size=ndim))
    full = [n * abs(s) for n, s in zip(shape, steps)]
    base = np.arange(int(np.prod(full)) if full else 1).astype(dtype).reshape(full)
    array = base[tuple(slice(None, None, s) for s in steps) + (Ellipsis,)]
    if ndim > 1:
        array = array.transpose(draw(st.permutations(range(ndim))))
    return array


@st.composite
def basic_keys(draw, array):
    """A basic index for ``array``: integers in range, slices, at most one ..., None."""
    items = []
    axis = 0
    ellipsis_used = False
    while axis < array.ndim and draw(st.booleans()):
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis"]))
        if kind == "int" and array.shape[axis] > 0:
            n = array.shape[axis]
            items.append(draw(st.integers(-n, n - 1)))
            axis += 1
        elif kind == "slice":
            bound = st.none() | st.integers(-7, 7)
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            items.append(slice(draw(bound), draw(bound), step))
            axis += 1
        elif kind == "none":
            items.append(None)
        elif kind == "ellipsis" and not ellipsis_used:
            items.append(Ellipsis)
            ellipsis_used = True
            break
    if draw(st.booleans()) and len(items) == 1:
        return items[0]
    return tuple(items)


def stepped_strides(strides, shape):
    """The strides that matter: those of axes of extent > 1 (an extent-1 axis is never
    stepped along, so libraries differ there freely)."""
    return [s for s, n in zip(strides, shape) if n != 1]


def assert_same_layout(view, array):
    assert view.shape == array.shape
    assert stepped_strides(view.strides, view.shape) == \
        stepped_strides(array.strides, array.shape) or array.size == 0
    assert view.ptr == start(array) or array.size == 0
    np.testing.assert_array_equal(np.asarray(view), array)


@SETTINGS
@given(st.data())
def test_indexing_matches_numpy(data):
    array = data.draw(strided_arrays())
    key = data.draw(basic_keys(array))
    expected = array[key]
    if not isinstance(expected, np.ndarray):  # NumPy gives a scalar for a full index
        expected = array[key + (Ellipsis,) if isinstance(key, tuple) else (key, Ellipsis)]
    result = ap.view(array)[key]
    assert_same_layout(result, expected)
    assert result.ptr == start(expected)  # the start address, empty results too


@SETTINGS
@given(st.data())
def test_permute_matches_numpy_transpose(data):
    array = data.draw(strided_arrays())
    axes = data.draw(st.permutations(range(array.ndim)))
    signed = [a - array.ndim if data.draw(st.booleans()) else a for a in axes]
    assert_same_layout(ap.view(array).permute(*signed), array.transpose(axes))
    assert_same_layout(ap.view(array).permute(signed), array.transpose(axes))
    assert_same_layout(ap.view(array).T, array.T)


@SETTINGS
@given(st.data())
def test_reshape_without_copy_matches_numpy(data):
    array = data.draw(strided_arrays())
    size = array.size
    divisors = [d for d in range(1, size + 1) if size % d == 0] or [1]
    first = data.draw(st.sampled_from(divisors))
    candidates = [(size,), (first, size // first), (first, -1), (1, size, 1), (-1,)]
    if size == 0:
        candidates += [(0, 3), (2, 0, 5)]
    shape = data.draw(st.sampled_from(candidates))
    try:
        expected = np.reshape(array, shape, copy=False)
    except ValueError:
        with pytest.raises(ValueError, match="reshape view.copy\\(\\) instead"):
            ap.view(array).reshape(shape)
        return
    result = ap.view(array).reshape(shape)
    assert result.shape == expected.shape
    if size > 1:
        assert stepped_strides(result.strides, result.shape) == \
            stepped_strides(expected.strides, expected.shape)
    np.testing.assert_array_equal(np.asarray(result), expected)
    assert result.ptr == start(array) or size == 0


@SETTINGS
@given(st.data())
def test_view_as_matches_ndarray_view(data):
    array = data.draw(strided_arrays(max_ndim=3))
    target = data.draw(st.sampled_from(["uint8", "int16", "float32", "float64", "complex128"]))
    try:
        expected = array.view(target)
    except ValueError:
        with pytest.raises(ValueError, match="View.view_as"):
            ap.view(array).view_as(target)
        return
    result = ap.view(array).view_as(target)
    assert result.dtype == ap.DType(target)
    assert_same_layout(result, expected)


# ---- the promises beyond the numbers ---------------------------------------------------------

def test_results_share_memory_both_ways():
    array = np.zeros((4, 6))
    corner = ap.view(array)[1:3, ::-2]
    np.asarray(corner)[0, 0] = 7.0
    assert array[1, 5] == 7.0
    array[2, 1] = 9.0
    assert np.asarray(corner)[1, 2] == 9.0


def test_read_only_survives_every_operation():
    array = np.arange(12.0).reshape(3, 4)
    array.flags.writeable = False
    view = ap.view(array)
    for derived in (view[1:], view.T, view.permute(1, 0), view.reshape(4, 3),
                    view.view_as("int64"), view[None, ..., 0]):
        assert derived.readonly
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(derived)[...] = 0
        with pytest.raises(BufferError):
            derived.__dlpack__()  # a legacy capsule cannot say read-only
    assert np.array_equal(array, np.arange(12.0).reshape(3, 4))


def test_as_readonly_protects_the_memory():
    array = np.zeros(3)
    frozen = ap.view(array).as_readonly()
    assert frozen.readonly and frozen.ptr == start(array)
    with pytest.raises(ValueError):
        np.asarray(frozen)[0] = 1
    with pytest.raises(TypeError):
        memoryview(frozen)[0:1] = b"\0" * 8
    assert frozen.as_readonly() is frozen


def test_derived_views_keep_the_producer_alive():
    array = np.arange(10.0)
    watch = weakref.ref(array)
    derived = ap.view(array)[2:5].reshape(3, 1).T
    del array
    gc.collect()
    assert watch() is not None
    np.testing.assert_array_equal(np.asarray(derived), [[2.0, 3.0, 4.0]])
    del derived
    gc.collect()
    assert watch() is None


def test_a_capsule_views_deleter_runs_once_after_the_last_derived_view(producer, live):
    base = ap.from_dlpack(producer.capsule(spec((4, 4), dtype=(1, 8, 1))))
    whole = np.asarray(base).copy()
    derived = base[1:, 2]
    del base
    gc.collect()
    assert live.delta() == {"imported": 1}, "the deleter waits for the derived View"
    np.testing.assert_array_equal(np.asarray(derived), whole[1:, 2])
    del derived
    assert live.delta() == {"producer_deleter_calls": 1}


def test_a_buffer_lease_outlives_its_derived_views():
    data = bytearray(b"abcdefgh")
    derived = ap.view(data)[2:6]
    with pytest.raises(BufferError):  # still exported: the lease is held
        data.extend(b"x")
    assert bytes(memoryview(derived)) == b"cdef"
    del derived
    gc.collect()
    data.extend(b"x")


@pytest.mark.parametrize("key, message", [
    ((0, 0, 0), "too many indices: the View is 2-dimensional, but 3 were indexed"),
    ((5,), "index 5 is out of bounds for axis 0 with size 3"),
    ((0, -5), "index -5 is out of bounds for axis 1 with size 4"),
    ((..., ...), "an index can only have a single ellipsis"),
    ((2**70,), "index 1180591620717411303424 is out of bounds"),
])
def test_bad_indexes_are_index_errors(key, message):
    view = ap.view(np.zeros((3, 4)))
    with pytest.raises(IndexError, match=message):
        view[key]
    with pytest.raises(IndexError):
        np.zeros((3, 4))[key]  # NumPy refuses the same keys


@pytest.mark.parametrize("key, name", [
    (([0, 1],), "list"), ((True,), "bool"), ((np.array([0]),), "ndarray"),
    ((np.bool_(False),), "bool"), ((0, [1]), "list")])
def test_advanced_indexes_are_refused_because_they_copy(key, name):
    """NumPy answers these with a copy (advanced indexing); a View is never a copy."""
    with pytest.raises(IndexError, match=f"only integers, slices .* got {name}; index "
                                         f"numpy.asarray\\(view\\) for advanced indexing"):
        ap.view(np.zeros((3, 4)))[key]


def test_numpy_integer_indexes_work_like_ints():
    view = ap.view(np.arange(12).reshape(3, 4))
    assert np.asarray(view[np.int64(1), np.array(2)]) == 6


def test_slice_step_zero_is_a_value_error():
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        ap.view(np.zeros(3))[::0]


@pytest.mark.parametrize("call, error, message", [
    (lambda v: v.permute(0, 0), ValueError, "axis 0 repeated"),
    (lambda v: v.permute(0, 2), ValueError, "axis 2 is out of bounds"),
    (lambda v: v.permute(0), ValueError, "do not match a 2-dimensional View"),
    (lambda v: v.permute(0, "1"), TypeError, "axes must be integers"),
    (lambda v: v.reshape(5), ValueError, "cannot reshape a View of size 12 into shape \\(5,\\)"),
    (lambda v: v.reshape(-1, -1), ValueError, "can only specify one unknown dimension"),
    (lambda v: v.reshape(-2, -6), ValueError, "negative extent"),
    (lambda v: v.reshape("ab"), TypeError, "shape must be an int or a sequence"),
    (lambda v: v.T.reshape(12), ValueError, "without copying its elements; reshape view.copy"),
    (lambda v: v.T.view_as("uint8"), ValueError, "the last axis must be contiguous"),
    (lambda v: v[:, :1].view_as("complex128"), ValueError, "not a multiple of complex128"),
    (lambda v: v[0, 0].view_as("int32"), ValueError, "a 0-d View"),
    (lambda v: v.view_as("nonsense"), ValueError, "unknown dtype"),
    (lambda v: v[0].mT, ValueError, "needs at least 2 dimensions"),
])
def test_refusals_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call(ap.view(np.zeros((3, 4))))


def test_size_zero_reshape_is_bounded():
    empty = ap.view(np.zeros((0, 4)))
    assert empty.reshape(0, 2, 2).shape == (0, 2, 2)
    with pytest.raises(ValueError, match="too big"):
        empty.reshape(0, 2**62, 2**62)


def test_mT_swaps_the_last_two_axes():
    array = np.arange(24).reshape(2, 3, 4)
    assert_same_layout(ap.view(array).mT, np.swapaxes(array, -1, -2))


def test_layout_of_device_memory_is_metadata_only(producer):
    """A View of CUDA memory (as a producer labels it) slices and permutes without any
    driver: no memory is touched."""
    view = ap.from_dlpack(producer.capsule(spec((4, 4), device=(2, 0))))
    sliced = view[1:, ::2].T
    assert sliced.device == view.device
    assert sliced.ptr == view.ptr + view.strides[0]
    assert sliced.shape == (2, 3) and sliced.strides == (2 * view.strides[1], view.strides[0])


def test_packed_sub_byte_views_stay_contiguous(producer):
    nibbles = ap.from_dlpack(producer.capsule(spec((4, 8), dtype=(17, 4, 1))))
    assert nibbles[1:3].shape == (2, 8) and nibbles[1:3].ptr == nibbles.ptr + 4
    assert nibbles.reshape(8, 4).shape == (8, 4)
    with pytest.raises(BufferError, match="must stay C-contiguous"):
        nibbles.T
    with pytest.raises(BufferError, match="must stay C-contiguous"):
        nibbles[:, ::2]
    with pytest.raises(BufferError, match="whole byte"):
        nibbles[0, 1:]


def test_refused_layout_operations_leak_nothing(producer, live):
    """Every refusal on a View that owns a producer's tensor: the error, then the deleter
    exactly once when the View goes — no derived View left half-built holding the base."""
    view = ap.from_dlpack(producer.capsule(spec((3, 4), dtype=(2, 64, 1))))
    for refusal, error in ((lambda: view[5], IndexError), (lambda: view[[0]], IndexError),
                           (lambda: view.T.reshape(12), ValueError),
                           (lambda: view.permute(0, 0), ValueError),
                           (lambda: view.T.view_as("uint8"), ValueError),
                           (lambda: view[::0], ValueError)):
        with pytest.raises(error):
            refusal()
    del view
    gc.collect()
    assert live.delta() == {"producer_deleter_calls": 1}
