"""The DLPack ABI header is installed, compiles, and has the frozen layout."""

from pathlib import Path

import pytest

import arrayport
from producer import compile_c, compiler

TESTS = Path(__file__).parent


def test_header_is_installed_with_the_package():
    header = Path(arrayport.get_include()) / "arrayport" / "dlpack_abi.h"
    assert header.is_file()
    assert (Path(arrayport.__file__).parent / "_dlpack_abi.pxd").is_file()
    assert (Path(arrayport.__file__).parent / "_core.pyi").is_file()


@pytest.mark.parametrize("language", ["c11", "c++17"])
def test_layout_is_pinned_at_compile_time(tmp_path, language):
    if compiler() is None:
        pytest.skip("no C compiler")
    extra = ["-c"]
    if language.startswith("c++"):
        extra += ["-x", "c++", "-D_Static_assert=static_assert"]
    result = compile_c(TESTS / "abi" / "layout_check.c", tmp_path / "layout.o", *extra,
                       standard=language)
    assert result.returncode == 0, result.stderr
