"""NVIDIA cuda-core at run time: the converter to a StridedMemoryView. Its cases for the
command and the tests: ``arrayport.libraries.cases._cuda_core``."""

from __future__ import annotations

from arrayport import _core
from arrayport.convert_steps import check_copy, placed, no_type_for


def _to_cuda_core(x, *, copy=None, stream=None):
    """A cuda-core ``StridedMemoryView`` (host or device memory; read-only stays read-only),
    ordered for ``stream`` (None: the legacy default stream)."""
    from cuda.core.utils import StridedMemoryView

    check_copy(copy, "to(cuda.core)")
    view = placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    # Host memory: no stream (-1). Device memory: ``stream``, or the stream None stands for
    # on the View's device (its one owner is the core's stream order).
    on_device = not view.device.type.is_host_accessible
    if on_device and stream is None:
        stream = _core.none_stream_of(int(view.device.type))
    result = StridedMemoryView.from_dlpack(view, stream_ptr=stream if on_device else -1)
    try:
        result.dtype   # cuda-core takes some types in that it cannot name (float8)
    except TypeError:
        raise no_type_for("to(cuda.core)", "cuda-core", view.dtype) from None
    return result


TARGETS = {"cuda.core": _to_cuda_core}
