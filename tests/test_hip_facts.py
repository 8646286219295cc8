"""gpu/hip.py's HIP facts — enum values, flags, the pointer-attributes struct's layout, the
oldest runtime it accepts — held to AMD's own bindings (``rocm-bindings-hip``), whose
compiled module was generated from a HIP release's headers. No AMD GPU and no ROCm runtime
is needed: a wrong fact fails here, not on an AMD machine (issue 54: the HIP half has never
run against a real runtime)."""

import ctypes
import sys

import pytest

from optional import optional_module

bindings = optional_module("rocm.bindings.hip")
pytestmark = pytest.mark.skipif(bindings is None,
                                reason="needs rocm-bindings-hip (Linux: pip install -e '.[test]')")

from arrayport import _core  # noqa: E402
from arrayport.gpu import hip  # noqa: E402  (after the skip: the module imports everywhere)


def test_the_memory_types_are_hip_6s_numbering():
    # renumbered between HIP 5 and HIP 6: Unified went from 3 to 11, Managed to 3
    kinds, stated = bindings.hipMemoryType, _core.hip_floor_facts()   # the floor states them
    assert stated["memory_type_host"] == int(kinds.hipMemoryTypeHost)
    assert stated["memory_type_device"] == int(kinds.hipMemoryTypeDevice)
    assert stated["memory_type_managed"] == int(kinds.hipMemoryTypeManaged)
    assert stated["memory_type_unified"] == int(kinds.hipMemoryTypeUnified)


def test_the_runtime_of_the_bindings_hip_major_is_opened_by_its_soname():
    """ROCm 7 ships libamdhip64.so.7 (the unversioned name only with the development
    files): the HIP major AMD's newest bindings were made for is among the names tried,
    the newest first."""
    from rocm.version import HIP_VERSION_TUPLE
    major = HIP_VERSION_TUPLE[0]
    assert major in hip._HIP_MAJORS and hip._HIP_MAJORS == tuple(sorted(hip._HIP_MAJORS,
                                                                        reverse=True))
    assert f"libamdhip64.so.{major}" in hip._LIBRARY._names or sys.platform == "win32"


def test_error_codes_flags_and_attributes():
    errors = bindings.hipError_t
    stated = _core.hip_floor_facts()
    assert stated["error_invalid_value"] == int(errors.hipErrorInvalidValue)
    assert stated["event_disable_timing"] == int(bindings.hipEventDisableTiming)
    assert hip._HIP_ERROR_OUT_OF_MEMORY == int(errors.hipErrorOutOfMemory)
    assert hip._HIP_EVENT_DISABLE_TIMING == int(bindings.hipEventDisableTiming)
    assert hip._HIP_HOST_MALLOC_PORTABLE == int(bindings.hipHostMallocPortable)
    assert hip._HIP_MEMCPY_DEFAULT == int(bindings.hipMemcpyKind.hipMemcpyDefault)
    assert hip._HIP_DEVICE_ATTRIBUTE_MAX_PITCH == int(
        bindings.hipDeviceAttribute_t.hipDeviceAttributeMaxPitch)
    symbols = hip.driver.symbols
    assert symbols.out_of_memory == int(errors.hipErrorOutOfMemory)
    assert symbols.event_disable_timing == int(bindings.hipEventDisableTiming)
    assert symbols.host_allocate_portable == int(bindings.hipHostMallocPortable)
    assert symbols.max_pitch_attribute == int(
        bindings.hipDeviceAttribute_t.hipDeviceAttributeMaxPitch)
    assert symbols.copy_kind == (int(bindings.hipMemcpyKind.hipMemcpyDefault),)


def test_every_entry_point_arrayport_calls_is_hips():
    """Each name in gpu/hip.py's signature table is a HIP runtime function the bindings
    declare (a typo would otherwise surface only on an AMD machine)."""
    missing = [name for name in hip._SIGNATURES if not hasattr(bindings, name)]
    assert missing == []


def test_the_pointer_attributes_struct_has_hips_layout():
    """Each field written through the bindings' own struct is read back at the same place
    by arrayport's ctypes declaration, and both are the same size."""
    native = bindings.hipPointerAttribute_t()
    assert ctypes.sizeof(hip._PointerAttributes) == native.c_sizeof()
    values = {"type": 11, "device": 7, "devicePointer": 0x1234560, "hostPointer": 0xABCDEF0,
              "isManaged": 1, "allocationFlags": 0x55}
    native.type = bindings.hipMemoryType.hipMemoryTypeUnified
    native.device = values["device"]
    native.devicePointer = values["devicePointer"]
    native.hostPointer = values["hostPointer"]
    native.isManaged = values["isManaged"]
    native.allocationFlags = values["allocationFlags"]
    address = int(ctypes.cast(native.as_c_void_p(), ctypes.c_void_p).value)
    ours = hip._PointerAttributes.from_buffer_copy(
        ctypes.string_at(address, ctypes.sizeof(hip._PointerAttributes)))
    assert {name: getattr(ours, name) for name in values} == values


def test_the_floors_pointer_attributes_struct_has_hips_layout():
    """The compiled floor's own declaration (``_csrc/hip_floor.h``) lays the struct out as
    the bindings' (and as the ctypes path's, checked above field by field)."""
    size, *offsets = _core.hip_pointer_attributes_layout()
    assert size == bindings.hipPointerAttribute_t().c_sizeof()
    assert offsets == [getattr(hip._PointerAttributes, name).offset for name in
                       ("type", "device", "devicePointer", "hostPointer", "isManaged",
                        "allocationFlags")]


def test_the_floors_entry_points_are_hip_runtime_functions():
    assert [name for name in _core.hip_floor_entry_points() if not hasattr(bindings, name)] \
        == []


def test_the_oldest_runtime_accepted_is_hip_6():
    # HIP_VERSION = major * 10**7 + minor * 10**5 + patch; the bindings' release is newer
    assert hip._HIP_MINIMUM_VERSION == 6 * 10**7
    assert bindings.HIP_VERSION >= hip._HIP_MINIMUM_VERSION
