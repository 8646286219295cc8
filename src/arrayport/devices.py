"""Devices as DLPack names them: a device type and an ordinal.

``Device`` is a ``(type, id)`` tuple, so it compares equal to what ``__dlpack_device__``
returns and can be passed wherever a DLPack ``dl_device`` tuple is expected.
"""

from __future__ import annotations

import enum

__all__ = ["Device", "DeviceType"]


class DeviceType(enum.IntEnum):
    """DLPack ``DLDeviceType`` values (ABI: never renumbered; 5 and 6 are unassigned)."""

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3  # page-locked host memory allocated through CUDA
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11  # page-locked host memory allocated through ROCm
    EXT_DEV = 12
    CUDA_MANAGED = 13  # CUDA unified memory
    ONEAPI = 14
    WEBGPU = 15
    HEXAGON = 16
    MAIA = 17
    TRN = 18
    # Added upstream after the 1.3 tag, the minor version still 3 (every code is checked by
    # value). No driver of arrayport's serves them: Views of them are described, not copied.
    TPU = 19
    TPU_HOST = 20  # host memory a TPU runtime allocated (host-readable, as CUDA_HOST is)
    ASCEND = 21    # Huawei Ascend NPU memory

    @property
    def label(self) -> str:
        """The lower-case name used in device strings: ``"cuda"``, ``"cuda_host"``…"""
        return self.name.lower()

    @property
    def is_host_accessible(self) -> bool:
        """Whether the CPU may read this memory directly (CPU and pinned host memory)."""
        return self in _HOST_ACCESSIBLE

    @property
    def is_gpu_memory(self) -> bool:
        """Memory on a GPU (CUDA, CUDA managed, ROCm), read through a driver; ordered by
        streams (DLPack's ``stream`` argument applies to it)."""
        return self in _GPU_MEMORY

    @property
    def vendor(self) -> str | None:
        """Whose driver serves this memory: ``"cuda"`` (CUDA, its pinned and managed
        kinds), ``"rocm"`` (ROCm and its pinned kind), or None."""
        return _VENDOR.get(self)


# The device-kind facts, stated once for Python. The core's C predicates (_core_base.pxi
# _host_accessible, _stream_ordered, _cuda_kind) are held equal to them by
# tests/test_dtypes_devices.py. Which stream None stands for is a stream rule: its one
# owner is the core's _core_streams.pxi (_core.none_stream_of asks it).
_HOST_ACCESSIBLE = frozenset({DeviceType.CPU, DeviceType.CUDA_HOST, DeviceType.ROCM_HOST,
                              DeviceType.TPU_HOST})
_GPU_MEMORY = frozenset({DeviceType.CUDA, DeviceType.CUDA_MANAGED, DeviceType.ROCM})
_VENDOR = {DeviceType.CUDA: "cuda", DeviceType.CUDA_HOST: "cuda",
           DeviceType.CUDA_MANAGED: "cuda", DeviceType.ROCM: "rocm",
           DeviceType.ROCM_HOST: "rocm"}


# The same facts asked of a bare device-type value, without making its enum member: a
# device copy asks them at every step (an IntEnum member hashes as its int).
def is_gpu_memory_type(device_type) -> bool:
    """``DeviceType(device_type).is_gpu_memory``; False for a value DLPack does not define."""
    try:
        return device_type in _GPU_MEMORY
    except TypeError:   # unhashable: no device type
        return False


def vendor_of_type(device_type) -> str | None:
    """``DeviceType(device_type).vendor``; ValueError for a value DLPack does not define."""
    try:
        vendor = _VENDOR.get(device_type)
    except TypeError:   # unhashable: the enum's own refusal below
        vendor = None
    if vendor is None:
        DeviceType(device_type)   # ValueError for a value that is no device type
    return vendor

# Kinds of memory that DLPack always labels with device_id 0: str() omits the ordinal.
_SINGLE_INSTANCE = frozenset(
    {DeviceType.CPU, DeviceType.CUDA_HOST, DeviceType.ROCM_HOST, DeviceType.CUDA_MANAGED,
     DeviceType.TPU_HOST}
)

