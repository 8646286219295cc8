"""A consumer that refuses every producer before asking it for a capsule, as CuPy refuses
a CPU array after reading its ``__dlpack_device__``: ``arrayport check early_refuser`` must
report what it could not reach, not crash inside a check (it once raised IndexError)."""

import numpy as np

asarray = np.asarray


def from_dlpack(x):
    device = x.__dlpack_device__()
    raise BufferError(f"early_refuser: arrays on {device} are not taken")
