"""NVIDIA Warp at run time: the converter (1 to 4 dimensions; no complex or float8; always
writable), its runtime started quietly. Its cases for the command and the tests:
``arrayport.libraries.cases._warp``."""

from __future__ import annotations

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


TARGETS = {"warp": to_warp}
