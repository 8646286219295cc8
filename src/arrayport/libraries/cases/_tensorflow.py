"""TensorFlow: the converter (legacy capsules only; unaligned memory copied, since
TensorFlow aborts the process on it), its tensors in the matrix, its unusual tensors, and
reading one through an operation.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._tensorflow``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import Kind, NotOffered, call, module


def _make_tensorflow(base, layout):
    import tensorflow as tf
    # TensorFlow tensors are immutable and row-major: read-only by nature, no strided form.
    if layout not in ("contiguous", "0-d", "size-0", "read-only"):
        raise NotOffered(f"TensorFlow tensors have no {layout} memory layout")
    try:
        tensor = tf.constant(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"TensorFlow: {exc}") from None
    return {"0-d": lambda t: t[1, 2], "size-0": lambda t: t[:0]}.get(layout, lambda t: t)(tensor)


def _tensorflow_values(x) -> np.ndarray:
    """A TensorFlow tensor's values, read through an operation (a gather), not only copied:
    TensorFlow imports memory of any alignment and aborts at the first operation on memory
    that is not 64-byte aligned — a result that kills its user is not a working exchange."""
    import tensorflow as tf
    try:
        flat = tf.gather(tf.reshape(x, [-1]), tf.range(tf.size(x)))
    except (tf.errors.OpError, TypeError):  # no gather kernel for the type (float8)
        return np.array(x.numpy())
    return np.array(flat.numpy()).reshape(tuple(x.shape))


def tensorflow_kinds() -> list[Kind]:
    def tf():
        return module("tensorflow")

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


make = _make_tensorflow
kinds = tensorflow_kinds


def routes():
    # TensorFlow's DLPack import takes capsules, not objects.
    return {"dlpack": call("tensorflow", "experimental.dlpack.from_dlpack",
                           lambda x: x.__dlpack__()),
            "__array__": call("tensorflow", "convert_to_tensor")}


# TensorFlow tensors are immutable; its DLPack import takes capsules, not objects.
CHECK = (lambda a: module("tensorflow").constant(a),
         lambda x: module("tensorflow").experimental.dlpack.from_dlpack(x.__dlpack__()),
         lambda a: module("tensorflow").constant(a))


def writable(x):
    return False


host_values = _tensorflow_values
