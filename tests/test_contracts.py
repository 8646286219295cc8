"""Contracts for library authors (issue 19): ap.require, ap.Spec, @ap.accepts.

Every constraint met (zero-copy: the same address), violated with copy=None (one copy,
only where a copy can meet it), copy=False (RequirementError naming the constraint and
what the input has, texts pinned) and copy=True (always a copy) — for every host library
installed; the decorator keeps the function's signature, names the argument in errors,
passes the caller's stream, and answers in the caller's library."""

import gc
import inspect
import pickle

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module
from producer import spec as tensor_spec

torch = optional_module("torch")
jnp = optional_module("jax.numpy")
pa = optional_module("pyarrow")
xp_strict = optional_module("array_api_strict")
tvm_ffi = optional_module("tvm_ffi")


def address(x):
    return ap.view(x).ptr


# ---- every host library: met means zero-copy ---------------------------------------------

def host_inputs():
    """(label, factory of a C-contiguous (3, 4) float32 input) per installed library."""
    cases = [("numpy", lambda: np.arange(12, dtype=np.float32).reshape(3, 4)),
             ("View", lambda: ap.view(np.arange(12, dtype=np.float32).reshape(3, 4)))]
    if torch is not None:
        cases.append(("torch", lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4)))
    if jnp is not None:
        cases.append(("jax", lambda: jnp.arange(12, dtype=jnp.float32).reshape(3, 4)))
    if pa is not None:
        cases.append(("pyarrow.Tensor", lambda: pa.Tensor.from_numpy(
            np.arange(12, dtype=np.float32).reshape(3, 4))))
    if tvm_ffi is not None:
        cases.append(("tvm_ffi", lambda: tvm_ffi.from_dlpack(
            np.arange(12, dtype=np.float32).reshape(3, 4))))
    if xp_strict is not None:
        cases.append(("array_api_strict", lambda: xp_strict.reshape(
            xp_strict.arange(12, dtype=xp_strict.float32), (3, 4))))
    return cases


HOST_INPUTS = host_inputs()


@pytest.mark.parametrize("label, make", HOST_INPUTS, ids=[c[0] for c in HOST_INPUTS])
def test_met_constraints_are_zero_copy(label, make):
    x = make()
    view = ap.require(x, dtype="float32", ndim=2, shape=(None, 4), order="C", device="cpu",
                      align=4, copy=False)
    assert view.ptr == address(x) and not view.is_copy
    np.testing.assert_array_equal(np.asarray(view), np.arange(12).reshape(3, 4))


@pytest.mark.parametrize("label, make", HOST_INPUTS, ids=[c[0] for c in HOST_INPUTS])
def test_unmet_order_copies_once_and_copy_false_refuses(label, make):
    x = make()
    flipped = ap.view(x).T
    copied = ap.require(flipped, order="C")
    assert copied.is_copy and copied.is_c_contiguous and copied.ptr != flipped.ptr
    np.testing.assert_array_equal(np.asarray(copied), np.arange(12).reshape(3, 4).T)
    with pytest.raises(ap.RequirementError, match="expected C-contiguous, got strides "
                                                  "\\(4, 16\\); copy=False forbids the copy"):
        ap.require(flipped, order="C", copy=False)


@pytest.mark.parametrize("label, make", HOST_INPUTS, ids=[c[0] for c in HOST_INPUTS])
def test_unmet_dtype_is_refused_whatever_copy_says(label, make):
    for copy in (None, True, False):
        with pytest.raises(ap.RequirementError) as caught:
            ap.require(make(), dtype="float64", copy=copy)
        assert caught.value.constraint == "dtype" and caught.value.argument is None
        assert str(caught.value).startswith("require: expected dtype float64, got float32; ")


@pytest.mark.parametrize("label, make", HOST_INPUTS, ids=[c[0] for c in HOST_INPUTS])
def test_copy_true_always_copies(label, make):
    x = make()
    copied = ap.require(x, dtype="float32", copy=True)
    assert copied.is_copy and copied.ptr != address(x) and not copied.readonly
    np.testing.assert_array_equal(np.asarray(copied), np.asarray(ap.view(x)))


# ---- each constraint, met and violated (texts pinned) ------------------------------------

