"""``arrayport check``'s registry: the checks' outcomes (``Skip``, ``Warn``, ``Fail``), the
table every check module registers into (``CHECKS``, ``check``), the target being checked,
and what several check modules ask of it — where its arrays live (``_home``) and memory
placed there (``placed_view``). The checks are ``arrayport.cli.check`` (DLPack, the array
and buffer interfaces, Arrow, unusual arrays) and ``arrayport.cli.check_interface`` (the CUDA
Array Interface's consumers); ``check.run`` runs them all."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from arrayport.devices import DeviceType
from arrayport.libraries.results import element0_address, is_writable
from arrayport.libraries.samples import base_array


class Skip(Exception):
    pass


class Warn(Exception):
    pass


class Fail(Exception):
    pass


@dataclass
class Target:
    name: str
    make: Callable[[np.ndarray], Any]
    from_dlpack: Callable[[Any], Any] | None
    make_read_only: Callable[[np.ndarray], Any] | None
    from_arrow: Callable[[Any], Any] | None = None
    from_interface: Callable[[Any], Any] | None = None   # its CUDA Array Interface consumer



# --- the registry ---------------------------------------------------------------------------

CHECKS: dict[str, tuple[str, Callable]] = {}


def check(check_id: str, clause: str):
    def register(function):
        CHECKS[check_id] = (clause, function)
        return function
    return register


def _sample(target: Target, dtype: str = "float32"):
    source = base_array(dtype)
    return source, target.make(source)


_HOMES: dict[str, tuple[int, int]] = {}


def _home(target: Target) -> tuple[int, int]:
    """The DLPack device (type, id) the target's arrays live on — its factory's float32
    sample, asked through arrayport (DLPack or the CUDA Array Interface): where the
    consumer checks put the memory they offer, so that a device-only consumer (CuPy,
    numba-cuda) is given device memory and a host consumer host memory."""
    if target.name not in _HOMES:
        import arrayport
        try:
            home = tuple(arrayport.view(_sample(target)[1]).device)
        except Exception:   # a sample arrayport cannot view: offer host memory
            home = (int(DeviceType.CPU), 0)
        _HOMES[target.name] = home
    return _HOMES[target.name]


def _on_device(target: Target) -> bool:
    return not DeviceType(_home(target)[0]).is_host_accessible


def _host_only(target: Target, protocol: str) -> None:
    """Skip a check of a host-memory protocol for a library whose arrays live on a device."""
    if _on_device(target):
        raise Skip(f"its arrays live in {DeviceType(_home(target)[0]).label} memory: "
                   f"{protocol} is for host memory")


def read_only_verdict(result, address: int, flag: str, legacy: bool = False) -> str:
    """A consumer's answer to read-only memory at ``address`` offered with ``flag`` set:
    "read-only" (it shares and keeps it so) or "copied"; a writable alias is a warning —
    a failure where the consumer asked for legacy capsules, which cannot carry the flag."""
    shared = element0_address(result) == address
    if shared and is_writable(result):
        if legacy:
            raise Fail("asks for legacy capsules, so read-only memory arrives writable")
        raise Warn(f"{flag} ignored: the result is a writable alias of read-only memory")
    return "read-only" if shared else "copied"


def _same_values(got, expected: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != expected.dtype or \
            got.tobytes() != np.ascontiguousarray(expected).tobytes():
        raise Fail(f"{what}: got {got.dtype}{list(got.shape)}, expected "
                   f"{expected.dtype}{list(expected.shape)} with the same values")


def placed_view(array: np.ndarray, device: tuple[int, int]):
    """``array`` — its layout (transposed, negative strides) and read-only flag kept — as an
    arrayport View in memory of ``device``: itself on the host, else the bytes its layout
    spans copied to the device, described by the same shape and strides."""
    import arrayport
    from arrayport import _core
    host = arrayport.view(array)
    if DeviceType(device[0]).is_host_accessible:
        return host
    if not array.size:   # no bytes to read (its pointer may be past its allocation's end)
        empty = arrayport.view(np.zeros(1, np.uint8)).copy(device=device)
        return _core.view_from_pointer(empty.ptr, array.shape, array.strides,
                                       arrayport.DType(array.dtype),
                                       readonly=not array.flags.writeable, owner=empty,
                                       device=tuple(device), protocol="check")
    extents = [(n - 1) * stride for n, stride in zip(array.shape, array.strides)]
    low = sum(e for e in extents if e < 0)
    span = sum(e for e in extents if e > 0) - low + array.itemsize
    start = array.__array_interface__["data"][0] + low
    spanned = np.ctypeslib.as_array((ctypes.c_ubyte * span).from_address(start))
    placed = arrayport.view(spanned).copy(device=device)
    return _core.view_from_pointer(placed.ptr - low, array.shape, array.strides,
                                   arrayport.DType(array.dtype), readonly=not array.flags.writeable,
                                   owner=placed, device=tuple(device), protocol="check")
