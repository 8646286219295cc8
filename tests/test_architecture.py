"""The floor plan (docs/architecture.md), enforced: the compiled core imports nothing above
itself — the Python layers call down into it, and where it must reach policy it calls a
hook the Python layer installed at import (arrayport/_policy.py)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import arrayport
from arrayport import _core

# The repository's sources, not the installed package: a wheel carries no .pyx/.pxi.
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "arrayport"
CORE_SOURCES = [PACKAGE / "_core.pyx", *sorted(PACKAGE.glob("_core_*.pxi"))]
# The facts the core is built on: data models with no policy (they import nothing of
# arrayport's but each other).
BELOW_THE_CORE = {"devices", "dtypes", "formats"}
IMPORT = re.compile(r"^\s*(?:from\s+arrayport(?:\.(\w+))?\s+import\s+([\w, ]+)|"
                    r"import\s+arrayport(?:\.(\w+))?)", re.MULTILINE)


def imported_modules(text):
    found = set()
    for match in IMPORT.finditer(text):
        module = match.group(1) or match.group(3)
        if module:
            found.add(module)
        else:  # from arrayport import a, b as c
            found.update(name.split(" as ")[0].strip() for name in match.group(2).split(","))
    return found


def test_the_core_sources_exist():
    assert len(CORE_SOURCES) >= 8 and all(path.exists() for path in CORE_SOURCES)


@pytest.mark.parametrize("source", CORE_SOURCES, ids=lambda path: path.name)
def test_the_core_imports_nothing_above_itself(source):
    above = imported_modules(source.read_text()) - BELOW_THE_CORE
    assert not above, f"{source.name} imports {sorted(above)} (call a hook instead)"


def test_the_modules_below_the_core_import_no_policy():
    for name in BELOW_THE_CORE:
        imported = imported_modules((PACKAGE / f"{name}.py").read_text())
        assert imported <= BELOW_THE_CORE, f"{name}.py imports {sorted(imported)}"


def test_the_grep_catches_an_upward_import():
    assert imported_modules("    from arrayport.copies import copy_view\n") == {"copies"}
    assert imported_modules("from arrayport import gpu, convert\n") == {"gpu", "convert"}
    assert imported_modules("import arrayport.numpy_dispatch\n") == {"numpy_dispatch"}


def test_hooks_must_be_callables():
    with pytest.raises(TypeError, match="copy_view must be callable"):
        _core.install_hooks(copy_view=None, driver_for=len, from_dlpack_with_options=len,
                            ndarray_dlpack_fallback=len, to_numpy_general=len,
                            to_torch_general=len, array_ufunc=len, array_function=len,
                            require_fix=len, reduce_view=len, share=len, from_shared=len)


def test_importing_arrayport_installs_the_hooks_and_loads_no_numpy_or_gpu_library():
    code = ("import sys, arrayport\n"
            "heavy = [m for m in ('numpy', 'torch', 'jax', 'cupy') if m in sys.modules]\n"
            "print(heavy)\n"
            "v = arrayport.view(b'abcd')\n"
            "print(v.copy().is_copy)\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["[]", "True"]  # View.copy went through the hook


def test_the_public_exceptions_are_the_built_in_types_they_were():
    from arrayport import _cuda_driver, _hip_driver, errors
    assert issubclass(errors.NeedsCopy, BufferError)
    assert issubclass(errors.DriverUnavailable, BufferError)
    assert issubclass(errors.CudaUnavailable, errors.DriverUnavailable)
    assert issubclass(errors.HipUnavailable, errors.DriverUnavailable)
    assert issubclass(errors.ReadOnlySharedWarning, UserWarning)
    # One class each, whichever module raises it.
    assert _cuda_driver.CudaUnavailable is errors.CudaUnavailable
    assert _hip_driver.HipUnavailable is errors.HipUnavailable
    assert arrayport.NeedsCopy is errors.NeedsCopy is _core.NeedsCopy
    assert arrayport.ReadOnlySharedWarning is errors.ReadOnlySharedWarning
    assert set(errors.__all__) <= set(dir(errors))


def every_dlpack_type():
    from arrayport.dtypes import DType, DTypeCode, dtype_problem
    for code in DTypeCode:
        for bits in (1, 4, 6, 8, 16, 32, 64, 128):
            for lanes in (1, 2):
                if dtype_problem(int(code), bits, lanes) is None:
                    yield DType(code, bits, lanes)


def test_one_statement_of_the_numpy_native_types():
    """DType.numpy_native is the fact; the core's C fast paths mirror it exactly."""
    types = list(every_dlpack_type())
    assert len(types) > 30
    for dtype in types:
        assert _core.numpy_reads(dtype) == dtype.numpy_native, dtype


