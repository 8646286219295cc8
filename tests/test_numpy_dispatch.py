"""NumPy's dispatch protocols on arrayport.View (spec 003, sections 2 and 3): ufuncs and
array functions run on Views without conversion, results come back as Views, ``out=``
writes in place, read-only Views are refused as outputs, and what cannot run where the
data is returns NotImplemented (NumPy's TypeError), never a silent copy."""

import sys
import warnings

import numpy as np
import pytest

import arrayport as ap

import fake_cupy
from optional import optional_module

ml_dtypes = optional_module("ml_dtypes")

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          *([ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn] if ml_dtypes else [])]
UFUNCS = sorted((f for f in vars(np).values() if isinstance(f, np.ufunc)),
                key=lambda f: f.__name__)


def sample(dtype, shift=0):
    """A non-contiguous 2x3 array of small positive values (transposed storage)."""
    values = (np.arange(6).reshape(3, 2).T % 5) + 1 + shift
    return values.astype(dtype)


def host_of(result):
    """A result with every View turned back into the ndarray it describes."""
    if type(result) is ap.View:
        return ap.to_numpy(result)
    if isinstance(result, (tuple, list)):
        return type(result)(host_of(item) for item in result) if type(result) in (
            tuple, list) else type(result)(*[host_of(item) for item in result])
    return result


