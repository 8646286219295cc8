"""The examples run and say what they promise (examples/rownorm.py: one function, every
caller's library back)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rownorm_answers_every_installed_library_in_kind():
    result = subprocess.run([sys.executable, str(EXAMPLES / "rownorm.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("numpy ") and "-> numpy.ndarray [5.0, 3.0]" in lines[0]
    norms = [line for line in lines if not line.startswith("normalize_rows")]
    for line in norms:
        assert line.endswith("[5.0, 3.0]"), line
    assert lines[-2].endswith("-> out [[0.6, 0.8, 0.0], [0.333, 0.667, 0.667]]"), lines[-2]
    assert lines[-1].endswith("RequirementError (writable, argument 'out')"), lines[-1]
    expected = {"torch": "torch.Tensor", "jax": "ArrayImpl", "pyarrow.Tensor": "pyarrow.lib.Tensor"}
    for library, kind in expected.items():
        if importlib.util.find_spec(library.split(".")[0]):
            assert any(line.startswith(library + " ") and kind in line for line in lines)


def test_rownorm_reads_contiguous_rows_in_place():
    rownorm = load("rownorm")
    seen = []
    original = rownorm.row_norms.__wrapped__

    def spy(x, **kwargs):
        seen.append(x.ptr)
        return original(x, **kwargs)

    values = np.array([[3.0, 4.0], [6.0, 8.0]], np.float64)
    wrapped = rownorm.ap.accepts(x=rownorm.ROWS, returns="like:x")(spy)
    np.testing.assert_allclose(wrapped(values), [5.0, 10.0])
    np.testing.assert_allclose(wrapped(values[:, ::-1]), [5.0, 10.0])  # copied: reversed rows
    assert seen[0] == values.ctypes.data and seen[1] != values.ctypes.data


def test_normalize_rows_writes_into_the_caller_s_own_output_in_any_library():
    rownorm = load("rownorm")
    x = np.array([[3.0, 4.0], [6.0, 8.0]], np.float32)
    out = np.zeros_like(x)
    rownorm.normalize_rows(x, out)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.6, 0.8]], rtol=1e-6)
    torch = pytest.importorskip("torch", reason="needs torch (the [test] extra)")
    into = torch.zeros(2, 2)
    rownorm.normalize_rows(x, into)                    # a torch output, written in place
    np.testing.assert_allclose(into.numpy(), [[0.6, 0.8], [0.6, 0.8]], rtol=1e-6)
    fortran = np.asfortranarray(np.zeros_like(x))      # only a copy would make it fit
    rownorm.normalize_rows(x, fortran)                 # ROWS is x's contract, not out's
    np.testing.assert_allclose(fortran, [[0.6, 0.8], [0.6, 0.8]], rtol=1e-6)
