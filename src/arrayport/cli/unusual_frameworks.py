"""The unusual arrays of TensorFlow, MLX, PaddlePaddle, Warp, Dask and xarray (the kinds of
arrayport.cli.unusual, for the frameworks added in issue 20), each with its reference: the
library's own conversion to NumPy, or None where the array has no faithful strided form.

Factories import their library when called. TensorFlow, MLX, PaddlePaddle and Warp can kill
each other in one process: tests run their kinds one framework per process
(tests/test_frameworks.py).
"""

from __future__ import annotations

import importlib

import numpy as np

from .libraries import warp_runtime
from .unusual import Kind


def _module(name):
    return importlib.import_module(name)


def _bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """A uint16 array of bfloat16 bit patterns as ml_dtypes bfloat16."""
    import ml_dtypes
    return np.asarray(bits).view(ml_dtypes.bfloat16)


def tensorflow_kinds() -> list[Kind]:
    def tf():
        return _module("tensorflow")

    def values(t):
        return t.numpy()

    return [  # TensorFlow tensors are immutable: no alias may be written
        Kind("tensorflow", "plain", lambda: tf().constant(np.arange(6.0).reshape(2, 3)),
             values, False),
        Kind("tensorflow", "transposed",
             lambda: tf().transpose(tf().constant(np.arange(6.0).reshape(2, 3))), values, False),
        Kind("tensorflow", "bfloat16", lambda: tf().constant([1.5, -2.0], dtype=tf().bfloat16),
             values, False, needs=("ml_dtypes",)),
        Kind("tensorflow", "0-d", lambda: tf().constant(2.5), values, False),
        # strings: TensorFlow's own __dlpack__ aborts the process on them
        Kind("tensorflow", "string", lambda: tf().constant(["a", "bc"]), None, False),
        Kind("tensorflow", "variable", lambda: tf().Variable([1.0, 2.0]), values, False),
    ]


def mlx_kinds() -> list[Kind]:
    def mx():
        return _module("mlx.core")

    def values(a):
        return np.array(a)

    def bfloat16_values(a):
        return _bfloat16_bits(np.array(a.view(mx().uint16)))

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


def paddle_kinds() -> list[Kind]:
    def paddle():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "No ccache found", on first import
            return _module("paddle")

    def values(t):
        return t.numpy()

    def bfloat16_values(t):
        return _bfloat16_bits(t.numpy())  # Paddle's numpy() gives bfloat16 as uint16 bits

    def base():
        return paddle().arange(12, dtype="float32").reshape([3, 4])

    return [
        Kind("paddle", "plain", base, values),
        Kind("paddle", "transposed", lambda: base().T, values),
        Kind("paddle", "sliced", lambda: base()[1:, ::2], values),
        Kind("paddle", "grad", lambda: paddle().to_tensor([1.0, 2.0], stop_gradient=False),
             values, False),
        Kind("paddle", "bfloat16", lambda: paddle().to_tensor([1.5, -2.0], dtype="bfloat16"),
             bfloat16_values, needs=("ml_dtypes",)),
        # sparse: Paddle's __dlpack__, exchange API and __array__ all segfault on it
        Kind("paddle", "sparse",
             lambda: paddle().sparse.sparse_coo_tensor([[0], [1]], [1.0], [2, 2]), None, False),
    ]


def warp_kinds() -> list[Kind]:
    wp = warp_runtime

    def values(a):
        return a.numpy()

    def base():
        return wp().array(np.arange(12, dtype=np.float32).reshape(3, 4), device="cpu")

    return [
        Kind("warp", "plain", base, values),
        Kind("warp", "strided", lambda: base()[:, ::2], values),
        Kind("warp", "transposed", lambda: base().transpose(), values),
        Kind("warp", "vec3",
             lambda: wp().array(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=wp().vec3,
                                device="cpu"), values),
        # an index gather over another array: its memory is not its values
        Kind("warp", "indexed",
             lambda: wp().indexedarray(base(), [wp().array([0, 2], dtype=wp().int32,
                                                            device="cpu")]), None, False),
    ]


def dask_kinds() -> list[Kind]:
    def lazy():
        return _module("dask.array").from_array(np.arange(6.0).reshape(2, 3), chunks=1) * 2

    return [Kind("dask.array", "lazy", lazy, lambda d: d.compute(), False)]


def xarray_kinds() -> list[Kind]:
    def labelled(data):
        return _module("xarray").DataArray(data)

    def lazy():
        return labelled(_module("dask.array").from_array(np.arange(4.0), chunks=2))

    return [
        Kind("xarray", "plain", lambda: labelled(np.arange(6.0).reshape(2, 3)),
             lambda x: x.values),
        Kind("xarray", "dask", lazy, lambda x: x.values, False, needs=("dask",)),
    ]