_BY_LABEL = {t.label: t for t in DeviceType}
_BY_LABEL.update({"hip": DeviceType.ROCM, "gpu": DeviceType.CUDA})


class Device(tuple):
    """A DLPack device: ``Device("cuda:1")``, ``Device(2, 1)``, ``Device((2, 1))``.

    Immutable, hashable, and equal to the plain ``(type, id)`` tuple and to its name
    (``Device(2, 1) == "cuda:1"``; a name that is not a device compares unequal). It hashes
    as the tuple: key sets and dicts by Device objects or tuples, not by names, which have
    many spellings (as NumPy's ``dtype("f4") == "f4"``; docs/architecture.md).

    Parameters
    ----------
    spec : str, tuple, int, DeviceType or a framework's device object
        ``"cpu"`` (the default), ``"cuda:1"``, ``(2, 1)``, ``DeviceType.CUDA``, or anything
        that prints as such a name (``torch.device``).
    device_id : int, optional
        With a device type: the ordinal.

    Examples
    --------
    >>> import arrayport as ap
    >>> d = ap.Device("cuda:1")
    >>> d.type, d.id, d == (2, 1)
    (<DeviceType.CUDA: 2>, 1, True)
    """

    __slots__ = ()

    def __new__(cls, spec: object = "cpu", device_id: int | None = None) -> Device:
        if isinstance(spec, Device) and device_id is None:
            return spec
        if isinstance(spec, str):
            if device_id is not None:
                raise TypeError("Device: give either 'type:id' or (type, id), not both")
            device_type, device_id = _parse_device_string(spec)
        elif isinstance(spec, tuple):
            if device_id is not None or len(spec) != 2:
                raise TypeError(f"Device: expected a (type, id) pair, got {spec!r}")
            device_type, device_id = spec
        elif device_id is not None or isinstance(spec, (int, DeviceType)):
            device_type = spec
            device_id = 0 if device_id is None else device_id
        else:
            # Framework device objects (torch.device, ...) print as "cuda:0" style strings.
            return cls(str(spec))
        return _make(device_type, device_id)

    @property
    def type(self) -> DeviceType:
        """The DLPack device type (``DeviceType.CUDA`` for ``Device("cuda:1")``)."""
        return self[0]

    @property
    def id(self) -> int:
        """The device ordinal (1 for ``Device("cuda:1")``; 0 for single-instance kinds)."""
        return self[1]

    def __str__(self) -> str:
        if self[0] in _SINGLE_INSTANCE and self[1] == 0:
            return self[0].label
        return f"{self[0].label}:{self[1]}"

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"

    def __reduce__(self):
        return (Device, (int(self[0]), self[1]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = _parse_device_string(other)
            except (TypeError, ValueError):
                return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def _parse_device_string(text: str) -> tuple[DeviceType, int]:
    name, _, ordinal = text.strip().lower().partition(":")
    device_type = _BY_LABEL.get(name)
    if device_type is None:
        known = ", ".join(sorted(t.label for t in DeviceType))
        raise ValueError(f"Device: unknown device {text!r}; known device types: {known}")
    if not ordinal:
        return device_type, 0
    try:
        return device_type, int(ordinal)
    except ValueError:
        raise ValueError(f"Device: bad device ordinal in {text!r}") from None


def _make(device_type: object, device_id: object) -> Device:
    if isinstance(device_type, bool) or not isinstance(device_type, int):
        raise TypeError(f"Device: device type must be an int, got {type(device_type).__name__}")
    if isinstance(device_id, bool) or not isinstance(device_id, int):
        raise TypeError(f"Device: device id must be an int, got {type(device_id).__name__}")
    try:
        device_type = DeviceType(device_type)
    except ValueError:
        raise ValueError(f"Device: {device_type} is not a DLPack device type") from None
    if not 0 <= device_id < 2**31:  # DLDevice.device_id is an int32_t
        raise ValueError(f"Device: device id must be in 0..2**31-1 (an int32), got {device_id}")
    return tuple.__new__(Device, (device_type, int(device_id)))
