"""Runs tests/frameworks/test_<framework>.py, each in a fresh process: TensorFlow, MLX,
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

HERE = pathlib.Path(__file__).parent
FRAMEWORKS = {"tensorflow": "tensorflow", "mlx": "mlx", "paddle": "paddle", "warp": "warp"}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_framework_suite_passes_in_its_own_process(framework):
    if importlib.util.find_spec(FRAMEWORKS[framework]) is None:
        pytest.skip(f"needs {framework} (pip install -e '.[interop]')")
    env = dict(os.environ, ARRAYPORT_FRAMEWORK_PROCESS="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
         "ignore::DeprecationWarning", str(HERE / "frameworks" / f"test_{framework}.py")],
        capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=600)
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-40:])
    assert run.returncode == 0, f"{framework} tests exited with {run.returncode}:\n{tail}"
    assert " passed" in run.stdout and " skipped" not in run.stdout.splitlines()[-1], tail
