"""MLX: the converter (MLX copies every array it imports; float64 kept, not narrowed), its
arrays in the matrix, its unusual arrays.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._mlx``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import INDEXING, Kind, NotOffered, bfloat16_bits, call, module


def _make_mlx(base, layout):
    import mlx.core as mx
    if layout not in INDEXING:
        raise NotOffered(f"MLX arrays cannot be {layout}")
    try:
        array = mx.array(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"MLX: {exc}") from None
    if array.dtype.size != base.dtype.itemsize or (base.dtype.kind == "f" and array.dtype
                                                   not in (mx.float16, mx.float32,
                                                           mx.float64, mx.bfloat16)):
        raise NotOffered(f"MLX has no {base.dtype}")
    return INDEXING[layout](array)


def mlx_kinds() -> list[Kind]:
    def mx():
        return module("mlx.core")

    def values(a):
        return np.array(a)

    def bfloat16_values(a):
        return bfloat16_bits(np.array(a.view(mx().uint16)))

    def base():
        return mx().arange(12, dtype=mx().float32).reshape(3, 4)

    return [
        Kind("mlx.core", "plain", base, values),
        Kind("mlx.core", "transposed", lambda: base().T, values),
        Kind("mlx.core", "negative", lambda: base()[::-1], values),
        Kind("mlx.core", "lazy", lambda: base() * 2 + 1, values),
        Kind("mlx.core", "broadcast", lambda: mx().broadcast_to(mx().arange(3), (4, 3)), values,
             False),
        Kind("mlx.core", "float64", lambda: mx().array([0.1, 1e300], dtype=mx().float64), values),
        Kind("mlx.core", "bfloat16", lambda: mx().array([1.5, -2.0], dtype=mx().bfloat16),
             bfloat16_values, needs=("ml_dtypes",)),
    ]


make = _make_mlx
kinds = mlx_kinds


def routes():
    return {"dlpack": call("mlx.core", "from_dlpack"), "__array__": call("mlx.core", "array")}


CHECK = (lambda a: module("mlx.core").array(a), lambda x: module("mlx.core").from_dlpack(x),
         None)
