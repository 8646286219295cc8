"""Runs tests/frameworks/test_<framework>.py and the differential test over the framework's
unusual arrays (tests/test_unusual_kinds.py), each framework in a fresh process: TensorFlow, MLX,
PaddlePaddle and Warp can kill each other (PaddlePaddle 3.3 dies importing after TensorFlow
2.21), and a workaround removed may crash the process, which must fail one test, not end
the run. A framework that is not installed (the ``[interop]`` extra) skips, saying so."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

HERE = pathlib.Path(__file__).parent
# framework -> the module its unusual arrays are listed under (arrayport.cli.unusual)
FRAMEWORKS = {"tensorflow": "tensorflow", "mlx": "mlx.core", "paddle": "paddle", "warp": "warp"}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_framework_suite_passes_in_its_own_process(framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"needs {framework} (pip install -e '.[interop]')")
    # Its own tests, and the differential test over its unusual arrays (test_unusual_kinds).
    env = dict(os.environ, ARRAYPORT_FRAMEWORK_PROCESS="1",
               ARRAYPORT_UNUSUAL_LIBRARY=FRAMEWORKS[framework])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
         "ignore::DeprecationWarning", str(HERE / "frameworks" / f"test_{framework}.py"),
         str(HERE / "test_unusual_kinds.py")],
        capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=600)
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-40:])
    assert run.returncode == 0, f"{framework} tests exited with {run.returncode}:\n{tail}"
    assert " passed" in run.stdout, tail
