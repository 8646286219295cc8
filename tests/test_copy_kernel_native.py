"""The host copy kernel (src/arrayport/_csrc/strided_copy.h) compiled on its own and held
bit for bit to an element loop on every vector path (tests/helpers/copy_kernel_check.c):
here, on every path this CPU runs, and — cross-compiled — on ARM64's NEON path under
qemu-aarch64, when Debian's gcc-aarch64-linux-gnu and qemu-user are installed (.ci/run
installs them). tests/test_host_copy.py holds the same paths to NumPy through Python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from arrayport import _core
from producer import compiler

REPOSITORY = Path(__file__).resolve().parent.parent
KERNEL = REPOSITORY / "src" / "arrayport" / "_csrc"
CHECK = Path(__file__).resolve().parent / "helpers" / "copy_kernel_check.c"
FLAGS = ["-O2", "-std=c11", "-Wall", "-Werror", "-Wno-unused-function", f"-I{KERNEL}"]

pytestmark = pytest.mark.skipif(not (KERNEL / "strided_copy.h").exists(),
                                reason="the kernel's sources are not beside these tests")


def build_and_run(compiler_command, output, *runner):
    built = subprocess.run([compiler_command, *FLAGS, str(CHECK), "-o", str(output)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return subprocess.run([*runner, str(output)], capture_output=True, text=True, timeout=600)


def test_every_path_of_this_cpu_copies_every_bit(tmp_path):
    if compiler() is None:
        pytest.skip("no C compiler")
    ran = build_and_run(compiler(), tmp_path / "copy_kernel_check")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # the paths the standalone build found are the ones the extension found
    assert ran.stdout.split("paths")[1].split() == _core.copy_kernel()["paths"]


@pytest.mark.slow   # a cross compiler and qemu: pytest --slow (CI) runs it
def test_the_neon_path_copies_every_bit_on_arm64(tmp_path):
    cross, emulator = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if cross is None or emulator is None:
        pytest.skip("needs Debian's gcc-aarch64-linux-gnu and qemu-user")
    ran = build_and_run(cross, tmp_path / "copy_kernel_check_arm64", emulator, "-L",
                        "/usr/aarch64-linux-gnu")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.split("paths")[1].split() == ["portable", "neon"]
