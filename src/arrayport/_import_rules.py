"""The slower paths of ``arrayport.from_dlpack``: honouring ``device=`` and ``copy=``, and
reading NumPy arrays whose dtype NumPy's own ``__dlpack__`` refuses.

Rules (array API standard, ``from_dlpack``):
- ``copy=None``: zero-copy when the data is already where it is wanted, a copy otherwise.
- ``copy=True``: always a fresh copy (the View says ``is_copy``).
- ``copy=False``: never a copy; ``BufferError`` when one would be needed.
- ``device=``: a device the data is not on needs a copy. arrayport copies host-readable
  memory itself; for other devices it asks the producer (``dl_device=``, ``copy=``) first,
  and copies with its own driver (CUDA, ROCm: ``View.copy``) when the producer cannot.
"""

from __future__ import annotations

import sys

from arrayport import _core, gpu
from arrayport.copy_watch import unasked_copy
from arrayport.devices import Device, DeviceType
from arrayport.dtypes import from_numpy_dtype

_MOVE_KEYWORDS = ("max_version", "dl_device", "copy", "stream")


def from_dlpack_with_options(x, device, copy, stream=None):
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"from_dlpack: copy must be True, False or None, got {copy!r}")
    target = None if device is None else Device(device)
    is_capsule = type(x).__name__ == "PyCapsule"
    source = None if is_capsule or target is None else Device(x.__dlpack_device__())

    if source is not None and source != target and not _host_can_move(source, target):
        # The producer moves its data if it can; else arrayport's driver does (a GPU).
        why = f"the data is on {source}; device={target}"
        unasked_copy(copy, "from_dlpack", why, f"from_dlpack: {why} needs a copy, but "
                                               f"copy=False")
        return _moved(x, target, source, copy, stream)
    if copy is True and source is not None and not source.type.is_host_accessible:
        return _moved(x, source, source, True, stream)

    view = _core.dlpack_view(x, stream=stream, copy=copy)
    if target is not None and view.device != target:
        if not _host_can_move(view.device, target):
            raise BufferError(f"from_dlpack: the data is on {view.device}; arrayport has no "
                              f"driver to copy it to {target}")
        if view.device.type is not DeviceType.CPU and not copy:
            # Pinned host memory is CPU memory: relabel it without copying.
            capsule = view.__dlpack__(max_version=_core.DLPACK_VERSION, dl_device=tuple(target))
            return _core.import_capsule(capsule, owner=view.owner)
        why = f"the data is on {view.device}; device={target}"
        unasked_copy(copy, "from_dlpack", why, f"from_dlpack: {why} needs a copy, but "
                                               f"copy=False")
        return view.host_copy()
    if copy is True and not view.is_copy:  # a resolved copy (NeedsCopy) is fresh already
        return view.copy()
    return view


def _host_can_move(source: Device, target: Device) -> bool:
    """arrayport itself can produce ``target`` memory from ``source`` memory: both are
    host-readable and the target is the CPU."""
    return target.type is DeviceType.CPU and source.type.is_host_accessible


def _moved(x, target: Device, source: Device, copy, stream):
    """``x``'s data on ``target``: the producer's copy, or — when the producer cannot make
    one and arrayport has a driver for either end — arrayport's (``View.copy``)."""
    try:
        return _ask_producer(x, target, source, copy, stream)
    except BufferError as producer_error:
        if gpu.driver_for(source.type) is None and gpu.driver_for(target.type) is None:
            raise
        try:
            return _core.dlpack_view(x, stream=_stream_for(source, stream), copy=copy).copy(
                device=target, stream=_stream_for(target, stream))
        except BufferError as copy_error:
            raise type(copy_error)(f"{producer_error}; arrayport's own copy failed too: "
                                   f"{copy_error}") from None


def _stream_for(device: Device, stream):
    """``stream`` where it applies to ``device`` (a GPU), else None (host memory)."""
    return stream if gpu.is_device_memory(device.type) else None


def _ask_producer(x, target: Device, source: Device, copy, stream):
    try:
        # Spec: the stream must suit dl_device, and a copy is made over it.
        capsule = x.__dlpack__(max_version=_core.DLPACK_VERSION, dl_device=tuple(target),
                               copy=copy, stream=_stream_for(target, stream))
    except TypeError as error:
        if not _core.rejects_keywords(error, _MOVE_KEYWORDS):
            raise
        raise BufferError(f"from_dlpack: {type(x).__qualname__}.__dlpack__ cannot copy its "
                          f"{source} data to {target} (it takes no dl_device/copy), and "
                          f"arrayport has no driver for {source.type.label}") from error
    except BufferError as error:
        raise BufferError(f"from_dlpack: the producer cannot provide its {source} data on "
                          f"{target}: {error}") from error
    view = _core.import_capsule(capsule, owner=x)
    if view.device != target:
        raise BufferError(f"from_dlpack: asked for {target}, the producer returned "
                          f"{view.device} data")
    return view


def ndarray_dlpack_fallback(x):
    """A View of a NumPy array whose dtype NumPy cannot export through DLPack but DLPack
    can describe (ml_dtypes bfloat16, float8, float6, float4), or None."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(x, numpy.ndarray):
        return None
    try:
        dtype = from_numpy_dtype(x.dtype)
    except (TypeError, ValueError):
        return None
    if dtype.numpy_native:
        return None  # NumPy refused for another reason: keep its error
    pointer, readonly = x.__array_interface__["data"]
    return _core.view_from_pointer(pointer, x.shape, x.strides, dtype, readonly=readonly,
                                   owner=x, protocol="array_interface")
