"""rownorm — a small library written once with arrayport's contracts.

``row_norms(x)`` takes a 2-D float array from any library (NumPy, PyTorch, JAX, pyarrow,
CuPy, anything with DLPack or NumPy's protocols), computes the Euclidean norm of each row
where the data lives — NumPy on host memory, CuPy on CUDA memory, on the caller's stream —
and answers in the caller's library. No copy is made of a float array already laid out
row by row; anything else (a transposed array, a read-only one we may not hand to a
library that writes) is copied once, by arrayport, on the data's device.
``normalize_rows(x, out)`` writes into the caller's ``out``: an output argument, which is
never copied (a read-only ``out`` is refused).

    python examples/rownorm.py     # calls it from every library installed
"""

from __future__ import annotations

import contextlib

import arrayport as ap

# What row_norms accepts: float rows, each row contiguous, on the host or a CUDA device.
ROWS = ap.Spec(dtype=["float32", "float64"], ndim=2, order="contiguous-last-axis",
               device=["cpu", "cuda"])


@ap.accepts(x=ROWS, returns="like:x")
def row_norms(x, *, stream=None):
    """The Euclidean norm of each row of the 2-D float array ``x``, on ``x``'s device;
    ``stream``: the CUDA stream (DLPack value) the caller works on."""
    if x.device.type == ap.DeviceType.CPU:
        import numpy as np
        rows = np.asarray(x)                        # zero-copy: a View is an array to NumPy
        return np.sqrt(np.einsum("ij,ij->i", rows, rows))
    import cupy
    on_stream = (cupy.cuda.ExternalStream(stream) if stream not in (None, 1, 2)
                 else contextlib.nullcontext())
    with on_stream:
        rows = cupy.from_dlpack(x)                   # zero-copy on the GPU
        return cupy.sqrt((rows * rows).sum(axis=1))


# What an output argument accepts: the caller's own writable float rows, written in place.
# writable=True never copies — a copy would take the writes away from the caller — so a
# read-only array (or one only a copy could make fit) is refused, naming the argument.
OUT = ap.Spec(dtype=["float32", "float64"], ndim=2, device=["cpu", "cuda"], writable=True)


@ap.accepts(x=ROWS, out=OUT)
def normalize_rows(x, out, *, stream=None):
    """Each row of ``x`` divided by its Euclidean norm, written into the caller's ``out``
    (same shape, same device)."""
    if tuple(out.shape) != tuple(x.shape) or out.device != x.device:
        raise ValueError(f"normalize_rows: out must be {x.shape} on {x.device}, got "
                         f"{out.shape} on {out.device}")
    if x.device.type == ap.DeviceType.CPU:
        import numpy as np
        rows, target = np.asarray(x), np.asarray(out)   # both zero-copy; target writable
        np.divide(rows, np.sqrt(np.einsum("ij,ij->i", rows, rows))[:, None], out=target)
        return
    import cupy
    on_stream = (cupy.cuda.ExternalStream(stream) if stream not in (None, 1, 2)
                 else contextlib.nullcontext())
    with on_stream:
        rows, target = cupy.from_dlpack(x), cupy.from_dlpack(out)
        cupy.divide(rows, cupy.sqrt((rows * rows).sum(axis=1))[:, None], out=target)


def _callers():
    """(library, a (2, 3) float32 array [[3, 4, 0], [1, 2, 2]] of it) for each installed."""
    import numpy as np
    values = np.array([[3.0, 4.0, 0.0], [1.0, 2.0, 2.0]], np.float32)
    yield "numpy", values
    with contextlib.suppress(ImportError):
        import torch
        yield "torch", torch.from_numpy(values.copy())
        if torch.cuda.is_available():
            yield "torch (cuda)", torch.from_numpy(values.copy()).cuda()
    with contextlib.suppress(ImportError):
        import jax.numpy as jnp
        yield "jax", jnp.asarray(values)
    with contextlib.suppress(ImportError):
        import pyarrow as pa
        yield "pyarrow.Tensor", pa.Tensor.from_numpy(values.copy())
    with contextlib.suppress(ImportError):
        import cupy
        if cupy.cuda.runtime.getDeviceCount():
            yield "cupy", cupy.asarray(values)
    yield "numpy, Fortran order (copied once)", np.asfortranarray(values)


def _host_values(norms):
    view = ap.view(norms)
    if not view.device.type.is_host_accessible:
        view = view.copy(device="cpu")
    return [round(float(value), 3) for value in ap.to_numpy(view)]


def main():
    for library, array in _callers():
        norms = row_norms(array)
        print(f"{library:<40} -> {type(norms).__module__}.{type(norms).__qualname__} "
              f"{_host_values(norms)}")
    import numpy as np
    x = np.array([[3.0, 4.0, 0.0], [1.0, 2.0, 2.0]])
    out = np.zeros_like(x)
    normalize_rows(x, out)                          # written into the caller's array
    print(f"{'normalize_rows(x, out)':<40} -> out {out.round(3).tolist()}")
    out.flags.writeable = False
    try:
        normalize_rows(x, out)
    except ap.RequirementError as refusal:          # never written into a private copy
        print(f"{'normalize_rows(x, read-only out)':<40} -> RequirementError "
              f"({refusal.constraint}, argument {refusal.argument!r})")


if __name__ == "__main__":
    main()
