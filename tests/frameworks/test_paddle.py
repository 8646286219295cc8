"""PaddlePaddle (paddle.from_dlpack, Tensor.__dlpack__ and its C exchange API) with
arrayport: both directions share memory, and each trap found probing PaddlePaddle 3.3 is
pinned (see docs/interop-findings.md)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import arrayport as ap
from conftest import aligned

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "No ccache found", on import
    paddle = pytest.importorskip("paddle")


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_to_paddle_shares_memory(numbers, layout):
    data = {"contiguous": numbers, "transposed": numbers.T, "sliced": numbers[1:, ::2]}[layout]
    tensor = ap.to(data, "paddle", copy=False)
    data[0, 0] = 100  # written on NumPy's side, read on Paddle's
    assert float(tensor[0, 0]) == 100.0
    np.testing.assert_array_equal(tensor.numpy(), data)


def test_view_of_a_tensor_shares_its_memory_both_ways():
    tensor = paddle.arange(12, dtype="float32").reshape([3, 4])
    view = ap.view(tensor)
    assert not view.readonly
    ap.to_numpy(view)[1, 2] = 42
    assert float(tensor[1, 2]) == 42.0
    tensor.add_(paddle.ones([3, 4]))  # in place on Paddle's side
    assert ap.to_numpy(view)[1, 2] == 43


def test_tensors_in_autograd_give_read_only_views():
    # stop_gradient=False is PyTorch's requires_grad: a write would bypass autograd.
    assert ap.view(paddle.to_tensor([1.0, 2.0], stop_gradient=False)).readonly
    assert not ap.view(paddle.to_tensor([1.0, 2.0])).readonly


def test_sparse_tensors_are_refused_not_exported(live):
    # Paddle's __dlpack__, exchange API and __array__ all segfault on a sparse tensor.
    sparse = paddle.sparse.sparse_coo_tensor([[0], [1]], [1.0], [2, 2])
    with pytest.raises(BufferError, match="sparse"):
        ap.view(sparse)
    with pytest.raises(BufferError, match="sparse"):
        ap.to_numpy(sparse)
    assert live.delta() == {}


def test_uint16_is_refused_not_read_as_bfloat16():
    # Paddle's DLPack import reads uint16 as bfloat16 (Paddle has no uint16).
    with pytest.raises(TypeError, match="uint16"):
        ap.to(np.array([1, 2], np.uint16), "paddle")


def test_negative_strides_are_copied_first(numbers):
    # paddle.from_dlpack tries to allocate 2**64 - 48 bytes on negative strides.
    data = numbers[::-1]
    np.testing.assert_array_equal(ap.to(data, "paddle").numpy(), data)
    with pytest.raises(BufferError, match="negative"):
        ap.to(data, "paddle", copy=False)


def test_read_only_memory_is_copied_unless_shared_on_purpose(numbers):
    # Paddle tensors are always writable and Paddle ignores DLPack's READ_ONLY flag.
    numbers.flags.writeable = False
    tensor = ap.to(numbers, "paddle")
    assert ap.view(tensor).ptr != numbers.ctypes.data
    with pytest.raises(BufferError, match="read-only"):
        ap.to(numbers, "paddle", copy=False)
    with pytest.warns(ap.ReadOnlySharedWarning):
        shared = ap.to(numbers, "paddle", readonly="share")
    assert ap.view(shared).ptr == numbers.ctypes.data


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float16", "complex64",
                                  "complex128", "bool", "int8", "uint64", "float64"])
def test_dtypes_both_ways(name):
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    data = aligned((2, 3), dtype)
    tensor = ap.to(data, "paddle", copy=False)
    back = ap.to_numpy(tensor)
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back, data)
    assert ap.view(tensor).ptr == data.ctypes.data


@pytest.mark.parametrize("shape", [(), (0, 3)])
def test_zero_d_and_size_zero(shape):
    data = np.zeros(shape, np.float32)
    assert tuple(ap.to(data, "paddle").shape) == shape
    assert ap.view(paddle.zeros(list(shape))).shape == shape


def test_exports_are_released_when_the_tensor_goes(live, numbers):
    tensor = ap.to(numbers, "paddle", copy=False)
    assert live.delta().get("exported") == 1
    del tensor
    assert live.delta().get("exported") is None
