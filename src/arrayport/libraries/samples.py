"""The sample arrays every matrix cell and conformance check is made from: dtypes and layout
classes, as NumPy arrays (ml_dtypes supplies bfloat16 and float8 when it is installed).

Each sample starts from one C-contiguous 3 x 4 base array; a layout class is a view of it.
With the libraries (their adapters make their samples from these), read by the command.
"""

from __future__ import annotations

import numpy as np

# Standard NumPy types, then the ml_dtypes ones (skipped when ml_dtypes is absent).
NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]
ML_DTYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]

# Layout classes, each a view of the 3 x 4 base: what a producer may hand over.
LAYOUTS = {
    "contiguous": "C-contiguous 3x4",
    "transposed": "a.T (F-contiguous 4x3)",
    "sliced": "a[1:, 1:] (non-contiguous, non-zero offset)",
    "negative": "a[::-1] (negative row stride)",
    "0-d": "a[1, 2] (0-d, offset)",
    "size-0": "a[:0] (shape 0x4)",
    "read-only": "C-contiguous, read-only",
}
BASE_SHAPE = (3, 4)


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype for a sample dtype name (KeyError when it needs an absent ml_dtypes)."""
    if name in ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise KeyError(name) from None
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def available_dtypes() -> list[str]:
    names = list(NUMPY_DTYPES)
    for name in ML_DTYPES:
        try:
            numpy_dtype(name)
        except KeyError:
            continue
        names.append(name)
    return names


def base_array(dtype: str) -> np.ndarray:
    """A fresh C-contiguous 3 x 4 array of distinct, exactly representable values."""
    values = np.arange(1, 13, dtype=np.int64).reshape(BASE_SHAPE)
    target = numpy_dtype(dtype)
    if target == np.bool_:
        return (values % 3 == 0)
    if target.kind == "c":
        return (values + 1j * values[::-1]).astype(target)
    if dtype.startswith("float8"):
        # float8 holds small integers exactly only up to 8 (e5m2): use halves 0.5..6
        return (values / 2).astype(np.float32).astype(target)
    return values.astype(target)


def numpy_layout(base: np.ndarray, layout: str) -> np.ndarray:
    """The NumPy view of ``base`` for a layout class."""
    if layout == "contiguous":
        return base
    if layout == "transposed":
        return base.T
    if layout == "sliced":
        return base[1:, 1:]
    if layout == "negative":
        return base[::-1]
    if layout == "0-d":
        return base[1, 2, ...]
    if layout == "size-0":
        return base[:0]
    if layout == "read-only":
        frozen = base.copy()
        frozen.flags.writeable = False
        return frozen
    raise ValueError(f"unknown layout class {layout!r}; known: {', '.join(LAYOUTS)}")
