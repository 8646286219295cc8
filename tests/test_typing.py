"""The types, checked by the type checker itself (issue 19): mypy --strict accepts the stubs
and what a library author writes (tests/typecheck/typed_usage.py, with assert_type), reports
every mistake marked in tests/typecheck/typed_misuse.py, and stubtest finds the compiled core's
stub true to the module. Runtime: the protocols and View[...] / Spec[...] at run time."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arrayport as ap
from optional import needs

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

ROOT = Path(__file__).parent.parent
TYPING = Path(__file__).parent / "typecheck"


def mypy(*arguments):
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", *arguments],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@needs("mypy")
def test_mypy_strict_accepts_the_stubs_and_typed_usage():
    # The stubs as modules, wherever they are installed (src/ in a checkout, site-packages
    # when testing the wheel), then a library author's code against them.
    stubs = mypy("--strict", "-m", "arrayport._core", "-m", "arrayport.typing")
    assert stubs.returncode == 0, stubs.stdout + stubs.stderr
    usage = mypy("--strict", str(TYPING / "typed_usage.py"))
    assert usage.returncode == 0, usage.stdout + usage.stderr


@needs("mypy")
def test_mypy_reports_every_marked_mistake():
    source = (TYPING / "typed_misuse.py").read_text().splitlines()
    marks = {number: re.search(r"  # E: ([\w-]+)$", line) for number, line in enumerate(source, 1)}
    expected = {number: mark.group(1) for number, mark in marks.items() if mark}
    assert len(expected) == 5
    result = mypy("--strict", str(TYPING / "typed_misuse.py"))
    found = {int(m.group(1)): m.group(2) for m in re.finditer(
        r"typed_misuse\.py:(\d+): error: .*\[([\w-]+)\]$", result.stdout, re.MULTILINE)}
    assert found == expected, result.stdout


@needs("mypy")
def test_stubtest_finds_the_core_stub_true():
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "arrayport._core",
         "--allowlist", str(ROOT / "stubtest-allowlist.txt")],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_protocols_check_at_run_time():
    from arrayport import typing as apt
    array = np.zeros(3)
    assert isinstance(array, apt.SupportsDLPack)
    assert isinstance(array, apt.SupportsArrayInterface)
    assert isinstance(array, apt.SupportsArray)
    assert not isinstance(array, apt.SupportsCudaArrayInterface)
    assert isinstance(ap.view(array), apt.SupportsDLPack)
    assert not isinstance(b"x", apt.SupportsDLPack)


def test_generic_views_and_specs_at_run_time():
    from arrayport.typing import Float32
    assert ap.View[Float32].__origin__ is ap.View
    assert ap.Spec[Float32].__args__ == (Float32,)
    with pytest.raises(TypeError, match="marks an element type in annotations"):
        Float32()
    assert Float32.name == "float32" and ap.DType(Float32.name) == "float32"


def test_importing_arrayport_does_not_import_its_typing_module():
    child = subprocess.run([sys.executable, "-c", "import sys, arrayport; "
                            "print('arrayport.typing' in sys.modules)"],
                           capture_output=True, text=True)
    assert child.stdout.strip() == "False", child.stderr
