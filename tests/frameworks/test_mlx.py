"""MLX (mx.array's DLPack export and buffer protocol, mx.from_dlpack) with arrayport: views
of MLX arrays share their memory; MLX copies everything it imports. Each trap found probing
MLX 0.32 is pinned (see docs/interop-findings.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import arrayport as ap
from conftest import aligned

mx = pytest.importorskip("mlx.core")


def test_view_of_an_array_shares_its_memory():
    array = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    view = ap.view(array)
    assert not view.readonly
    ap.to_numpy(view)[0, 1] = 50  # written through arrayport, read by MLX
    assert array[0, 1].item() == 50


def test_mlx_item_assignment_copies_while_a_view_holds_the_memory():
    # MLX 0.32's a[i] = x writes in place only into memory nobody else holds: with a View
    # (or NumPy array) over it, MLX moves the array to new memory, and the View keeps the
    # old values (alive, never freed under it).
    array = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    view = ap.view(array)
    array[2, 3] = -7
    assert array[2, 3].item() == -7
    assert ap.to_numpy(view)[2, 3] == 11


@pytest.mark.parametrize("index", ["T", "negative", "step", "lazy"])
def test_views_of_strided_and_lazy_arrays_hold_their_values(index):
    base = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    array = {"T": base.T, "negative": base[::-1], "step": base[:, 1::2],
             "lazy": base * 2 + 1}[index]
    np.testing.assert_array_equal(ap.to_numpy(ap.view(array), copy=True), np.array(array))


def test_broadcast_views_are_read_only():
    array = mx.broadcast_to(mx.arange(3), (4, 3))
    view = ap.view(array)
    assert view.strides[0] == 0 and view.readonly


def test_to_mlx_copies_and_refuses_copy_false(numbers):
    array = ap.to(numbers, "mlx")
    numbers[0, 0] = 100
    assert array[0, 0].item() == 1.0  # MLX copied on import
    with pytest.raises(BufferError, match="MLX copies every array"):
        ap.to(numbers, "mlx", copy=False)


def test_float64_is_not_narrowed():
    # mx.from_dlpack turns float64 into float32 without a word (MLX 0.32).
    data = np.array([0.1, 1e300], dtype=np.float64)
    array = ap.to(data, "mlx")
    assert array.dtype == mx.float64
    np.testing.assert_array_equal(np.array(array), data)


def test_complex128_is_refused_not_narrowed():
    with pytest.raises(TypeError, match="complex128"):
        ap.to(np.array([1 + 1e-12j]), "mlx")


def test_negative_strides_are_copied_first(numbers):
    # mx.from_dlpack raises ValueError on negative strides.
    np.testing.assert_array_equal(np.array(ap.to(numbers[::-1], "mlx")), numbers[::-1])


@pytest.mark.parametrize("name", ["bfloat16", "float16", "complex64", "bool", "int8",
                                  "uint64", "int64"])
def test_dtypes_both_ways(name):
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    data = aligned((2, 3), dtype)
    array = ap.to(data, "mlx")
    back = ap.to_numpy(ap.view(array), copy=True)
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back, data)


def test_float8_is_refused():
    with pytest.raises(TypeError, match="float8"):
        ap.to(np.zeros(2, ml_dtypes.float8_e4m3fn), "mlx")


@pytest.mark.parametrize("shape", [(), (0, 3)])
def test_zero_d_and_size_zero(shape):
    data = np.zeros(shape, np.float32)
    assert ap.to(data, "mlx").shape == data.shape
    assert ap.view(mx.zeros(shape)).shape == shape


def test_views_release_mlx_exports(live):
    view = ap.view(mx.arange(4))
    assert live.delta().get("imported") == 1
    del view
    assert live.delta().get("imported") is None
