"""The DLPack ABI header is installed, compiles, and has the frozen layout — checked at
compile time by the header's own static asserts, and against an independent statement of
the DLPack 1.3 layout (ctypes structs written from the specification)."""

import ctypes
import subprocess
from pathlib import Path

import pytest

import arrayport
from producer import compile_c, compiler

TESTS = Path(__file__).parent


def test_header_is_installed_with_the_package():
    header = Path(arrayport.get_include()) / "arrayport" / "dlpack_abi.h"
    assert header.is_file()
    assert (Path(arrayport.__file__).parent / "_dlpack_abi.pxd").is_file()
    assert (Path(arrayport.__file__).parent / "_core.pyi").is_file()


@pytest.mark.parametrize("language", ["c11", "c++17"])
def test_layout_is_pinned_at_compile_time(tmp_path, language):
    if compiler() is None:
        pytest.skip("no C compiler")
    extra = ["-c"]
    if language.startswith("c++"):
        extra += ["-x", "c++", "-D_Static_assert=static_assert"]
    result = compile_c(TESTS / "abi" / "layout_check.c", tmp_path / "layout.o", *extra,
                       standard=language)
    assert result.returncode == 0, result.stderr


# ---- against an independent statement of the layout -------------------------------------------
# The DLPack 1.3 structs, written here from the specification with ctypes (whose layout
# rules are the platform C ABI's), not from our header: the compiler's sizeof/offsetof of
# arrayport's declarations must agree field by field, and the enum values must be DLPack's.



class SpecVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class SpecDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class SpecDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class SpecTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", SpecDevice), ("ndim", ctypes.c_int32),
                ("dtype", SpecDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class SpecManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", SpecTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class SpecManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", SpecVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", SpecTensor)]


class SpecExchangeAPI(ctypes.Structure):
    _fields_ = [("version", SpecVersion), ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", ctypes.c_void_p)]


# (our C type, the spec's struct, {our field path: the spec's field name})
STRUCTS = [
    ("APDLPackVersion", SpecVersion, {"major": "major", "minor": "minor"}),
    ("APDLDevice", SpecDevice, {"device_type": "device_type", "device_id": "device_id"}),
    ("APDLDataType", SpecDataType, {"code": "code", "bits": "bits", "lanes": "lanes"}),
    ("APDLTensor", SpecTensor, {name: name for name, _ in SpecTensor._fields_}),
    ("APDLManagedTensor", SpecManagedTensor,
     {name: name for name, _ in SpecManagedTensor._fields_}),
    ("APDLManagedTensorVersioned", SpecManagedTensorVersioned,
     {name: name for name, _ in SpecManagedTensorVersioned._fields_}),
    ("APDLPackExchangeAPI", SpecExchangeAPI,
     {"header.version": "version", "header.prev_api": "prev_api",
      **{name: name for name, _ in SpecExchangeAPI._fields_[2:]}}),
]
# DLPack's enum values (dlpack.h, v1.3).
SPEC_ENUMS = {
    "APDL_CPU": 1, "APDL_CUDA": 2, "APDL_CUDA_HOST": 3, "APDL_OPENCL": 4, "APDL_VULKAN": 7,
    "APDL_METAL": 8, "APDL_VPI": 9, "APDL_ROCM": 10, "APDL_ROCM_HOST": 11, "APDL_EXT_DEV": 12,
    "APDL_CUDA_MANAGED": 13, "APDL_ONEAPI": 14, "APDL_WEBGPU": 15, "APDL_HEXAGON": 16,
    "APDL_MAIA": 17, "APDL_TRN": 18,
    "APDL_INT": 0, "APDL_UINT": 1, "APDL_FLOAT": 2, "APDL_OPAQUE_HANDLE": 3, "APDL_BFLOAT": 4,
    "APDL_COMPLEX": 5, "APDL_BOOL": 6, "APDL_FLOAT8_E3M4": 7, "APDL_FLOAT8_E4M3": 8,
    "APDL_FLOAT8_E4M3B11FNUZ": 9, "APDL_FLOAT8_E4M3FN": 10, "APDL_FLOAT8_E4M3FNUZ": 11,
    "APDL_FLOAT8_E5M2": 12, "APDL_FLOAT8_E5M2FNUZ": 13, "APDL_FLOAT8_E8M0FNU": 14,
    "APDL_FLOAT6_E2M3FN": 15, "APDL_FLOAT6_E3M2FN": 16, "APDL_FLOAT4_E2M1FN": 17,
    "APDL_FLAG_READ_ONLY": 1, "APDL_FLAG_IS_COPIED": 2, "APDL_FLAG_IS_SUBBYTE_TYPE_PADDED": 4,
    "APDL_MAJOR_VERSION": 1, "APDL_MINOR_VERSION": 3,
}


def _printer_source() -> str:
    """A C program printing "name value" lines: sizeof/offsetof of our declarations and
    the values of our enums, as the compiler lays them out."""
    measures = []
    for c_type, _, fields in STRUCTS:
        measures.append((f"sizeof:{c_type}", f"sizeof({c_type})"))
        measures += [(f"{c_type}.{path}", f"offsetof({c_type}, {path})") for path in fields]
    measures += [(name, name) for name in SPEC_ENUMS]
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "arrayport/dlpack_abi.h"',
             "int main(void) {"]
    lines += [f'    printf("{key} %lld\\n", (long long)({expression}));'
              for key, expression in measures]
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_header_layout_matches_an_independent_statement_of_the_spec(tmp_path):
    if compiler() is None:
        pytest.skip("no C compiler")
    source, binary = tmp_path / "print_layout.c", tmp_path / "print_layout"
    source.write_text(_printer_source())
    result = compile_c(source, binary)
    assert result.returncode == 0, result.stderr
    output = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    measured = {key: int(value) for key, value in (line.split() for line in output.splitlines())}
    for c_type, spec, fields in STRUCTS:
        assert measured[f"sizeof:{c_type}"] == ctypes.sizeof(spec), c_type
        for path, spec_name in fields.items():
            assert measured[f"{c_type}.{path}"] == getattr(spec, spec_name).offset, \
                f"{c_type}.{path}"
    for name, value in SPEC_ENUMS.items():
        assert measured[name] == value, name