@pytest.mark.parametrize("constraints, message", [
    (dict(dtype="float64"), "require: expected dtype float64, got float32; a copy does not "
                            "change the dtype: pass cast=True to convert (on the host)"),
    (dict(dtype={"int8", "int16"}), "expected dtype one of (int"),
    (dict(ndim=3), "require: expected 3 dimensions, got 2; a copy does not change the "
                   "dimensions"),
    (dict(ndim=[1, 3]), "expected 1 or 3 dimensions, got 2"),
    (dict(shape=(None, 3)), "require: expected shape (None, 3), got (3, 4); a copy does not "
                            "change the shape"),
    (dict(shape=(12,)), "expected shape (12,), got (3, 4)"),
    (dict(order="F"), "require: expected F-contiguous, got strides (16, 4); copy=False "
                      "forbids the copy that would meet it"),
    (dict(device="cuda"), "require: expected device cuda, got cpu; copy=False forbids"),
    (dict(device=["cuda:1", "rocm"]), "expected device one of (cuda:1, rocm), got cpu"),
])
def test_refusals_say_what_was_expected_and_what_came(constraints, message):
    with pytest.raises(ap.RequirementError) as caught:
        ap.require(np.zeros((3, 4), np.float32), copy=False, **constraints)
    assert message in str(caught.value), str(caught.value)
    assert caught.value.constraint == next(
        name for name in ("device", "dtype", "ndim", "shape", "order") if name in constraints
        or (name == "ndim" and "shape" in constraints and len(constraints["shape"]) != 2))


def test_read_only_input_and_writable_copy():
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    with pytest.raises(ap.RequirementError, match="expected writable memory, got a read-only "
                                                  "View; copy=False forbids"):
        ap.require(frozen, writable="copy", copy=False)
    writable = ap.require(frozen, writable="copy")     # a private writable copy, asked for
    assert writable.is_copy and not writable.readonly
    np.asarray(writable)[0] = 5.0
    assert frozen[0] == 0.0


def test_writable_false_hands_over_a_read_only_view_without_copying():
    array = np.zeros(4)
    view = ap.require(array, writable=False)
    assert view.readonly and view.ptr == array.ctypes.data and not view.is_copy
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(view)[0] = 1.0


def test_alignment_is_met_by_a_copy_up_to_what_copies_guarantee():
    buffer = ap.require(np.zeros(65, np.float32), copy=True)  # arrayport's: 64-byte aligned
    shifted = buffer[1:]
    assert shifted.ptr % 64 == 4
    with pytest.raises(ap.RequirementError, match="expected data aligned to 64 bytes, got "
                                                  "address 0x[0-9a-f]+ \\(4 bytes past\\)"):
        ap.require(shifted, align=64, copy=False)
    aligned = ap.require(shifted, align=64)
    assert aligned.ptr % 64 == 0 and aligned.is_copy
    with pytest.raises(ap.RequirementError, match="even a copy does not meet it \\(arrayport's "
                                                  "copies are aligned to 64 bytes"):
        ap.require(shifted, align=1 << 20)


@pytest.mark.parametrize("order, check", [
    ("F", lambda v: v.is_f_contiguous), ("A", lambda v: v.is_c_contiguous),
    ("contiguous-last-axis", lambda v: v.strides[-1] == v.itemsize)])
def test_orders_are_met_by_one_copy_in_that_order(order, check):
    strided = ap.view(np.arange(24.0).reshape(4, 6))[::2, ::3]
    result = ap.require(strided, order=order)
    assert check(result) and result.is_copy
    np.testing.assert_array_equal(np.asarray(result), np.arange(24.0).reshape(4, 6)[::2, ::3])


def test_any_order_and_last_axis_accept_what_they_should():
    wide = np.zeros((3, 8))[:, :4]  # rows apart, last axis contiguous
    assert ap.require(wide, order="contiguous-last-axis", copy=False).ptr == wide.ctypes.data
    fortran = np.asfortranarray(np.zeros((3, 4)))
    assert ap.require(fortran, order="A", copy=False).ptr == fortran.ctypes.data
    with pytest.raises(ap.RequirementError, match="expected C- or F-contiguous"):
        ap.require(wide, order="A", copy=False)


def test_cast_converts_on_the_host():
    doubles = np.arange(6.0).reshape(2, 3)
    floats = ap.require(doubles, dtype="float32", cast=True)
    assert floats.dtype == ap.DType("float32") and floats.is_copy
    np.testing.assert_array_equal(np.asarray(floats), doubles.astype(np.float32))
    same = ap.require(np.zeros(3, np.float32), dtype="float32", cast=True)
    assert not same.is_copy