def outcome(function, *args, **kwargs):
    """(result, None) or (None, exception type), warnings silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return function(*args, **kwargs), None
        except Exception as error:  # compared by type with NumPy's own outcome
            return None, type(error)


def mismatch(expected, actual):
    """Why ``actual`` (computed on Views) differs from ``expected`` (on ndarrays), or None."""
    if type(expected) is np.ndarray:
        if type(actual) is not ap.View:
            return f"expected a View, got {type(actual).__name__}"
        actual = ap.to_numpy(actual)
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            return f"{actual.dtype}{actual.shape} != {expected.dtype}{expected.shape}"
        same_bits = np.array_equal(np.ascontiguousarray(actual).view(np.uint8),
                                   np.ascontiguousarray(expected).view(np.uint8))
        if not same_bits and not np.array_equal(actual, expected, equal_nan=True):
            return "values differ"
        return None
    if isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected) or len(actual) != len(expected):
            return f"expected {type(expected).__name__}, got {type(actual).__name__}"
        problems = [mismatch(e, a) for e, a in zip(expected, actual)]
        return next((p for p in problems if p), None)
    if type(actual) is not type(expected):
        return f"expected {type(expected).__name__}, got {type(actual).__name__}"
    if isinstance(expected, np.generic) or isinstance(expected, (int, float, complex, bool)):
        same = (expected == actual) or (expected != expected and actual != actual)
        return None if same else f"{actual!r} != {expected!r}"
    return None


def compare(function, arrays, *extra, **kwargs):
    expected, expected_error = outcome(function, *arrays, *extra, **kwargs)
    views = [ap.view(a) if isinstance(a, np.ndarray) else a for a in arrays]
    actual, actual_error = outcome(function, *views, *extra, **kwargs)
    if expected_error or actual_error:
        return None if expected_error is actual_error else \
            f"NumPy: {expected_error}, Views: {actual_error}"
    return mismatch(expected, actual)


# ---- ufuncs -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_ufunc_on_views_matches_numpy(dtype):
    problems = {}
    for ufunc in UFUNCS:
        arrays = [sample(dtype, shift=i) for i in range(ufunc.nin)]
        problem = compare(ufunc, arrays)
        if problem:
            problems[ufunc.__name__] = problem
    assert problems == {}


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.complex128, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_binary_ufuncs_with_mixed_operands_follow_numpys_rules(dtype):
    problems = {}
    for ufunc in (u for u in UFUNCS if u.nin == 2):
        for name, other in {"ndarray": sample(np.float32), "python int": 3,
                            "python float": 2.5, "numpy scalar": np.int16(2),
                            "list": [[1, 2, 3]] * 2}.items():
            problem = compare(lambda a, b: ufunc(a, b), [sample(dtype), other])
            if problem:
                problems[f"{ufunc.__name__} x {name}"] = problem
    assert problems == {}


@pytest.mark.parametrize("method, args, kwargs", [
    ("reduce", (), {"axis": 0}),
    ("reduce", (), {"axis": None, "keepdims": True}),
    ("accumulate", (), {"axis": 1}),
    ("reduceat", ([0, 2],), {"axis": 1}),
    ("outer", ("second",), {}),
], ids=["reduce", "reduce-all", "accumulate", "reduceat", "outer"])
@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.logical_xor],
                         ids=lambda u: u.__name__)
def test_ufunc_methods_on_views_match_numpy(ufunc, method, args, kwargs):
    first, second = sample(np.float64), sample(np.float64, shift=2)
    args = tuple(second if a == "second" else a for a in args)
    assert compare(getattr(ufunc, method), [first], *args, **kwargs) is None
    assert compare(lambda a, b: getattr(ufunc, method)(a, b), [first, second]) is None \
        if method == "outer" else True


def test_ufunc_at_writes_into_the_views_memory():
    source = np.zeros(5)
    view = ap.view(source)
    assert np.add.at(view, [0, 0, 3], 1.5) is None
    assert source.tolist() == [3.0, 0.0, 0.0, 1.5, 0.0]
    np.negative.at(view, [0])
    assert source[0] == -3.0


def test_results_are_views_that_own_new_memory_and_scalars_stay_scalars():
    source = np.arange(6.0).reshape(2, 3)
    view = ap.view(source)
    result = np.exp(view)
    assert type(result) is ap.View and result.ptr != view.ptr and not result.readonly
    np.testing.assert_array_equal(ap.to_numpy(result), np.exp(source))
    assert type(np.add(ap.view(np.ones((), np.float32)), 1)) is np.float32
    mantissa, exponent = np.frexp(view)
    assert type(mantissa) is type(exponent) is ap.View and exponent.dtype.name == "int32"


def test_ndarray_operators_hand_back_views():
    source = np.arange(3.0)
    view = ap.view(source)
    for result in (source + view, view + source, source * view, view < source):
        assert type(result) is ap.View


def test_out_views_are_written_in_place_and_returned_as_themselves():
    source, target = np.arange(6.0).reshape(2, 3), np.zeros((2, 3))
    view, out = ap.view(source), ap.view(target)
    assert np.add(view, 1, out=out) is out
    np.testing.assert_array_equal(target, source + 1)
    assert np.multiply(view, 2, out=view) is view  # in place on the input itself
    np.testing.assert_array_equal(source, np.arange(6.0).reshape(2, 3) * 2)
    quotient, remainder = np.zeros((2, 3)), np.zeros((2, 3))
    q, r = np.divmod(view, 4, out=(ap.view(quotient), ap.view(remainder)))
    assert q.ptr == quotient.ctypes.data and r.ptr == remainder.ctypes.data
    np.testing.assert_array_equal(quotient * 4 + remainder, source)
    column = np.zeros(3)
    assert np.add.reduce(view, axis=0, out=ap.view(column)).ptr == column.ctypes.data
    np.testing.assert_array_equal(column, source.sum(axis=0))


def test_out_may_be_a_strided_view():
    target = np.zeros((4, 6))
    out = ap.view(target[::2, ::3])
    np.add(ap.view(np.ones((2, 2))), 1, out=out)
    assert target.sum() == 8 and target[0, 0] == target[2, 3] == 2


def read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return ap.view(array)


def test_read_only_views_are_refused_as_outputs_with_a_clear_error():
    locked = read_only(np.zeros(3))
    with pytest.raises(ValueError, match="add: out= is a read-only arrayport.View"):
        np.add(np.ones(3), 1, out=locked)
    with pytest.raises(ValueError, match="add.reduce: out= is a read-only"):
        np.add.reduce(np.ones((2, 3)), axis=0, out=locked)
    with pytest.raises(ValueError, match="add.at: the first operand is a read-only"):
        np.add.at(locked, [0], 1)
    with pytest.raises(ValueError, match="sum: out= is a read-only"):
        np.sum(np.ones((2, 3)), axis=0, out=locked)
    assert not ap.to_numpy(locked).any()
    # Reading a read-only View is fine; its results are new, writable memory.
    assert not np.add(locked, 1).readonly


def test_read_only_inputs_stay_read_only_inside_the_computation():
    locked = read_only(np.arange(3.0))
    copy = np.copy(locked)  # np.copy gives a writable copy, as for an ndarray
    assert type(copy) is ap.View and not copy.readonly
    assert np.transpose(locked).readonly  # a view of read-only memory stays read-only


# ---- array functions ------------------------------------------------------------------------

ARRAY_FUNCTIONS = {
    "mean": lambda a: np.mean(a), "mean-axis": lambda a: np.mean(a, axis=0),
    "sum": lambda a: np.sum(a, axis=1), "prod": lambda a: np.prod(a),
    "std": lambda a: np.std(a), "var": lambda a: np.var(a, axis=1),
    "min": lambda a: np.min(a), "max": lambda a: np.max(a, axis=0),
    "argmax": lambda a: np.argmax(a), "argmin": lambda a: np.argmin(a, axis=1),
    "cumsum": lambda a: np.cumsum(a), "sort": lambda a: np.sort(a, axis=0),
    "argsort": lambda a: np.argsort(a), "concatenate": lambda a: np.concatenate([a, a]),
    "concatenate-ndarray": lambda a: np.concatenate([a, np.ones_like(ap.to_numpy(a))]),
    "stack": lambda a: np.stack([a, a], axis=2), "vstack": lambda a: np.vstack((a, a)),
    "hstack": lambda a: np.hstack([a, a]), "block": lambda a: np.block([[a, a], [a, a]]),
    "transpose": lambda a: np.transpose(a), "reshape": lambda a: np.reshape(a, (3, 2)),
    "ravel": lambda a: np.ravel(a), "where": lambda a: np.where(a, a, a),
    "nonzero": lambda a: np.nonzero(a), "clip": lambda a: np.clip(a, 2, 4),
    "round": lambda a: np.round(a), "dot": lambda a: np.dot(a, np.transpose(a)),
    "tensordot": lambda a: np.tensordot(a, a, axes=([0, 1], [0, 1])),
    "einsum": lambda a: np.einsum("ij,ij->i", a, a), "norm": lambda a: np.linalg.norm(a),
    "norm-axis": lambda a: np.linalg.norm(a, axis=1), "unique": lambda a: np.unique(a),
    "flip": lambda a: np.flip(a), "roll": lambda a: np.roll(a, 1),
    "take": lambda a: np.take(a, [0, 2], axis=1), "diff": lambda a: np.diff(a),
    "any": lambda a: np.any(a), "all": lambda a: np.all(a, axis=0),
    "count_nonzero": lambda a: np.count_nonzero(a), "isclose": lambda a: np.isclose(a, a),
    "allclose": lambda a: np.allclose(a, a), "array_equal": lambda a: np.array_equal(a, a),
    "split": lambda a: np.split(a, 3, axis=1), "broadcast_to": lambda a: np.broadcast_to(
        a, (4, 2, 3)),
    "expand_dims": lambda a: np.expand_dims(a, 0), "squeeze": lambda a: np.squeeze(np.expand_dims(a, 0)),
    "tile": lambda a: np.tile(a, 2), "repeat": lambda a: np.repeat(a, 2),
    "pad": lambda a: np.pad(a, 1), "trace": lambda a: np.trace(a),
    "diagonal": lambda a: np.diagonal(a), "outer": lambda a: np.outer(a, a),
    "median": lambda a: np.median(a), "percentile": lambda a: np.percentile(a, 30),
    "zeros_like": lambda a: np.zeros_like(a), "full_like": lambda a: np.full_like(a, 7),
    "copy": lambda a: np.copy(a), "atleast_3d": lambda a: np.atleast_3d(a),
    "shape": lambda a: np.shape(a), "ndim": lambda a: np.ndim(a),
    "searchsorted": lambda a: np.searchsorted(np.ravel(a), 2),
    "svd": lambda a: np.linalg.svd(a), "qr": lambda a: np.linalg.qr(a),
    "histogram": lambda a: np.histogram(a, bins=3),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_array_functions_on_views_match_numpy(dtype):
    problems = {}
    for name, function in ARRAY_FUNCTIONS.items():
        problem = compare(function, [sample(dtype)])
        if problem:
            problems[name] = problem
    assert problems == {}


def test_array_functions_share_memory_where_numpy_does():
    source = np.arange(6.0).reshape(2, 3)
    transposed = np.transpose(ap.view(source))
    assert transposed.ptr == source.ctypes.data and transposed.strides == (8, 24)
    source[0, 1] = 42
    assert ap.to_numpy(transposed)[1, 0] == 42
    parts = np.split(ap.view(source), 3, axis=1)
    assert [p.ptr for p in parts] == [source.ctypes.data + 8 * i for i in range(3)]


def test_array_function_out_views_are_written_in_place():
    target = np.zeros(3)
    out = ap.view(target)
    assert np.sum(ap.view(np.ones((2, 3))), axis=0, out=out) is out
    assert target.tolist() == [2.0, 2.0, 2.0]
    assert np.concatenate([ap.view(np.ones(1)), np.full(2, 3.0)], out=out) is out
    assert target.tolist() == [1.0, 3.0, 3.0]


def test_like_a_view_creates_views():
    like = ap.view(np.zeros(1))
    made = np.asarray([1, 2, 3], like=like)
    assert type(made) is ap.View and ap.to_numpy(made).tolist() == [1, 2, 3]
    assert type(np.ones(2, like=like)) is ap.View


# ---- __array_wrap__ and __array_priority__ --------------------------------------------------

def test_array_wrap_hands_back_views_and_scalars_when_numpy_asks():
    view = ap.view(np.zeros(2))
    result = np.arange(3.0)
    wrapped = view.__array_wrap__(result)
    assert type(wrapped) is ap.View and wrapped.owner is result
    assert type(view.__array_wrap__(result, None, False)) is ap.View
    assert view.__array_wrap__(np.array(2.5), None, True) == 2.5
    assert type(view.__array_wrap__(np.array(2.5), None, True)) is np.float64
    strings = np.array(["a"])  # nothing a View can describe: NumPy's array comes back
    assert view.__array_wrap__(strings) is strings


def test_array_priority_outranks_ndarray_and_matrix():
    assert ap.View.__array_priority__ > np.matrix.__array_priority__ > 0.0


# ---- NotImplemented: nothing silently crosses devices -------------------------------------------

@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError


def test_device_views_without_a_device_library_give_numpys_type_error(no_cupy):
    device_view = fake_cupy.cuda_view(np.ones(3))
    with pytest.raises(TypeError, match="NotImplemented"):
        np.exp(device_view)
    with pytest.raises(TypeError, match="no implementation found for 'numpy.mean'"):
        np.mean(device_view)
    with pytest.raises(TypeError, match="NotImplemented"):
        np.add(device_view, 1, out=ap.view(np.zeros(3)))


def test_mixing_devices_is_refused_not_copied(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    host, device = ap.view(np.ones(3)), fake_cupy.cuda_view(np.ones(3))
    with pytest.raises(TypeError):
        np.add(host, device)
    with pytest.raises(TypeError):
        np.add(device, np.ones(3))
    with pytest.raises(TypeError):
        np.concatenate([host, device])


def test_devices_nobody_computes_on_give_numpys_type_error():
    vulkan = ap._core.view_from_pointer(8, (2,), None, "float32", readonly=False, owner=None,
                                        device=(7, 0), protocol="dlpack")
    with pytest.raises(TypeError):
        np.negative(vulkan)
    with pytest.raises(TypeError):
        np.sum(vulkan)


class OwnOverride:
    """A foreign array type with its own ufunc override: it must get its turn."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ("OwnOverride", ufunc.__name__, [type(x).__name__ for x in inputs])

    def __array_function__(self, func, types, args, kwargs):
        return ("OwnOverride", func.__name__)


