"""Write the PTX arrayport ships for its device kernels, from their CUDA source.

    python scripts/build_ptx.py           # rewrite src/arrayport/gpu/kernels/*.ptx
    python scripts/build_ptx.py --check   # exit 1 if a committed .ptx is not what its .cu gives

Each ``src/arrayport/gpu/kernels/<name>.cu`` is compiled by NVIDIA's NVRTC (the
``nvidia-cuda-nvrtc-cu12`` wheel, a test dependency pinned to one release: the PTX it
writes is the same byte for byte on every machine) for the virtual architecture
``ARCHITECTURE``, and the PTX is committed beside its source. At run time the NVIDIA driver
compiles that PTX for the GPU at hand (``cuModuleLoadData``) and caches the result, so a
user needs nothing beyond the driver. Why PTX committed rather than built at install time:
docs/decisions.md ("Device kernels ship as PTX").

The release is pinned low on purpose: the PTX ISA version NVRTC 12.0 writes (8.0) is one
every driver since CUDA 12.0 (R525) reads; a newer NVRTC would raise that floor for every
user. ``tests/test_gpu_kernels.py`` runs ``--check`` where that NVRTC is installed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "src" / "arrayport" / "gpu" / "kernels"
NVRTC_RELEASE = (12, 0)
ARCHITECTURE = "compute_60"   # Pascal and every GPU since; the driver compiles up from it
OPTIONS = (f"--gpu-architecture={ARCHITECTURE}", f"--include-path={KERNELS}", "--std=c++11")


def nvrtc_library() -> ctypes.CDLL | None:
    """NVRTC from the ``nvidia-cuda-nvrtc-cu12`` wheel, or None where it is not installed."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cuda_nvrtc/lib/libnvrtc.so*")):
            if "builtins" not in candidate.name:
                return ctypes.CDLL(str(candidate))
    return None


def nvrtc_release(nvrtc: ctypes.CDLL) -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return (major.value, minor.value)


def compile_ptx(nvrtc: ctypes.CDLL, source: Path) -> bytes:
    """The PTX of one kernel source; RuntimeError with NVRTC's log when it does not compile."""
    program = ctypes.c_void_p()
    status = nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.read_bytes(),
                                      source.name.encode(), 0, None, None)
    if status:
        raise RuntimeError(f"nvrtcCreateProgram({source.name}) failed: {status}")
    try:
        options = (ctypes.c_char_p * len(OPTIONS))(*(o.encode() for o in OPTIONS))
        status = nvrtc.nvrtcCompileProgram(program, len(OPTIONS), options)
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(program, log)
        if status or log.value.strip():   # a warning is a defect too: the build is -Werror
            raise RuntimeError(f"NVRTC on {source.name} (status {status}):\n"
                               f"{log.value.decode(errors='replace')}")
        nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetPTX(program, ptx)
        return ptx.value + b"\n" if not ptx.value.endswith(b"\n") else ptx.value
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


def stale(nvrtc: ctypes.CDLL) -> list[str]:
    """The kernel sources whose committed PTX differs from what NVRTC writes now."""
    return [source.name for source in sorted(KERNELS.glob("*.cu"))
            if not source.with_suffix(".ptx").is_file()
            or source.with_suffix(".ptx").read_bytes() != compile_ptx(nvrtc, source)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare the committed PTX with a fresh build; write nothing")
    arguments = parser.parse_args(argv)
    nvrtc = nvrtc_library()
    if nvrtc is None:
        print("NVRTC is not installed: pip install 'nvidia-cuda-nvrtc-cu12==12.0.140'",
              file=sys.stderr)
        return 2
    if nvrtc_release(nvrtc) != NVRTC_RELEASE:
        print(f"NVRTC {nvrtc_release(nvrtc)} is installed; the shipped PTX is written by "
              f"{NVRTC_RELEASE} (see this script's docstring)", file=sys.stderr)
        return 2
    if arguments.check:
        differing = stale(nvrtc)
        for name in differing:
            print(f"{name}: the committed PTX is stale; run python scripts/build_ptx.py",
                  file=sys.stderr)
        return 1 if differing else 0
    for source in sorted(KERNELS.glob("*.cu")):
        source.with_suffix(".ptx").write_bytes(compile_ptx(nvrtc, source))
        print(f"wrote {source.with_suffix('.ptx').relative_to(KERNELS.parents[3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