@needs("ml_dtypes")
def test_cast_to_bfloat16_goes_through_ml_dtypes():
    halves = ap.require(np.array([1.5, 2.0]), dtype="bfloat16", cast=True)
    assert halves.dtype == ap.DType("bfloat16")
    np.testing.assert_array_equal(np.asarray(ap.to_numpy(halves), np.float32), [1.5, 2.0])


def test_dtype_choices_and_device_types_without_an_id():
    assert ap.require(np.zeros(2, np.int16), dtype={"int8", "int16"}).dtype == ap.DType("int16")
    assert ap.require(np.zeros(2), device=["cuda", "cpu"], copy=False).device == "cpu"


# ---- devices and streams (no driver asked: tests/test_gpu_copies_and_streams.py has the rest) --



class StreamRecorder:
    """A CUDA producer that records the stream consumers pass to __dlpack__."""

    def __init__(self, producer):
        self.producer, self.streams = producer, []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        return self.producer.capsule(tensor_spec((2, 3), device=(2, 0)))


def test_the_decorator_passes_the_callers_stream(producer):
    recorder = StreamRecorder(producer)

    @ap.accepts(x=ap.Spec(device="cuda"))
    def kernel(x, *, stream=None):
        return x.device

    assert kernel(recorder, stream=5) == "cuda:0"
    assert kernel(recorder) == "cuda:0"
    assert recorder.streams[0] == 5 and recorder.streams[1] in (None, 1)


# ---- the decorator -------------------------------------------------------------------------

@ap.accepts(x=ap.Spec(dtype="float32", shape=(None, 3)), weights={"dtype": "float32", "ndim": 1},
            returns="like:x")
def row_norms(x, weights=None, *, scale=1.0):
    """Weighted row norms."""
    values = np.asarray(x)
    if weights is not None:
        values = values * np.asarray(weights)
    return np.sqrt((values ** 2).sum(axis=1)) * scale


def test_the_signature_and_docstring_stay():
    assert str(inspect.signature(row_norms)) == "(x, weights=None, *, scale=1.0)"
    assert row_norms.__doc__ == "Weighted row norms." and row_norms.__name__ == "row_norms"
    assert set(row_norms.__arrayport_specs__) == {"x", "weights"}


def test_errors_name_the_argument():
    with pytest.raises(ap.RequirementError) as caught:
        row_norms(np.zeros((2, 4), np.float32))
    assert str(caught.value) == ("require: argument 'x': expected shape (None, 3), got (2, 4); "
                                 "a copy does not change the shape")
    assert caught.value.argument == "x" and caught.value.constraint == "shape"
    with pytest.raises(ap.RequirementError, match="argument 'weights': expected 1 dimensions"):
        row_norms(np.zeros((2, 3), np.float32), weights=np.zeros((1, 3), np.float32))


def test_arguments_by_position_keyword_and_default():
    x = np.ones((2, 3), np.float32)
    w = np.full(3, 2.0, np.float32)
    np.testing.assert_allclose(row_norms(x, w), row_norms(x=x, weights=w))
    np.testing.assert_allclose(row_norms(x), np.sqrt([3.0, 3.0]))  # weights: None stays None


@pytest.mark.parametrize("label, make", HOST_INPUTS, ids=[c[0] for c in HOST_INPUTS])
def test_results_answer_in_the_callers_library(label, make):
    @ap.accepts(x=ap.Spec(dtype="float32", ndim=2), returns="like:x")
    def twice(x):
        return np.asarray(x) * 2

    x = make()
    result = twice(x)
    assert type(result) is type(x)
    np.testing.assert_array_equal(np.asarray(ap.view(result)), np.arange(12).reshape(3, 4) * 2)


@needs("pyarrow")
def test_pyarrow_arrays_and_tensors_answer_in_kind():
    @ap.accepts(x="float32", returns="like:x")
    def twice(x):
        return np.asarray(x) * 2

    array = pa.array([1.0, 2.0], pa.float32())
    assert isinstance(twice(array), pa.Array) and twice(array).to_pylist() == [2.0, 4.0]
    tensor = pa.Tensor.from_numpy(np.ones((2, 2), np.float32))
    assert isinstance(twice(tensor), pa.Tensor)


def _numpy_rows():
    return np.arange(6.0).reshape(2, 3), lambda a: a.ctypes.data


def _torch_rows():
    return torch.arange(6.0).reshape(2, 3), lambda t: t.data_ptr()


