"""The examples run and say what they promise (examples/rownorm.py: one function, every
caller's library back)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np

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
    for line in lines:
        assert line.endswith("[5.0, 3.0]"), line
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
