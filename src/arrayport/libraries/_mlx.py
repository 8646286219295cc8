"""MLX at run time: the converter (MLX copies every array it imports; float64 kept, not
narrowed). Its cases for the command and the tests: ``arrayport.libraries.cases._mlx``."""

from __future__ import annotations

from arrayport import _core
from arrayport.copy_watch import unasked_copy
from arrayport.convert_steps import dtype_in, host_view


# What mx.from_dlpack keeps as it is; float64 goes in through mx.array(dtype=mx.float64).
_MLX_DLPACK_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "complex64"})


def to_mlx(x, *, copy=None):
    """``x`` as an ``mx.array`` (always a copy: MLX copies every array it imports)."""
    import mlx.core as mx

    who = "to(mlx)"
    unasked_copy(copy, who, "MLX copies every array it imports (mx.array and mx.from_dlpack "
                            "alike)",
                 f"{who}: MLX copies every array it imports (mx.array and mx.from_dlpack "
                 f"alike), so sharing is impossible, but copy=False")
    view = host_view(x, who, copy)
    if view.dtype.name == "float64":
        return mx.array(_core.to_numpy(view), dtype=mx.float64)
    dtype_in(view, _MLX_DLPACK_DTYPES, who, "MLX")
    if _core.has_negative_stride(view):
        view = view.copy()  # MLX refuses negative strides; it copies anyway (said above)
    return mx.from_dlpack(view)


TARGETS = {"mlx": to_mlx}