@pytest.mark.parametrize("make", [_numpy_rows, pytest.param(_torch_rows, marks=needs("torch"))],
                         ids=["numpy", "torch"])
def test_like_keeps_memory_shared_where_the_library_can(make):
    @ap.accepts(x=ap.Spec(), returns="like:x")
    def first_row(x):
        return x[0]

    original, address = make()
    row = first_row(original)
    assert type(row) is type(original) and address(row) == address(original)
    row[0] = 9.0
    assert original[0, 0] == 9.0


def test_tuples_scalars_and_none_in_results():
    @ap.accepts(x=ap.Spec(), returns="like:x")
    def pieces(x):
        return ap.view(x)[0], 3.5, None, np.float32(2), [ap.view(x)[1]]

    first, number, nothing, scalar, rest = pieces(np.arange(4.0).reshape(2, 2))
    assert isinstance(first, np.ndarray) and number == 3.5 and nothing is None
    assert type(scalar) is np.float32 and isinstance(rest[0], np.ndarray)


def test_like_a_view_and_like_an_unknown_type():
    @ap.accepts(x=ap.Spec(), returns="like:x")
    def same(x):
        return np.asarray(x)

    assert type(same(ap.view(np.zeros(2)))) is ap.View
    assert type(same(bytearray(b"ab"))) is np.ndarray  # no converter: left as it is


@pytest.mark.parametrize("make_decorator, error, message", [
    (lambda: ap.accepts(y=ap.Spec()), TypeError, "has no parameter 'y'"),
    (lambda: ap.accepts(returns="like:z"), TypeError, "has no parameter 'z'"),
    (lambda: ap.accepts(returns="same"), ValueError, "returns must be 'like:<argument>'"),
    (lambda: ap.accepts(x=42), TypeError, "must be an arrayport.Spec, a dict"),
])
def test_decorator_misuse_is_reported_at_decoration(make_decorator, error, message):
    with pytest.raises(error, match=message):
        make_decorator()(lambda x: x)


# ---- Spec --------------------------------------------------------------------------------

@pytest.mark.parametrize("keywords, error, message", [
    (dict(order="K"), ValueError, "order must be one of C, F, A, contiguous-last-axis"),
    (dict(ndim=65), ValueError, "ndim must be an int in 0..64"),
    (dict(ndim=set()), ValueError, "ndim must name at least one choice"),
    (dict(shape=(2, -1)), ValueError, "shape entries must be extents >= 0 or None"),
    (dict(shape="ab"), TypeError, "shape must be a tuple of extents"),
    (dict(shape=(2, 3), ndim=3), ValueError, "shape \\(2, 3\\) has 2 dimensions, but ndim"),
    (dict(align=3), ValueError, "align must be a power of two"),
    (dict(writable=1), TypeError, "writable must be True, False, 'copy' or None"),
    (dict(writable="Copy"), TypeError, "writable must be True, False, 'copy' or None"),
    (dict(writable=True, copy=True), ValueError, "use writable='copy'"),
    (dict(cast=None), TypeError, "cast must be True or False"),
    (dict(copy="yes"), TypeError, "copy must be True, False or None"),
    (dict(dtype="float33"), ValueError, "unknown dtype name"),
    (dict(device="tensor_unit"), ValueError, "unknown device"),
])
def test_bad_specs_are_refused(keywords, error, message):
    with pytest.raises(error, match=message):
        ap.Spec(**keywords)


def test_spec_is_a_value():
    spec = ap.Spec(dtype=["float32", "float64"], shape=(None, 3), device="cuda", order="C",
                   align=16, writable=False)
    assert repr(spec) == ("Spec(dtype=['float32', 'float64'], shape=(None, 3), order='C', "
                          "writable=False, align=16, device='cuda')")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and hash(again) == hash(spec)
    assert spec != ap.Spec(dtype="float32") and spec.ndims == (2,)
    assert spec.first_failure(ap.view(np.zeros((2, 3), np.float32))) == "device"
    assert ap.Spec().first_failure(ap.view(b"x")) is None


def test_require_takes_a_spec_or_keywords_not_both():
    spec = ap.Spec(dtype="float32")
    with pytest.raises(TypeError, match="either as spec= or as keywords"):
        ap.require(np.zeros(2, np.float32), spec=spec, ndim=1)
    with pytest.raises(TypeError, match="spec must be an arrayport.Spec"):
        ap.require(np.zeros(2), spec={"dtype": "float32"})
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        ap.require(np.zeros(2), copy="no")


