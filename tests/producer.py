"""ctypes bindings for tests/helpers/dlpack_producer.c, a hand-built DLPack producer.

``build_producer(folder)`` compiles it against arrayport's installed header and returns a
``Producer`` that makes capsules from ``TensorSpec`` descriptions and inspects exports.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sysconfig
from pathlib import Path

import arrayport

HELPERS = Path(__file__).parent / "helpers"
MAX_DIMS = 80


class TensorSpec(ctypes.Structure):
    _fields_ = [
        ("versioned", ctypes.c_int32), ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
        ("flags", ctypes.c_uint64), ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16), ("null_shape", ctypes.c_int32),
        ("null_strides", ctypes.c_int32), ("null_data", ctypes.c_int32),
        ("byte_offset", ctypes.c_uint64), ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS), ("data", ctypes.c_uint64),
        ("block", ctypes.c_uint64), ("shape_address", ctypes.c_uint64),
    ]


def spec(shape=(2, 3), strides=None, *, versioned=True, version=(1, 3), flags=0,
         device=(1, 0), dtype=(2, 32, 1), ndim=None, **fields) -> TensorSpec:
    """A well-formed float32 tensor description by default; override what a test breaks.
    strides=None means C-contiguous (element strides)."""
    if strides is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= max(extent, 1)
    s = TensorSpec()
    s.versioned, (s.major, s.minor), s.flags = int(versioned), version, flags
    s.device_type, s.device_id = device
    s.code, s.bits, s.lanes = dtype
    s.ndim = len(shape) if ndim is None else ndim
    for i, (extent, stride) in enumerate(zip(shape, strides)):
        s.shape[i], s.strides[i] = extent, stride
    for name, value in fields.items():
        setattr(s, name, value)
    return s


class Producer:
    def __init__(self, library_path: Path):
        with_gil = ctypes.PyDLL(str(library_path))
        self._make = with_gil.make_capsule
        self._make.argtypes = [ctypes.POINTER(TensorSpec), ctypes.c_char_p]
        self._make.restype = ctypes.py_object
        self._inspect = with_gil.inspect_capsule
        self._inspect.argtypes = [ctypes.py_object, ctypes.POINTER(TensorSpec)]
        self._inspect.restype = ctypes.c_int
        self._calls = with_gil.producer_deleter_calls
        self._calls.restype = ctypes.c_long
        self.delete_in_native_thread = with_gil.delete_in_native_thread
        self.delete_in_native_thread.argtypes = [ctypes.py_object]
        self.delete_at_process_exit = with_gil.delete_at_process_exit
        self.delete_at_process_exit.argtypes = [ctypes.py_object]
        self.path = library_path

    def capsule(self, tensor: TensorSpec | None = None, name: bytes | None = None):
        return self._make(ctypes.byref(tensor if tensor is not None else spec()), name)

    def inspect(self, capsule) -> TensorSpec | None:
        out = TensorSpec()
        return out if self._inspect(capsule, ctypes.byref(out)) >= 0 else None

    @property
    def deleter_calls(self) -> int:
        return self._calls()


def compiler() -> str | None:
    return sysconfig.get_config_var("CC") and shutil.which(
        sysconfig.get_config_var("CC").split()[0]) or shutil.which("cc")


def compile_c(source: Path, output: Path, *extra: str,
              standard: str = "c11") -> subprocess.CompletedProcess:
    command = [compiler(), f"-std={standard}", "-D_GNU_SOURCE", "-Wall", "-Werror",
               f"-I{arrayport.get_include()}", f"-I{sysconfig.get_paths()['include']}",
               *extra, str(source), "-o", str(output)]
    return subprocess.run(command, capture_output=True, text=True)


def build_producer(folder: Path) -> Producer:
    library = folder / "libdlpack_producer.so"
    result = compile_c(HELPERS / "dlpack_producer.c", library, "-shared", "-fPIC", "-O1",
                       "-pthread")
    if result.returncode != 0:
        raise RuntimeError(f"building the test producer failed:\n{result.stderr}")
    return Producer(library)


def build_extension(name: str, folder: Path):
    """Compile tests/helpers/<name>.c as a CPython extension module and import it."""
    import importlib.util

    output = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    result = compile_c(HELPERS / f"{name}.c", output, "-shared", "-fPIC", "-O1")
    if result.returncode != 0:
        raise RuntimeError(f"building {name} failed:\n{result.stderr}")
    spec_ = importlib.util.spec_from_file_location(name, output)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module
