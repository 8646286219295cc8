"""TensorFlow at run time: the converter (legacy capsules only; unaligned memory copied,
since TensorFlow aborts the process on it). Its cases for the command and the tests:
``arrayport.libraries.cases._tensorflow``."""

from __future__ import annotations

from arrayport import _core
from arrayport.copy_watch import unasked_copy
from arrayport.convert_steps import copied, dtype_in, host_view


# Alignment TensorFlow's kernels check (EIGEN_MAX_ALIGN_BYTES in its CPU builds).
TENSORFLOW_ALIGNMENT = 64


_TENSORFLOW_DLPACK_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"})


# TensorFlow has these types, but its DLPack import does not (type code 10): copied in.
_TENSORFLOW_COPIED_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})


def to_tensorflow(x, *, copy=None):
    """``x`` as a ``tf.Tensor`` (shared when contiguous and 64-byte aligned)."""
    import tensorflow as tf

    who = "to(tensorflow)"
    view = host_view(x, who, copy)
    name = view.dtype.name
    if name in _TENSORFLOW_COPIED_DTYPES:
        why = f"TensorFlow's DLPack import has no {name}"
        unasked_copy(copy, who, why, f"{who}: {why}, so it needs a copy, but copy=False")
        return tf.constant(_core.to_numpy(view, copy=True))
    dtype_in(view, _TENSORFLOW_DLPACK_DTYPES, who, "TensorFlow's DLPack import")
    if not view.is_c_contiguous:
        view = copied(view, copy, who, "TensorFlow takes only compact row-major strides")
    if view.ptr % TENSORFLOW_ALIGNMENT:
        view = copied(view, copy, who, f"TensorFlow aborts the process on memory that is "
                       f"not {TENSORFLOW_ALIGNMENT}-byte aligned")
    # Legacy capsules only; TensorFlow tensors are immutable, so read-only memory is safe.
    capsule = _core.legacy_capsule_for_immutable_consumer(view, None)
    return tf.experimental.dlpack.from_dlpack(capsule)


TARGETS = {"tensorflow": to_tensorflow}
