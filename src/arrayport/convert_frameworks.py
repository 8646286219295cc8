"""Converters to TensorFlow, MLX, PaddlePaddle and NVIDIA Warp (``arrayport.to`` targets
``"tensorflow"``, ``"mlx"``, ``"paddle"``, ``"warp"``).

Each shares memory through the library's DLPack import where that import can hold the data
as it is, copies where it cannot (``copy=False`` then raises ``BufferError``), and routes
around the traps found probing it (docs/interop-findings.md, with the versions seen):

- TensorFlow (2.21) takes only legacy capsules and only compact row-major strides, and it
  shares memory of any alignment — then aborts the whole process (``Check failed:
  IsAligned()``) at the first operation on memory that is not 64-byte aligned: such data is
  copied into aligned memory first. Its tensors are immutable, so read-only memory is
  shared. Its DLPack import has no float8; TensorFlow's own float8 types take a copy.
- MLX (0.32) copies every array it imports, so ``copy=False`` is refused; its DLPack import
  silently narrows float64 to float32 and complex128 to complex64 (float64 goes in through
  ``mx.array(..., dtype=mx.float64)``; complex128, which MLX lacks, is refused) and refuses
  negative strides.
- PaddlePaddle (3.3) shares memory, but reads DLPack's uint16 as bfloat16 (it has no
  uint16: refused), fails on negative strides (copied first) and ignores READ_ONLY (its
  tensors are always writable: the ``readonly`` policy of ``to_torch`` applies).
- Warp (1.19) shares memory, negative strides included, but its arrays have 1 to 4
  dimensions (a 0-d import fails deep inside Warp with IndexError), it has no complex or
  float8 types, and its arrays are always writable (the ``readonly`` policy applies).
"""

from __future__ import annotations

from arrayport import _core
from arrayport.convert import (_check_copy, _check_readonly_policy, _copied, no_type_for,
                               _ImmutableConsumerExport, _placed, _writable_for)
from arrayport.devices import DeviceType

__all__ = ["to_mlx", "to_paddle", "to_tensorflow", "to_warp"]

# Alignment TensorFlow's kernels check (EIGEN_MAX_ALIGN_BYTES in its CPU builds).
TENSORFLOW_ALIGNMENT = 64


def _host_view(x, who, copy, stream=None):
    """``x`` as a View (copied when copy=True), refusing memory these CPU builds cannot
    read."""
    _check_copy(copy, who)
    view = _placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    if view.device.type is not DeviceType.CPU:
        raise BufferError(f"{who}: the data is on {view.device}; arrayport hands this "
                          f"library host (CPU) memory only")
    return view


def _dtype_in(view, names, who, library):
    if view.dtype.name not in names:
        raise no_type_for(who, library, view.dtype)


# ---- TensorFlow ------------------------------------------------------------------------------

_TENSORFLOW_DLPACK_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"})
# TensorFlow has these types, but its DLPack import does not (type code 10): copied in.
_TENSORFLOW_COPIED_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})


def to_tensorflow(x, *, copy=None):
    """``x`` as a ``tf.Tensor`` (shared when contiguous and 64-byte aligned)."""
    import tensorflow as tf

    who = "to(tensorflow)"
    view = _host_view(x, who, copy)
    name = view.dtype.name
    if name in _TENSORFLOW_COPIED_DTYPES:
        if copy is False:
            raise BufferError(f"{who}: TensorFlow's DLPack import has no {name}, so it "
                              f"needs a copy, but copy=False")
        return tf.constant(_core.to_numpy(view, copy=True))
    _dtype_in(view, _TENSORFLOW_DLPACK_DTYPES, who, "TensorFlow's DLPack import")
    if not view.is_c_contiguous:
        view = _copied(view, copy, who, "TensorFlow takes only compact row-major strides")
    if view.ptr % TENSORFLOW_ALIGNMENT:
        view = _copied(view, copy, who, f"TensorFlow aborts the process on memory that is "
                       f"not {TENSORFLOW_ALIGNMENT}-byte aligned")
    # Legacy capsules only; TensorFlow tensors are immutable, so read-only memory is safe.
    capsule = _core.legacy_capsule_for_immutable_consumer(view, None)
    return tf.experimental.dlpack.from_dlpack(capsule)


# ---- MLX -------------------------------------------------------------------------------------

# What mx.from_dlpack keeps as it is; float64 goes in through mx.array(dtype=mx.float64).
_MLX_DLPACK_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "complex64"})


def to_mlx(x, *, copy=None):
    """``x`` as an ``mx.array`` (always a copy: MLX copies every array it imports)."""
    import mlx.core as mx

    who = "to(mlx)"
    if copy is False:
        raise BufferError(f"{who}: MLX copies every array it imports (mx.array and "
                          f"mx.from_dlpack alike), so sharing is impossible, but copy=False")
    view = _host_view(x, who, copy)
    if view.dtype.name == "float64":
        return mx.array(_core.to_numpy(view), dtype=mx.float64)
    _dtype_in(view, _MLX_DLPACK_DTYPES, who, "MLX")
    if _core.has_negative_stride(view):
        view = view.copy()  # MLX refuses negative strides; it copies anyway
    return mx.from_dlpack(view)


# ---- PaddlePaddle ----------------------------------------------------------------------------

_PADDLE_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn",
    "float8_e5m2"})


def to_paddle(x, *, copy=None, readonly="copy"):
    """``x`` as a ``paddle.Tensor`` (shared where Paddle can hold it)."""
    import paddle

    who = "to(paddle)"
    _check_readonly_policy(readonly, who)
    view = _host_view(x, who, copy)
    if view.dtype.name == "uint16":
        raise TypeError(f"{who}: PaddlePaddle has no uint16 (its DLPack import reads uint16 "
                        f"as bfloat16); convert to int32 or another type first")
    _dtype_in(view, _PADDLE_DTYPES, who, "PaddlePaddle")
    if _core.has_negative_stride(view):
        view = _copied(view, copy, who, "PaddlePaddle cannot hold negative strides")
    view = _writable_for(view, readonly, copy, who, "PaddlePaddle")
    if view.readonly:  # readonly="share": Paddle asks for no version, so hand a legacy capsule
        view = _ImmutableConsumerExport(view)
    return paddle.from_dlpack(view)


# ---- NVIDIA Warp -----------------------------------------------------------------------------

_WARP_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64"})
WARP_MAX_DIMS = 4


def to_warp(x, *, copy=None, readonly="copy"):
    """``x`` as a ``warp.array`` on ``cpu`` (shared where Warp can hold it)."""
    import warp as wp

    who = "to(warp)"
    _check_readonly_policy(readonly, who)
    view = _host_view(x, who, copy)
    _dtype_in(view, _WARP_DTYPES, who, "Warp")
    if not 1 <= view.ndim <= WARP_MAX_DIMS:
        raise ValueError(f"{who}: Warp arrays have 1 to {WARP_MAX_DIMS} dimensions, the data "
                         f"has {view.ndim}; reshape it first")
    view = _writable_for(view, readonly, copy, who, "Warp")
    if view.readonly:  # readonly="share": Warp asks for a legacy capsule
        view = _ImmutableConsumerExport(view)
    wp.init()  # wp.from_dlpack needs the runtime, and does not start it (once; then a no-op)
    return wp.from_dlpack(view)
