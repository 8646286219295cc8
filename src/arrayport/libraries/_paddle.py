"""PaddlePaddle at run time: the converter (no uint16; negative strides copied; tensors
always writable). Its cases for the command and the tests:
``arrayport.libraries.cases._paddle``."""

from __future__ import annotations

from arrayport import _core
from arrayport.convert_steps import (
    check_readonly_policy,
    copied,
    dtype_in,
    host_view,
    ImmutableConsumerExport,
    writable_for,
)


_PADDLE_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn",
    "float8_e5m2"})


def to_paddle(x, *, copy=None, readonly="copy"):
    """``x`` as a ``paddle.Tensor`` (shared where Paddle can hold it)."""
    import paddle

    who = "to(paddle)"
    check_readonly_policy(readonly, who)
    view = host_view(x, who, copy)
    if view.dtype.name == "uint16":
        raise TypeError(f"{who}: PaddlePaddle has no uint16 (its DLPack import reads uint16 "
                        f"as bfloat16); convert to int32 or another type first")
    dtype_in(view, _PADDLE_DTYPES, who, "PaddlePaddle")
    if _core.has_negative_stride(view):
        view = copied(view, copy, who, "PaddlePaddle cannot hold negative strides")
    view = writable_for(view, readonly, copy, who, "PaddlePaddle")
    if view.readonly:  # readonly="share": Paddle asks for no version, so hand a legacy capsule
        view = ImmutableConsumerExport(view)
    return paddle.from_dlpack(view)


TARGETS = {"paddle": to_paddle}
