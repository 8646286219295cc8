"""What the two driver simulators' helpers share (tests/helpers/cudasim.py for CUDA,
tests/helpers/hipsim.py for HIP): building one C source into a shared library with the
machine's compiler, saying why not where it cannot, and reading the controls every
simulator exports (``<prefix>_counters``, ``<prefix>_live``)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

# -Bsymbolic: a simulator's calls to its own entry points stay its own, even in a process
# where another driver of the same name was loaded globally first (a GPU's, by a framework;
# or the GPU suite's simulator)
FLAGS = ["-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         "-Wno-unused-parameter", "-pthread", "-Wl,-Bsymbolic"]


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def build(what: str, arguments: list[str], target: Path, soname: str,
          why_not: list[str]) -> str | None:
    """``target`` built from ``arguments`` (sources and flags beyond FLAGS) with soname
    ``soname``; its path, or None with the reason appended to ``why_not``."""
    found = compiler()
    if found is None:
        why_not.append(f"no C compiler to build {what}")
        return None
    built = subprocess.run([found, *FLAGS, f"-Wl,-soname,{soname}", *arguments,
                            "-o", str(target)], capture_output=True, text=True)
    if built.returncode != 0:
        why_not.append(f"{what} did not build:\n{built.stderr[-3000:]}")
        return None
    return str(target)


class Controls:
    """A simulator library's own controls: ``<prefix>_counters`` and ``<prefix>_live``."""

    def __init__(self, path: str, prefix: str):
        self.library = ctypes.CDLL(path)
        self._counters = getattr(self.library, f"{prefix}_counters")
        self._counters.argtypes = [ctypes.POINTER(ctypes.c_char_p),
                                   ctypes.POINTER(ctypes.c_long), ctypes.c_int]
        self._live = getattr(self.library, f"{prefix}_live")
        self._live.argtypes = [ctypes.POINTER(ctypes.c_long)] * 3

    def counters(self) -> dict[str, int]:
        names = (ctypes.c_char_p * 128)()
        values = (ctypes.c_long * 128)()
        count = self._counters(names, values, 128)
        return {names[i].decode(): values[i] for i in range(count)}

    def live(self) -> tuple[int, int, int]:
        """(allocations, events, user streams) not released."""
        values = [ctypes.c_long() for _ in range(3)]
        self._live(*(ctypes.byref(v) for v in values))
        return tuple(v.value for v in values)
