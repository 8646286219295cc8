"""The layouts copies are tested on: one 4-d base and its views (transposed, sliced,
negative, broadcast, 0-d, empty, permuted) — shared by the host-side copy tests and the GPU
suite's copies on the CUDA driver simulator."""

import numpy as np


def copy_layouts():
    base = np.arange(2 * 5 * 7 * 3, dtype=np.int32).reshape(2, 5, 7, 3)
    return {
        "contiguous": base, "transposed": base.T, "sliced": base[:, 1:4, ::2],
        "negative": base[::-1, :, ::-2], "broadcast": np.broadcast_to(base[0, 0], (4, 7, 3)),
        "0-d": np.array(3.5), "size-0": base[:, :0], "permuted": base.transpose(2, 0, 3, 1),
    }
