"""NVIDIA Warp: the converter (1 to 4 dimensions; no complex or float8; always writable), its
runtime started quietly, its arrays in the matrix, its unusual arrays."""

from __future__ import annotations

import importlib

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered
from arrayport.libraries.samples import numpy_layout
from arrayport.convert_steps import (
    check_readonly_policy,
    dtype_in,
    host_view,
    ImmutableConsumerExport,
    writable_for,
)

_WARP_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64"})


WARP_MAX_DIMS = 4


def to_warp(x, *, copy=None, readonly="copy"):
    """``x`` as a ``warp.array`` on ``cpu`` (shared where Warp can hold it)."""
    import warp as wp

    who = "to(warp)"
    check_readonly_policy(readonly, who)
    view = host_view(x, who, copy)
    dtype_in(view, _WARP_DTYPES, who, "Warp")
    if not 1 <= view.ndim <= WARP_MAX_DIMS:
        raise ValueError(f"{who}: Warp arrays have 1 to {WARP_MAX_DIMS} dimensions, the data "
                         f"has {view.ndim}; reshape it first")
    view = writable_for(view, readonly, copy, who, "Warp")
    if view.readonly:  # readonly="share": Warp asks for a legacy capsule
        view = ImmutableConsumerExport(view)
    wp.init()  # wp.from_dlpack needs the runtime, and does not start it (once; then a no-op)
    return wp.from_dlpack(view)


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


# ---- what arrayport.libraries reads -----------------------------------------------------------

TARGETS = {"warp": to_warp}
make = _make_warp
kinds = warp_kinds


def routes():
    return {"dlpack": _warp_from_dlpack}



CHECK = (lambda a: warp_runtime().array(a, device="cpu"),
         lambda x: warp_runtime().from_dlpack(x), None)
