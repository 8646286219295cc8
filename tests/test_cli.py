"""`python -m arrayport` runs on a fresh install and says what it sees."""

import subprocess
import sys

import arrayport


def test_main_prints_version_and_libraries():
    result = subprocess.run([sys.executable, "-m", "arrayport"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"arrayport {arrayport.__version__} (DLPack 1.3" in result.stdout
    assert "numpy" in result.stdout
    # Each GPU driver: its device count, or why there is none.
    drivers = result.stdout.split("GPU drivers")[1].splitlines()[1:3]
    assert [line.split()[0] for line in drivers] == ["cuda", "rocm"]
    assert all(" device" in line or "unavailable: the " in line for line in drivers)


def test_importing_arrayport_loads_no_gpu_or_framework_library():
    # Modules already loaded at start-up are not arrayport's doing: cuda-bindings and
    # numba-cuda install .pth files that import the "cuda" package in every interpreter.
    code = ("import sys; before = set(sys.modules); import arrayport; "
            "bad = [m for m in ('torch', 'jax', 'cupy', 'numba', 'cuda', 'pyarrow', "
            "'ml_dtypes') if m in sys.modules and m not in before]; print(bad)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr
