"""NumPy: the base every other library is checked against — its arrays in the matrix, its
consumer entry points, its unusual arrays (broadcasts, structured, masked…).

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._numpy``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind
from arrayport.libraries.samples import numpy_layout


def _make_numpy(base, layout):
    return numpy_layout(base, layout)


def _numpy_routes():
    return {"dlpack": lambda x: np.from_dlpack(x), "array_interface": np.asarray,
            "buffer": np.asarray, "__array__": np.asarray}


def _numpy_kinds() -> list[Kind]:
    def as_strided_writable():
        return np.lib.stride_tricks.as_strided(np.arange(3.0), shape=(4, 3), strides=(0, 8))

    def unaligned():
        return np.frombuffer(bytearray(33), dtype=np.float64, count=4, offset=1)

    def byteswapped():
        return np.arange(4, dtype=">i4")

    def masked_clean():
        return np.ma.masked_array(np.arange(3.0), mask=[False, False, False])

    def masked():
        return np.ma.masked_array(np.arange(3.0), mask=[False, True, False])

    def matrix():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asmatrix(np.arange(4.0).reshape(2, 2))

    def bfloat16():
        import ml_dtypes
        return np.arange(4.0).astype(ml_dtypes.bfloat16)

    def int4():
        import ml_dtypes
        return np.arange(4).astype(ml_dtypes.int4)

    def same(array):
        return np.asarray(array)

    kinds = [
        ("broadcast", lambda: np.broadcast_to(np.arange(3.0), (4, 3)), same, False),
        ("as-strided-writable", as_strided_writable, same, True),
        ("negative", lambda: np.arange(6.0)[::-1], same, True),
        ("fortran", lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3)), same, True),
        ("read-only", lambda: np.frombuffer(bytes(16), dtype=np.float64), same, False),
        ("unaligned", unaligned, same, True),
        ("byteswapped", byteswapped, same, True),
        ("structured", lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]), same, True),
        ("structured-field", lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])["b"],
         same, True),
        ("object", lambda: np.array([1, "a", None], dtype=object), same, True),
        ("datetime", lambda: np.array([0, 1, 2], dtype="datetime64[s]"), same, True),
        ("masked-clean", masked_clean, lambda a: np.asarray(a.data), True),
        ("masked", masked, None, False),
        ("matrix", matrix, same, True),
        ("0-d", lambda: np.array(2.5), same, True),
        ("size-0", lambda: np.zeros((0, 3)), same, True),
    ]
    result = [Kind("numpy", name, make, reference, writable)
              for name, make, reference, writable in kinds]
    result += [Kind("numpy", "bfloat16", bfloat16, same, True, needs=("ml_dtypes",)),
               Kind("numpy", "int4", int4, same, True, needs=("ml_dtypes",))]
    return result


make = _make_numpy
routes = _numpy_routes
kinds = _numpy_kinds


def _numpy_read_only(a):
    frozen = a.copy()
    frozen.flags.writeable = False
    return frozen


CHECK = (lambda a: a.copy(), np.from_dlpack, _numpy_read_only)


def address_of(x):
    return x.__array_interface__["data"][0]


def writable(x):
    return bool(x.flags.writeable)


def host_values(x):
    return np.array(x)
