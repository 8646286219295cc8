"""Tests of arrayport with the heavy frameworks (TensorFlow, MLX, PaddlePaddle, Warp), one
file per framework, each run in a process of its own by tests/test_frameworks.py: the
frameworks can kill each other (PaddlePaddle 3.3 dies importing after TensorFlow 2.21), and
one process per framework keeps a crash (what a removed workaround leads to) a failed test.

Run one directly with ``ARRAYPORT_FRAMEWORK_PROCESS=1 pytest tests/frameworks/test_mlx.py``.
"""

from __future__ import annotations

import numpy as np
import pytest


def aligned(shape, dtype=np.float32, offset=0, alignment=64):
    """A C-contiguous array of 1, 2, 3, ... whose data starts ``offset`` bytes past an
    ``alignment``-byte boundary."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.zeros(count * dtype.itemsize + 2 * alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment + offset
    array = raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)
    array[...] = np.arange(1, count + 1).reshape(shape).astype(dtype)
    return array


@pytest.fixture
def numbers():
    """A 64-byte aligned float32 4 x 6 array of 1..24 (what every framework shares)."""
    return aligned((4, 6))
