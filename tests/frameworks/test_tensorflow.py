"""TensorFlow (tf.experimental.dlpack, tf.Tensor.__dlpack__) with arrayport: both
directions share memory, and each trap found probing TensorFlow 2.21 is pinned (see
docs/interop-findings.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import arrayport as ap
from conftest import aligned

tf = pytest.importorskip("tensorflow")


def test_to_tensorflow_shares_aligned_contiguous_memory(numbers):
    tensor = ap.to(numbers, "tensorflow", copy=False)
    numbers[0, 0] = 100  # written on NumPy's side, read on TensorFlow's
    assert float(tensor[0, 0]) == 100.0
    assert ap.view(tensor).ptr == numbers.ctypes.data


def test_view_of_a_tensor_shares_its_memory_read_only(numbers):
    tensor = ap.to(numbers, "tensorflow", copy=False)
    view = ap.view(tensor)
    assert view.ptr == numbers.ctypes.data
    assert view.readonly  # TensorFlow tensors are immutable; its capsule has no flag for it
    numbers[1, 1] = -5
    assert ap.to_numpy(view)[1, 1] == -5
    with pytest.raises(ValueError):
        ap.to_numpy(view)[0, 0] = 1


@pytest.mark.parametrize("offset", [4, 16, 32])
def test_unaligned_memory_is_copied_not_handed_to_tensorflow(offset):
    # TensorFlow 2.21 imports memory that is not 64-byte aligned, then aborts the process
    # ("Check failed: IsAligned()") at the first operation on it.
    data = aligned((64, 4), offset=offset)
    tensor = ap.to(data, "tensorflow")
    assert float(tf.reduce_sum(tensor)) == float(data.sum())
    assert ap.view(tensor).ptr % 64 == 0
    with pytest.raises(BufferError, match="64-byte aligned"):
        ap.to(data, "tensorflow", copy=False)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "negative", "broadcast"])
def test_strided_data_is_copied_row_major(numbers, layout):
    # TensorFlow's DLPack import refuses anything but compact row-major strides.
    data = {"transposed": numbers.T, "sliced": numbers[1:, ::2], "negative": numbers[::-1],
            "broadcast": np.broadcast_to(numbers[0], (3, 6))}[layout]
    tensor = ap.to(data, "tensorflow")
    np.testing.assert_array_equal(tensor.numpy(), data)
    with pytest.raises(BufferError, match="row-major"):
        ap.to(data, "tensorflow", copy=False)


def test_read_only_memory_is_shared_with_immutable_tensors(numbers):
    numbers.flags.writeable = False
    tensor = ap.to(numbers, "tensorflow", copy=False)
    assert ap.view(tensor).ptr == numbers.ctypes.data


@pytest.mark.parametrize("name", ["bfloat16", "float16", "complex64", "complex128", "bool",
                                  "int8", "uint16", "uint64", "float64"])
def test_dtypes_both_ways(name):
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    data = aligned((2, 3), dtype)
    tensor = ap.to(data, "tensorflow")
    assert tensor.dtype.name == np.dtype(dtype).name
    back = ap.to_numpy(tensor)
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back, data)


def test_float8_goes_in_as_a_copy():
    # TensorFlow's DLPack import refuses type code 10 (float8), its tf.constant does not.
    data = np.array([0.5, 1, -2], dtype=ml_dtypes.float8_e4m3fn)
    tensor = ap.to(data, "tensorflow")
    assert tensor.dtype.name == "float8_e4m3fn"
    np.testing.assert_array_equal(tensor.numpy(), data)
    with pytest.raises(BufferError, match="float8_e4m3fn"):
        ap.to(data, "tensorflow", copy=False)
    # Nor does its export carry float8: refused, with TensorFlow's reason.
    with pytest.raises(BufferError, match="FLOAT8_E4M3FN is not supported"):
        ap.view(tensor)


@pytest.mark.parametrize("shape", [(), (0, 6)])
def test_zero_d_and_size_zero(shape):
    data = aligned(shape) if shape else np.asarray(aligned((1,))[0])
    tensor = ap.to(data, "tensorflow")
    assert tuple(tensor.shape) == data.shape
    assert ap.view(tensor).shape == data.shape


def test_string_tensors_are_refused_not_exported(live):
    # TensorFlow's own __dlpack__ aborts the process on a string tensor.
    with pytest.raises(BufferError, match="string tensor"):
        ap.view(tf.constant(["a", "b"]))
    assert live.delta() == {}


def test_variables_are_refused_by_view_and_copied_by_converters():
    variable = tf.Variable([1.0, 2.0])
    with pytest.raises(BufferError, match="copy"):
        ap.view(variable)
    np.testing.assert_array_equal(ap.to_numpy(variable), [1.0, 2.0])


def test_exports_are_released_when_the_tensor_goes(live, numbers):
    tensor = ap.to(numbers, "tensorflow", copy=False)
    assert live.delta().get("exported") == 1
    del tensor
    assert live.delta().get("exported") is None
