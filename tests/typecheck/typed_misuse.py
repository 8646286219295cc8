"""Checked by mypy (tests/test_typing.py), which must report an error on every line marked
`# E:` — the types catch these mistakes before they run."""

from __future__ import annotations

import numpy as np

import arrayport as ap
from arrayport.typing import Float32


def kernel(x: ap.View[Float32]) -> int:
    return x.ptr


kernel(ap.require(np.zeros(3), dtype="float64"))  # E: arg-type
kernel(ap.require(np.zeros(3), spec=ap.Spec(dtype="int8")))  # E: arg-type
ap.require(np.zeros(3), order="K")  # E: call-overload
ap.require(np.zeros(3), dtype="float32", stream="s")  # E: call-overload
ap.view(b"x").permute("a")  # E: arg-type
