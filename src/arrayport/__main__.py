"""``python -m arrayport``: what arrayport is and which array libraries it can see."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys

# Libraries arrayport knows how to talk to: (import name, distribution name).
KNOWN_LIBRARIES = [
    ("numpy", "numpy"), ("ml_dtypes", "ml_dtypes"), ("torch", "torch"), ("jax", "jax"),
    ("cupy", "cupy"), ("pyarrow", "pyarrow"), ("tvm_ffi", "apache-tvm-ffi"),
    ("array_api_strict", "array-api-strict"), ("numba", "numba"),
    ("tensorflow", "tensorflow"), ("mlx", "mlx"), ("dask", "dask"),
]


def installed_libraries() -> list[tuple[str, str | None]]:
    """(name, version or None) for each known library, found without importing it."""
    found = []
    for module, distribution in KNOWN_LIBRARIES:
        if importlib.util.find_spec(module) is None:
            found.append((module, None))
            continue
        try:
            found.append((module, importlib.metadata.version(distribution)))
        except importlib.metadata.PackageNotFoundError:
            found.append((module, "installed"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="arrayport",
        description="arrayport moves arrays between Python libraries (DLPack, CUDA Array "
                    "Interface, NumPy protocols). Without a command it prints what it sees.")
    parser.parse_args(argv)
    import arrayport

    major, minor = arrayport.DLPACK_VERSION
    print(f"arrayport {arrayport.__version__} (DLPack {major}.{minor}, Python "
          f"{sys.version.split()[0]})")
    print(f"C headers: {arrayport.get_include()}")
    print("array libraries:")
    for name, version in installed_libraries():
        print(f"  {name:<18} {version or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