def test_unknown_overrides_go_first():
    view = ap.view(np.ones(2))
    assert np.add(view, OwnOverride()) == ("OwnOverride", "add", ["View", "OwnOverride"])
    assert np.concatenate([view, OwnOverride()]) == ("OwnOverride", "concatenate")


# ---- device memory runs on the device library (fake CuPy here, real CuPy with -m gpu) ----------

@pytest.fixture
def cupy_stand_in(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    fake_cupy.calls.clear()
    return fake_cupy


def test_device_views_compute_on_the_device_library_and_stay_on_the_device(cupy_stand_in):
    source = np.arange(6.0).reshape(2, 3)
    device_view = cupy_stand_in.cuda_view(source)
    result = np.exp(device_view)
    assert type(result) is ap.View and result.device == ap.Device("cuda:0")
    np.testing.assert_array_equal(ap._core.numpy_array_of(result), np.exp(source))
    assert cupy_stand_in.calls == ["from_dlpack", "exp.__call__"]
    mean = np.mean(device_view, axis=0)
    assert type(mean) is ap.View and mean.device.type == ap.DeviceType.CUDA
    assert cupy_stand_in.calls[-1] == "mean"
    both = np.add(device_view, cupy_stand_in.cuda_view(np.ones((2, 3))))
    assert type(both) is ap.View and both.device.type == ap.DeviceType.CUDA


def test_device_out_views_are_written_in_place(cupy_stand_in):
    target = np.zeros(3)
    out = cupy_stand_in.cuda_view(target)
    assert np.add(cupy_stand_in.cuda_view(np.ones(3)), 2, out=out) is out
    assert target.tolist() == [3.0, 3.0, 3.0]
