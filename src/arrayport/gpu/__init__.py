"""GPU devices and stream ordering: which driver serves a device, and the public switch
for arrayport's implicit synchronization.

The GPU wing (issue 41): this package's face is this module; beside it, each with one job —
``vendor`` (the one driver implementation, ``VendorDriver``, over a vendor's symbol table),
``cuda`` and ``hip`` (each vendor's facts and own calls), ``library`` (a vendor library
opened lazily with ctypes), ``interface`` (``GpuDriver``, what the layers ask of a driver)
and ``copies`` (``View.copy`` in every direction, and the 2-D transfer plan). Importing
``arrayport`` imports this module only; the others load on first use. The stream rules themselves (what a stream value
means, who waits for whom, and where the switch is read) have one owner, the core's
``_core_streams.pxi``; this module only turns the switch.

Implicit synchronization (on by default) is everything arrayport does so that data is
safe to use on the stream a consumer names, without the user thinking about it:
- importing the CUDA Array Interface, the consumer's stream waits (on the GPU, with an
  event) for the producer's ``stream`` entry;
- exporting over DLPack, a View with work pending on stream P makes the consumer's stream
  wait for P (``None`` meaning CUDA's legacy default stream, ROCm's stream 0);
- importing over DLPack while it is off, producers are asked for ``stream=-1``
  ("do not synchronize") instead of being told about a stream;
- copies wait for pending work on their source, and make the source's stream wait for
  the copy.
Turn it off (``set_implicit_sync(False)``, ``with no_implicit_sync():``, or
``ARRAYPORT_IMPLICIT_SYNC=0`` in the environment) where no event may be recorded or waited
on — inside CUDA graph capture — or where you order the streams yourself. While off,
arrayport also exports a CUDA Array Interface ``stream`` of None and ignores the one it
imports (the options the CUDA Array Interface spec offers producers and consumers). The
switch is process-wide, not per thread. Copies that land in host memory still wait for
their own transfer: their result must be readable when the call returns.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

from arrayport import _core
from arrayport.devices import DeviceType, is_gpu_memory_type, vendor_of_type

# The driver interface is arrayport.gpu.interface.GpuDriver (a typing.Protocol, kept out of
# this module so that importing arrayport does not import typing).

__all__ = ["set_implicit_sync", "implicit_sync_enabled", "no_implicit_sync",
           "release_device_memory", "driver_for", "is_device_memory", "driver_status"]


def set_implicit_sync(enabled: bool) -> bool:
    """Turn arrayport's implicit stream synchronization on or off, process-wide.

    With it on (the default), a View with work pending on one stream makes a consumer's
    stream wait for it with an event. Turn it off around CUDA graph capture.

    Parameters
    ----------
    enabled : bool

    Returns
    -------
    bool
        The previous setting.

    Raises
    ------
    TypeError
        ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"set_implicit_sync: enabled must be True or False, got {enabled!r}")
    return _core.set_implicit_sync(enabled)


def implicit_sync_enabled() -> bool:
    """Whether arrayport's implicit stream synchronization is on.

    Returns
    -------
    bool
        ``set_implicit_sync`` and ``no_implicit_sync`` switch it; ``ARRAYPORT_IMPLICIT_SYNC=0``
        starts the process with it off.
    """
    return _core.implicit_sync_enabled()


@contextlib.contextmanager
def no_implicit_sync():
    """Implicit stream synchronization off for the ``with`` block (around graph capture, say).

    Returns
    -------
    contextlib.AbstractContextManager
        Restores the previous setting on exit.

    Examples
    --------
    >>> import arrayport as ap
    >>> with ap.no_implicit_sync():
    ...     ap.implicit_sync_enabled()
    False
    """
    previous = set_implicit_sync(False)
    try:
        yield
    finally:
        set_implicit_sync(previous)


def release_device_memory() -> int:
    """Give the GPU memory arrayport keeps for reuse back to the driver, for other
    libraries' allocators (what ``torch.cuda.empty_cache()`` does for PyTorch's).

    Copy results come from arrayport's memory pool on each device; the pool keeps up to an
    eighth of the device's memory mapped when idle, and the blocks of dead results are
    held until a 64th of it has gathered. Call this where another library runs short of
    memory: held blocks go back once every device that may read them has finished its
    work (a host wait), then each pool keeps only what live results use. A pool of memory
    shared with other processes (``empty_shared(device=...)``, ``share()``'s copies), which
    CUDA never shrinks, is destroyed once none of its blocks is alive (the next share makes
    another). Drivers arrayport has not loaded are not loaded.

    Returns
    -------
    int
        The bytes given back to the driver (0 where the driver cannot say).

    Examples
    --------
    >>> import arrayport as ap
    >>> ap.release_device_memory() >= 0
    True
    """
    released = 0
    for module in list(_driver_modules.values()):
        released += module.driver.release_cached_memory()
    sharing = sys.modules.get("arrayport.gpu.ipc")   # shared with other processes, if ever
    if sharing is not None:
        released += sharing.release_idle_pools()
    return released


def driver_for(device_type) -> "interface.GpuDriver | None":  # noqa: F821
    """The driver for memory of ``device_type`` (CUDA kinds: the CUDA driver; ROCm kinds:
    HIP), its module imported only now; None for devices arrayport has no driver for."""
    vendor = vendor_of_type(device_type)
    if vendor is None:
        return None
    module = _driver_modules.get(vendor)
    if module is None:
        module = importlib.import_module(_DRIVER_MODULES[vendor])
        _driver_modules[vendor] = module
    return module.driver


# Each vendor's driver module, imported on first use (its ``driver`` is read at each call).
_DRIVER_MODULES = {"cuda": "arrayport.gpu.cuda", "rocm": "arrayport.gpu.hip"}
_driver_modules: dict = {}


def driver_status() -> list[tuple[str, str]]:
    """(vendor, what its driver says): the device count, or why there is no driver. Loads
    the drivers — for ``python -m arrayport``, never on import."""
    status = []
    for vendor, device_type in (("cuda", DeviceType.CUDA), ("rocm", DeviceType.ROCM)):
        try:
            count = driver_for(device_type).device_count()
        except BufferError as error:
            status.append((vendor, f"unavailable: {str(error).partition(': ')[2]}"))
        else:
            status.append((vendor, f"{count} device{'s' if count != 1 else ''}"))
    return status


# Memory on a GPU (CUDA, CUDA managed, ROCm), which arrayport reads through a driver: the
# device kinds' own fact (arrayport.devices), asked of a bare value.
is_device_memory = is_gpu_memory_type
