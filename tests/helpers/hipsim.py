"""The HIP runtime simulator (tests/hipsim/hipsim.c) for tests: built here with the
machine's C compiler, loaded with ctypes — as tests/helpers/cudasim.py builds the CUDA one.

``library()`` builds it once per session into a temporary folder and returns its path, or
None with ``unavailable()`` saying why (no compiler). ``Simulator`` wraps its own controls
(counters, the delay of asynchronous work, device memory, what is alive, the numbers it
answers with). ``wired(monkeypatch)`` makes arrayport's HIP driver (``gpu.hip.driver``) talk
to it for one test; the rest of the process still sees a machine without ROCm.
"""

from __future__ import annotations

import ctypes
import functools
import tempfile
from pathlib import Path

from simulator_library import Controls, build

SOURCE = Path(__file__).resolve().parents[1] / "hipsim" / "hipsim.c"
_why_not: list[str] = []


@functools.lru_cache(maxsize=None)
def library(soname: str = "libhipsim.so") -> str | None:
    """Path of the built simulator (``…/libamdhip64.so``), or None (see ``unavailable``).
    Its soname is its own (loading it by path does not answer a later
    ``dlopen("libamdhip64.so")``) unless ``install`` asks for the runtime's."""
    return build("the HIP runtime simulator", [str(SOURCE)],
                 Path(tempfile.mkdtemp(prefix="hipsim-")) / "libamdhip64.so", soname,
                 _why_not)


def install() -> str | None:
    """Make this process's HIP runtime the simulator: built with the soname
    ``libamdhip64.so`` and loaded globally, so that every later ``dlopen`` of that name —
    arrayport's, hip-python's — gets it. For the GPU suite's process (``pytest -m gpu``,
    tests/conftest.py), beside the CUDA simulator; never for the main test process, whose
    other tests expect a machine without ROCm. Returns the path, or None (``unavailable``)."""
    import ctypes
    import os
    path = library("libamdhip64.so")
    if path is not None:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        os.environ["HIPSIM_LIBRARY"] = path
        # arrayport asks for libamdhip64.so.7 and .so.6 before this name: on a machine with
        # a real ROCm it would open that one; the simulator is named first, by its path
        from arrayport.gpu import hip
        hip._LIBRARY._names = (path, *hip._LIBRARY._names)
    return path


def unavailable() -> str:
    library()
    return "; ".join(_why_not) or ""


class Simulator(Controls):
    """The simulator's controls, beside the HIP API it exports."""

    def __init__(self, path: str):
        super().__init__(path, "hipsim")
        self.hip = self.library
        self.hip.hipsim_set_delay_us.argtypes = [ctypes.c_long]
        self.hip.hipsim_set_device_memory.argtypes = [ctypes.c_longlong]
        self.hip.hipsim_fact.argtypes = [ctypes.c_char_p]
        self.hip.hipsim_fact.restype = ctypes.c_long

    def set_delay_us(self, microseconds: int) -> None:
        self.hip.hipsim_set_delay_us(microseconds)

    def set_device_memory(self, nbytes: int) -> None:
        """Every device's memory (0: back to 16 GiB)."""
        self.hip.hipsim_set_device_memory(nbytes)

    def fact(self, name: str) -> int:
        """The number the simulator answers with for HIP's ``name`` (-1: none)."""
        return self.hip.hipsim_fact(name.encode())


def wired(monkeypatch, path: str):
    """arrayport's HIP driver over the simulator at ``path`` for this test (its library
    swapped, as the tests swap the CUDA driver's for stand-ins)."""
    from arrayport.gpu import hip
    library = hip.NativeLibrary("rocm", "the HIP runtime (simulated)", (path,),
                                hip.HipUnavailable, hip._SIGNATURES, hip._initialise)
    monkeypatch.setattr(hip.driver, "library", library)
    return hip.driver
