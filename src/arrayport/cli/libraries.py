"""The array libraries the ``arrayport`` command works with: which are installed (found
without importing them), which the matrix can exercise here, and reading the arrays they
return. The libraries themselves — one record each, and an adapter with how each makes and
takes arrays — are ``arrayport.libraries``; this module only asks them.

Adapters import their library inside each function: only the isolation worker calls them,
after it has imported the library itself (and survived doing so).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from arrayport.libraries import LIBRARIES, Library
from arrayport.libraries.toolkit import NotOffered

__all__ = ["BY_NAME", "LIBRARIES", "Library", "NotOffered", "cuda_devices", "exercisable",
           "installed", "installed_version"]

BY_NAME = {library.name: library for library in LIBRARIES}


def installed_version(library: Library) -> str | None:
    """The installed version, found without importing the library (None when absent)."""
    try:  # the top-level package: finding a submodule would import its parent
        if importlib.util.find_spec(library.module.partition(".")[0]) is None:
            return None
    except (ImportError, ValueError):  # a broken parent package or a bad __spec__
        return None
    names = (library.distribution if isinstance(library.distribution, tuple)
             else (library.distribution,))
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed"


def cuda_devices() -> int:
    """How many CUDA devices the driver reports (0 without one): the libraries of CUDA
    memory are exercised only where it answers (a GPU, or the CUDA driver simulator)."""
    from arrayport import gpu
    from arrayport.devices import DeviceType
    try:
        return gpu.driver_for(DeviceType.CUDA).device_count()
    except BufferError:
        return 0


def exercisable(library: Library) -> bool:
    """Whether the matrix can run this library's cells on this machine."""
    return library.make is not None and (library.memory == "host" or cuda_devices() > 0)


def installed() -> list[tuple[Library, str]]:
    found = []
    for library in LIBRARIES:
        version = installed_version(library)
        if version is not None:
            found.append((library, version))
    return found
