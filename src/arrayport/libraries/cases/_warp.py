"""NVIDIA Warp: the converter (1 to 4 dimensions; no complex or float8; always writable),
its runtime started quietly, its arrays in the matrix, its unusual arrays.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._warp``."""

from __future__ import annotations

import importlib

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered
from arrayport.libraries.samples import numpy_layout


def warp_runtime():
    """Warp, its runtime started and quiet: wp.from_dlpack does not start it."""
    warp = importlib.import_module("warp")
    warp.config.quiet = True
    warp.init()
    return warp


def _warp_from_dlpack(x):
    return warp_runtime().from_dlpack(x)


def _make_warp(base, layout):
    import arrayport
    if layout in ("0-d", "read-only"):
        raise NotOffered(f"Warp arrays cannot be {layout}")
    try:
        return arrayport.to(numpy_layout(base, layout), "warp")
    except TypeError as exc:
        raise NotOffered(str(exc)) from None


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


make = _make_warp
kinds = warp_kinds


def routes():
    return {"dlpack": _warp_from_dlpack}


CHECK = (lambda a: warp_runtime().array(a, device="cpu"),
         lambda x: warp_runtime().from_dlpack(x), None)