def test_the_torch_type_table_is_the_cores():
    from arrayport.dtypes import DType
    assert _core.torch_holds(DType("bfloat16")) and _core.torch_holds(DType("float8_e5m2"))
    assert not _core.torch_holds(DType("float8_e3m4")) and not _core.torch_holds(DType(2, 32, 4))


@pytest.mark.parametrize("module_name", ["_cuda_driver", "_hip_driver"])
def test_both_gpu_drivers_provide_the_one_interface(module_name):
    """GpuDriver states what the copy and stream layers ask of a driver; each vendor's
    driver provides every call with the same parameters (no GPU needed to check it), and
    every call the vendor does not implement itself comes from the one shared class."""
    import importlib
    import inspect

    from arrayport._gpu_driver import VendorDriver
    from arrayport._gpu_interface import GpuDriver
    driver = importlib.import_module(f"arrayport.{module_name}").driver
    assert isinstance(driver, VendorDriver)
    calls = [name for name, member in vars(GpuDriver).items()
             if callable(member) and not name.startswith("_")]
    assert len(calls) == 11
    for name in calls:
        expected = [p for p in inspect.signature(getattr(GpuDriver, name)).parameters
                    if p != "self"]
        provided = list(inspect.signature(getattr(driver, name)).parameters)
        assert provided == expected, f"{module_name}.{name}{provided} vs {expected}"
        implemented_by = next(k for k in type(driver).__mro__ if name in vars(k))
        assert implemented_by is not object
        if implemented_by is VendorDriver:
            assert "NotImplementedError" not in inspect.getsource(getattr(VendorDriver, name))
    shared = {name for name in calls if name not in vars(type(driver))}
    assert {"make_stream_wait", "synchronize", "allocate_pinned", "copy_async",
            "device_count", "allocate_device"} <= shared


# ---- the core's parts declare what they use of each other -----------------------------------

_DEFINITION_PATTERNS = (
    r"^(?:cdef(?: inline)?(?: [\w\*]+)*|cpdef(?: [\w\*]+)*)\s+(_\w+)\s*\(",
    r"^cdef (?:dict|tuple|list|object|str|bint|Py_ssize_t|frozenset) (_\w+)",
    r"^cdef class (_\w+)", r"^class (\w+)\(", r"^cdef enum (_\w+)")


def _cross_part_uses():
    """{part: {defining part: names}} of the underscore names one part of the core uses
    from another (code only: comments and docstrings are left out)."""
    texts = {path.name: path.read_text() for path in CORE_SOURCES}
    defined = {}
    for name, text in texts.items():
        for pattern in _DEFINITION_PATTERNS:
            for match in re.finditer(pattern, text, re.MULTILINE):
                defined[match.group(1)] = name
    uses = {}
    for part, text in texts.items():
        code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
        code = re.sub(r'"""(?:.|\n)*?"""', "", code)
        for symbol, home in defined.items():
            if home in (part, "_core_base.pxi"):
                continue
            if re.search(r"(?<![\w.])" + re.escape(symbol) + r"\b", code):
                uses.setdefault(part, {}).setdefault(home, set()).add(symbol)
    return uses


def _declared_uses(text):
    declared, inside = {}, False
    for line in text.splitlines():
        if line.startswith("# Uses from other parts"):
            inside, home = True, None
            continue
        if inside and re.match(r"#   (_core[\w.]*):", line):
            home, _, names = line[4:].partition(":")
            declared[home] = {n.strip() for n in names.split(",") if n.strip()}
        elif inside and line.startswith("#       ") and home:
            declared[home] |= {n.strip() for n in line[1:].split(",") if n.strip()}
        elif inside:
            inside = False
    return declared


def test_every_cross_part_name_is_declared_in_the_parts_header():
    uses = _cross_part_uses()
    assert uses, "the scan found no cross-part use at all"
    for path in CORE_SOURCES:
        declared = _declared_uses(path.read_text())
        assert declared == uses.get(path.name, {}), (
            f"{path.name}: its 'Uses from other parts' header says {declared}, the code uses "
            f"{uses.get(path.name, {})}")
