"""The CUDA driver simulator (tests/cudasim/cudasim.c) for tests: built here against
NVIDIA's own cuda.h from the ``nvidia-cuda-runtime-cu12`` wheel (a test dependency; the
header is read where pip put it, never copied into the repository), loaded with ctypes.

``library()`` builds it once per session into a temporary folder, as the file
``libcuda.so.1`` (the name arrayport and NVIDIA's libraries open: a child process with that
folder on ``LD_LIBRARY_PATH`` runs on the simulator) whose soname is ``libcudasim.so.1``
(so that loading it by path into the test process does not answer every later
``dlopen("libcuda.so.1")`` — the other tests still see a machine without CUDA), and returns
its path, or None with ``unavailable()`` saying why
(no compiler, no header). ``Simulator`` wraps the simulator's own controls: its call
counters (driver calls by name, and the faults it found: ``kernel_faults``,
``misaligned_accesses``, ``peer_access_faults``, ``copy_faults``, ``freed_memory_accesses``,
``sticky_refusals``, ``dead_function_launches``…), the delay of asynchronous work, whether
devices are peers, what is still alive.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import tempfile
from pathlib import Path

from simulator_library import Controls, build

SOURCE = Path(__file__).resolve().parents[1] / "cudasim" / "cudasim.c"
# arrayport's device kernels, compiled as C into the simulator (their dialect.h says how)
KERNELS = Path(__file__).resolve().parents[2] / "src" / "arrayport" / "gpu" / "kernels"
_why_not: list[str] = []


def cuda_include() -> Path | None:
    """The folder holding NVIDIA's cuda.h, from the nvidia-cuda-runtime-cu12 wheel."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root) / "cuda_runtime" / "include"
        if (candidate / "cuda.h").is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def library(soname: str = "libcudasim.so.1", as_driver: bool = False) -> str | None:
    """Path of the built simulator (``…/libcuda.so.1``), or None (see ``unavailable``).
    ``as_driver``: built without its own controls exported (counters, delays: the driver
    API alone, as a GPU's driver library has it)."""
    include = cuda_include()
    if include is None:
        _why_not.append("NVIDIA's cuda.h is not installed (pip install nvidia-cuda-runtime-cu12)")
        return None
    return build("the CUDA driver simulator",
                 ["-Wno-deprecated-declarations", f"-I{include}", str(SOURCE),
                  "-x", "c", *map(str, sorted(KERNELS.glob("*.cu"))), "-x", "none",
                  *(["-DCUDASIM_AS_DRIVER"] if as_driver else [])],
                 Path(tempfile.mkdtemp(prefix="cudasim-")) / "libcuda.so.1", soname, _why_not)


def unavailable() -> str:
    library()
    return "; ".join(_why_not) or ""


class Simulator(Controls):
    """The simulator's controls, beside the CUDA API it exports."""

    def __init__(self, path: str):
        super().__init__(path, "cudasim")
        self.cuda = self.library
        self.cuda.cudasim_set_delay_us.argtypes = [ctypes.c_long]
        self.cuda.cudasim_set_max_pitch.argtypes = [ctypes.c_long]
        self.cuda.cudasim_set_device_memory.argtypes = [ctypes.c_long]
        self.cuda.cudasim_set_peer_access.argtypes = [ctypes.c_int]
        self.cuda.cudasim_set_paused.argtypes = [ctypes.c_int]
        self.cuda.cudasim_live_modules.restype = ctypes.c_long

    def set_delay_us(self, microseconds: int) -> None:
        self.cuda.cudasim_set_delay_us(microseconds)

    def set_paused(self, paused: bool) -> None:
        """Streams paused: work queues and nothing runs (host-cost benchmarks only)."""
        self.cuda.cudasim_set_paused(int(paused))

    def set_max_pitch(self, nbytes: int) -> None:
        """Every device's maximum 2-D copy pitch (0: back to a GPU's 2**31 - 1)."""
        self.cuda.cudasim_set_max_pitch(nbytes)

    def set_device_memory(self, nbytes: int) -> None:
        """Every device's memory (0: back to 16 GiB): device allocations past it fail with
        CUDA_ERROR_OUT_OF_MEMORY, a pool's chunks (2 MiB each) counted whether their blocks
        are in use or not."""
        self.cuda.cudasim_set_device_memory(nbytes)

    def set_peer_access(self, possible: bool) -> None:
        """Whether distinct devices can reach each other's memory (``cuDeviceCanAccessPeer``;
        True by default, as ``CUDASIM_PEER_ACCESS=0`` makes it False from the start): False
        for a machine without a peer-to-peer path. Access already enabled or granted stays."""
        self.cuda.cudasim_set_peer_access(1 if possible else 0)

    def live_modules(self) -> int:
        """Modules loaded and not unloaded."""
        return self.cuda.cudasim_live_modules()


def install() -> str | None:
    """Make this process's CUDA driver the simulator: built with the soname
    ``libcuda.so.1`` and loaded globally, so that every later ``dlopen("libcuda.so.1")`` —
    arrayport's, NVIDIA's libraries' — gets it. For a process that runs the GPU suite
    (``pytest -m gpu``, tests/conftest.py); never for the main test process, whose other
    tests expect a machine without CUDA. Returns the path, or None (``unavailable``)."""
    path = library("libcuda.so.1")
    if path is not None:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        os.environ["CUDASIM_LIBRARY"] = path
    return path