def test_specs_default_copy_policy_applies_and_the_call_overrides_it():
    never = ap.Spec(order="C", copy=False)
    flipped = np.zeros((2, 3)).T
    with pytest.raises(ap.RequirementError, match="copy=False forbids"):
        ap.require(flipped, spec=never)
    assert ap.require(flipped, spec=never, copy=True).is_copy


def test_require_keyword_cache_tells_specs_apart():
    a = np.zeros((2, 3), np.float32)
    for _ in range(3):
        assert ap.require(a, dtype="float32").ptr == a.ctypes.data
        with pytest.raises(ap.RequirementError):
            ap.require(a, dtype="float64")
        with pytest.raises(ap.RequirementError):
            ap.require(a, dtype="float32", ndim=3)
    assert ap.require(a, dtype=["float64", "float32"]).dtype == "float32"  # unhashable: no cache


def test_refusals_leak_nothing(producer, live):
    for _ in range(3):
        with pytest.raises(ap.RequirementError):
            ap.require(producer.capsule(tensor_spec((2, 3))), dtype="int64")
        with pytest.raises(ap.RequirementError):
            ap.require(producer.capsule(tensor_spec((2, 3))), ndim=1)
    gc.collect()
    assert live.delta() == {"producer_deleter_calls": 6}


# ---- Python values: taken as numpy.asarray takes them, where a copy is allowed --------------

@pytest.mark.parametrize("values, shape", [([[1, 2], [3, 4]], (2, 2)), ((1, 2, 3), (3,)),
                                           (3, ()), (2.5, ()), (True, ())])
def test_python_sequences_and_scalars_become_new_arrays_of_the_spec_s_dtype(values, shape):
    view = ap.require(values, dtype="float32")
    assert view.is_copy and not view.readonly and view.shape == shape
    assert view.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(view), np.asarray(values, dtype=np.float32))


def test_python_values_take_the_dtype_numpy_infers_without_one():
    assert ap.require([1, 2]).dtype == np.asarray([1, 2]).dtype
    assert ap.require([1.5]).dtype == "float64"
    with pytest.raises(ap.RequirementError, match="expected 2 dimensions, got 1"):
        ap.require([1, 2], ndim=2)


def test_python_values_need_a_copy_and_say_so():
    with pytest.raises(ap.NeedsCopy, match="the argument is a Python list, which holds no "
                                           "array memory to share.*but copy=False"):
        ap.require([1, 2], copy=False)
    with pytest.raises(ValueError, match="cannot become an array as numpy.asarray would"):
        ap.require([1, [2, 3]])


def test_accepts_takes_lists_and_names_the_argument():
    @ap.accepts(x=ap.Spec(dtype="float64", ndim=2), returns="like:x")
    def double(x):
        return np.asarray(x) * 2
    np.testing.assert_array_equal(double([[1, 2]]), [[2.0, 4.0]])

    @ap.accepts(x=ap.Spec(dtype="float64", copy=False))
    def shared(x):
        return x
    with pytest.raises(ap.NeedsCopy, match="require: x is a Python list"):
        shared([1.0])


def test_accepts_cast_converts_every_argument():
    # accepts(cast=True) once was a TypeError (only Spec took cast): it applies to every
    # argument's spec — dtype names, dicts and Specs alike.
    @ap.accepts(x="float32", y={"dtype": "float64"}, z=ap.Spec(dtype="int16"), cast=True)
    def arrived(x, y, z):
        return [(np.asarray(a).dtype.name, np.asarray(a).tolist()) for a in (x, y, z)]

    assert all(spec.cast for spec in arrived.__arrayport_specs__.values())
    assert arrived(np.arange(3), np.arange(2, dtype=np.int8), np.ones(2, np.float64)) == [
        ("float32", [0.0, 1.0, 2.0]), ("float64", [0.0, 1.0]), ("int16", [1, 1])]

    @ap.accepts(x="float32")
    def strict(x):
        return x
    with pytest.raises(ap.RequirementError, match="pass cast=True"):
        strict(np.arange(3))


def test_accepts_cast_may_also_be_a_parameter_of_the_function():
    @ap.accepts(cast="int64")          # not a bool: the contract of the parameter "cast"
    def scaled(cast):
        return np.asarray(cast).dtype

    assert scaled(np.arange(3, dtype=np.int64)) == np.int64
    with pytest.raises(ap.RequirementError, match="argument 'cast'"):
        scaled(np.arange(3, dtype=np.int32))
