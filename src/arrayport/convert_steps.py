"""The steps every converter takes (``arrayport.to`` and the adapters of
``arrayport.libraries``): checking ``copy=`` and ``readonly=``, placing a View on a device,
copying only where the target cannot hold the data, the read-only policy for libraries whose
arrays are always writable, and the refusal of a type the target has no name for.

Owned here, used by every adapter: a rule about copies or read-only memory has this one
home. Imports nothing of arrayport above the core and the device/type model. Its names are
public inside the package (the adapters' shared toolkit, beside ``libraries.toolkit``),
not part of arrayport's API.
"""

from __future__ import annotations


from arrayport import _core, errors
from arrayport.copy_watch import announce, unasked_copy
from arrayport.devices import Device, DeviceType

_READONLY_POLICIES = ("copy", "share")


ReadOnlySharedWarning = errors.ReadOnlySharedWarning


def check_copy(copy, who):
    if copy is not None and type(copy) is not bool:
        raise TypeError(f"{who}: copy must be True, False or None, got {copy!r}")


def check_readonly_policy(readonly, who):
    if readonly not in _READONLY_POLICIES:
        raise ValueError(f"{who}: readonly must be 'copy' or 'share', got {readonly!r}")


def copied(view, copy, who, why):
    """A contiguous copy of ``view`` on its own device, because the target cannot hold
    ``view`` as it is (``why``): copy_watch's rule first (refused with copy=False,
    announced while copies are watched)."""
    unasked_copy(copy, who, why, f"{who}: {why}, so sharing needs a copy, but copy=False")
    return view.copy()


def unpacked(view, copy, who):
    """``view`` with packed sub-byte elements (float4, float6: several to a byte) unpacked
    one per byte into a copy, for a target that holds only whole-byte elements; any other
    View as it is."""
    if view.itemsize is not None:
        return view
    why = f"packed {view.dtype.name} elements must be unpacked one per byte for this target"
    unasked_copy(copy, who, why, f"{who}: {why}, which needs a copy, but copy=False")
    return _core.unpacked_copy(view)


def no_type_for(who, library, dtype, what="type"):
    """The refusal of a target ``library`` that has no ``what`` for ``dtype``."""
    packed = "packed " if dtype.is_subbyte and not dtype.padded else ""
    return errors.TypeNotHeld(f"{who}: {library} has no {what} for {packed}{dtype.name}")


def placed(view, device, copy):
    """``view`` on ``device`` (copying only where needed), then copied if copy=True."""
    if device is not None:
        target = Device(device)
        if view.device != target:
            from arrayport._import_rules import from_dlpack_with_options
            return from_dlpack_with_options(view, target, copy)
    if copy:
        return view.copy()
    return view


def writable_for(view, readonly, copy, who, library):
    """Apply the read-only policy for a ``library`` whose arrays are always writable."""
    if not view.readonly:
        return view
    if readonly == "share":
        announce(f"{who}: sharing read-only memory with {library}, whose arrays are always "
                 f"writable; do not write to the result", ReadOnlySharedWarning)
        return view
    return copied(view, copy, who, f"the data is read-only and {library} arrays are "
                      f"always writable (pass readonly='share' to share it anyway)")


def device_name(device):
    """Accept torch.device / jax devices by their string form."""
    return device if device is None or isinstance(device, (str, tuple, Device)) else str(device)


class ImmutableConsumerExport:
    """Hands JAX a legacy capsule even for read-only memory: JAX asks for legacy capsules
    (no READ_ONLY flag), and its arrays are immutable, so it never writes through them."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def __dlpack_device__(self):
        return self._view.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _core.legacy_capsule_for_immutable_consumer(self._view, stream)


def on_cuda(view, copy, stream, who, library):
    """``view`` in CUDA device memory: as it is, or copied to the current CUDA device."""
    if view.device.type in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        return placed(view, None, copy)
    why = f"the data is on {view.device}; {library} arrays live in CUDA memory"
    unasked_copy(copy, who, why, f"{who}: {why}, so this needs a copy, but copy=False")
    from arrayport import gpu
    ordinal = gpu.driver_for(DeviceType.CUDA).current_device()
    return view.copy(device=Device(DeviceType.CUDA, ordinal), stream=stream)


def host_view(x, who, copy, stream=None):
    """``x`` as a View (copied when copy=True), refusing memory these CPU builds cannot
    read."""
    check_copy(copy, who)
    view = placed(_core.view_or_copy(x, stream=stream, copy=copy), None, copy)
    if view.device.type is not DeviceType.CPU:
        raise BufferError(f"{who}: the data is on {view.device}; arrayport hands this "
                          f"library host (CPU) memory only")
    return view


def dtype_in(view, names, who, library):
    if view.dtype.name not in names:
        raise no_type_for(who, library, view.dtype)
