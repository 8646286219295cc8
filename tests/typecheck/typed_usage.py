"""Checked by mypy --strict (tests/test_typing.py), not run by pytest: what a library author
writes with arrayport's types, and what a type checker must infer from it."""

from __future__ import annotations

from typing import Any

import numpy as np
from typing_extensions import assert_type

import arrayport as ap
from arrayport.typing import ArrayLike, Float32, Float64, Int64


def kernel(x: ap.View[Float32]) -> int:
    return x.ptr


def norms(x: ArrayLike) -> ap.View[Float32]:
    rows = ap.require(x, dtype="float32", ndim=2, order="C")
    assert_type(rows, ap.View[Float32])
    kernel(rows)
    kernel(rows[1:, ::2])
    kernel(rows.T.copy())
    assert_type(rows.view_as("int32"), ap.View[Any])
    return rows


SPEC = ap.Spec(dtype="float64", shape=(None, 3), device="cpu")
assert_type(SPEC, ap.Spec[Float64])
assert_type(ap.require(np.zeros(3), spec=SPEC), ap.View[Float64])
assert_type(ap.require(np.zeros(3, np.int64), dtype="int64"), ap.View[Int64])
assert_type(ap.require(np.zeros(3), dtype=np.float64), ap.View[Any])
assert_type(ap.view(b"abc"), ap.View[Any])
norms(np.zeros((2, 3), np.float32))
norms(bytearray(b"abcd"))
norms(memoryview(b"abcd"))
