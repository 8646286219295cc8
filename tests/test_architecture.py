"""The floor plan (docs/architecture.md), enforced: the compiled core imports nothing above
itself — the Python layers call down into it, and where it must reach policy it calls a
hook the Python layer installed at import (arrayport/_policy.py)."""

import ast
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
# (a module inside a package counts as its top-level name: arrayport.gpu.copies is "gpu")
IMPORT = re.compile(r"^\s*(?:from\s+arrayport(?:\.(\w+)(?:\.\w+)*)?\s+import\s+([\w, ]+)|"
                    r"import\s+arrayport(?:\.(\w+)(?:\.\w+)*)?)", re.MULTILINE)


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
    assert imported_modules("    from arrayport.gpu.copies import copy_view\n") == {"gpu"}
    assert imported_modules("from arrayport import gpu, convert\n") == {"gpu", "convert"}
    assert imported_modules("import arrayport.numpy_dispatch\n") == {"numpy_dispatch"}


def test_hooks_must_be_callables():
    with pytest.raises(TypeError, match="copy_view must be callable"):
        _core.install_hooks(copy_view=None, driver_for=len, from_dlpack_with_options=len,
                            ndarray_dlpack_fallback=len, to_numpy_general=len,
                            to_torch_general=len, array_ufunc=len, array_function=len,
                            require_fix=len, reduce_view=len, share=len, from_shared=len,
                            unasked_copy=len)


def child_prints(code: str) -> str:
    """What a fresh Python process running ``code`` prints (it must succeed)."""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr
    return child.stdout


def test_importing_arrayport_installs_the_hooks_and_loads_no_numpy_or_gpu_library():
    code = ("import sys, arrayport\n"
            "heavy = [m for m in ('numpy', 'torch', 'jax', 'cupy') if m in sys.modules]\n"
            "print(heavy)\n"
            "v = arrayport.view(b'abcd')\n"
            "print(v.copy().is_copy)\n")
    assert child_prints(code).split() == ["[]", "True"]  # View.copy went through the hook


def test_releasing_device_memory_loads_no_driver_that_was_never_used():
    """``ap.release_device_memory()`` asks the drivers arrayport has loaded; where none is
    (no GPU work yet), it gives back nothing and opens no vendor library."""
    code = ("import sys, arrayport as ap\n"
            "print(ap.release_device_memory())\n"
            "print([m for m in ('arrayport.gpu.cuda', 'arrayport.gpu.hip') if m in sys.modules])\n")
    assert child_prints(code).split() == ["0", "[]"]


def test_converting_loads_nothing_of_the_command():
    """The adapters' shared toolkit lives with the libraries (renovation 3): a conversion,
    and every adapter module, loads nothing of arrayport.cli (the command depends on the
    libraries, not the other way)."""
    code = ("import sys, importlib, numpy as np, arrayport as ap\n"
            "from arrayport import libraries\n"
            "ap.to(np.zeros(3), 'numpy'); ap.to_numpy([1, 2])\n"
            "for library in libraries.LIBRARIES:\n"
            "    library.adapted(), library.cases()\n"
            "print([m for m in sys.modules if m.startswith('arrayport.cli')])\n")
    assert child_prints(code).split() == ["[]"]


def test_converting_loads_no_librarys_cases():
    """A library's runtime adapter is apart from its cases (renovation 3): converting to
    the test extra's targets (the heavy frameworks, which may not share a process, apart)
    loads the converters only."""
    code = ("import sys, numpy as np, arrayport as ap\n"
            "for target in ('numpy', 'torch', 'jax', 'pyarrow', 'pyarrow.Tensor', 'tvm_ffi'):\n"
            "    try:\n"
            "        ap.to(np.arange(6.0).reshape(2, 3), target)\n"
            "    except (ImportError, BufferError, TypeError, ValueError):\n"
            "        pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('arrayport.libraries.')))\n")
    loaded = ast.literal_eval(child_prints(code).splitlines()[-1])   # after any library's chatter
    assert "arrayport.libraries._numpy" in loaded
    assert [m for m in loaded if ".cases" in m] == []


def test_the_public_exceptions_are_the_built_in_types_they_were():
    from arrayport import errors
    from arrayport.gpu import cuda as cuda_driver, hip as hip_driver
    assert issubclass(errors.NeedsCopy, BufferError)
    assert issubclass(errors.DriverUnavailable, BufferError)
    assert issubclass(errors.CudaUnavailable, errors.DriverUnavailable)
    assert issubclass(errors.HipUnavailable, errors.DriverUnavailable)
    assert issubclass(errors.ReadOnlySharedWarning, UserWarning)
    # One class each, whichever module raises it.
    assert cuda_driver.CudaUnavailable is errors.CudaUnavailable
    assert hip_driver.HipUnavailable is errors.HipUnavailable
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


@pytest.mark.parametrize("module_name", ["cuda", "hip"])
def test_both_gpu_drivers_provide_the_one_interface(module_name):
    """GpuDriver states what the copy and stream layers ask of a driver; each vendor's
    driver provides every call with the same parameters (no GPU needed to check it), and
    every call the vendor does not implement itself comes from the one shared class."""
    import importlib
    import inspect

    from arrayport.gpu.vendor import VendorDriver
    from arrayport.gpu.interface import GpuDriver
    driver = importlib.import_module(f"arrayport.gpu.{module_name}").driver
    assert isinstance(driver, VendorDriver)
    calls = [name for name, member in vars(GpuDriver).items()
             if callable(member) and not name.startswith("_")]
    assert len(calls) == 40   # 21, and sharing's 19 (gpu.ipc, issue 55)
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
    # Each vendor's stream wait is made by its compiled floor where it serves (gpu/cuda.py,
    # gpu/hip.py); the shared one serves where the floor is off.
    floor = {"make_stream_wait"}
    assert {"make_stream_wait", "synchronize", "allocate_pinned", "copy_async",
            "device_count", "allocate_device"} - floor <= shared


@pytest.mark.parametrize("module_name", ["cuda", "hip"])
def test_both_gpu_drivers_provide_the_memory_floor(module_name):
    """MemoryFloor states what the memory policy asks of a driver; each vendor's driver
    provides every call with the same parameters, and the policy is each driver's own
    ``memory``, over that driver."""
    import importlib
    import inspect

    from arrayport.gpu.held_memory import DeviceMemory
    from arrayport.gpu.interface import MemoryFloor
    driver = importlib.import_module(f"arrayport.gpu.{module_name}").driver
    calls = _calls_of(MemoryFloor)
    assert len(calls) == 24
    for name in calls:
        member = getattr(type(driver), name)
        if isinstance(member, property):
            assert isinstance(vars(MemoryFloor)[name], property), name
            continue
        expected = [p for p in inspect.signature(getattr(MemoryFloor, name)).parameters
                    if p != "self"]
        provided = list(inspect.signature(getattr(driver, name)).parameters)
        assert provided == expected, f"{module_name}.{name}{provided} vs {expected}"
    assert isinstance(driver.memory, DeviceMemory) and driver.memory.floor is driver


def _calls_of(protocol) -> set[str]:
    return {name for name, member in vars(protocol).items()
            if (callable(member) or isinstance(member, property)) and not name.startswith("_")}


def test_the_memory_policy_asks_only_the_memory_floor_and_names_no_vendor():
    """gpu/held_memory.py decides for every vendor: each ``floor.<call>`` it makes is a
    call of ``MemoryFloor``, it reaches no driver otherwise (no ``ctypes``, no library, no
    vendor module), and its code names no vendor's entry point (``cu…``, ``hip…``)."""
    from arrayport.gpu.interface import MemoryFloor
    text = (PACKAGE / "gpu" / "held_memory.py").read_text()
    code = _code_of(text)
    asked = set(re.findall(r"\bfloor\.(\w+)", code))
    assert len(asked) >= 20, f"the scan found almost no floor call: {asked}"
    assert asked <= _calls_of(MemoryFloor), asked - _calls_of(MemoryFloor)
    imports = set(re.findall(r"^(?:from|import) ([\w.]+)", code, re.MULTILINE))
    assert imports <= {"__future__", "collections", "contextlib", "functools", "os",
                       "threading", "time", "weakref", "arrayport.gpu.library"}, imports
    assert not re.search(r"\b(?:cu|hip)[A-Z]\w+|\.library\.|\b_core\b", code)


def _code_of(text: str) -> str:
    """``text`` without its comments and docstrings (a string on lines of its own)."""
    text = re.sub(r'"""[\s\S]*?"""', "", text)
    return re.sub(r"#.*", "", text)


# The drivers themselves: the vendor modules, their memory floor and policy, CUDA's kernel
# cache, the loader and the interfaces. Every other module is a layer above them.
_DRIVERS_OWN = {"gpu/cuda.py", "gpu/hip.py", "gpu/vendor.py", "gpu/cuda_memory.py",
                "gpu/cuda_ipc.py",
                "gpu/held_memory.py", "gpu/kernels/__init__.py", "gpu/library.py",
                "gpu/interface.py"}


def test_the_layers_above_the_drivers_ask_only_the_driver_interface():
    """Every ``driver.<call>`` (and ``driver_for(...).<call>``) in the layers above the
    drivers names a call of ``GpuDriver``: a layer that reaches past the interface (a
    vendor's own method, its library) ties itself to one vendor."""
    from arrayport.gpu.interface import GpuDriver
    calls = {name for name, member in vars(GpuDriver).items()
             if callable(member) and not name.startswith("_")}
    reached = {}
    users = 0
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in _DRIVERS_OWN:
            continue
        asked = re.findall(r"\b(?:driver|driver_for\([^)]*\))\.(\w+)", path.read_text())
        users += bool(asked)
        for name in set(asked) - calls:
            reached.setdefault(relative, set()).add(name)
    assert users >= 5, "the scan found almost no layer asking a driver"
    assert reached == {}, f"past the driver interface: {reached}"


# ---- the core's parts declare what they use of each other -----------------------------------

_DEFINITION_PATTERNS = (
    r"^(?:cdef(?: inline)?(?: [\w\*]+)*|cpdef(?: [\w\*]+)*)\s+(_\w+)\s*\(",
    r"^cdef (?:dict|tuple|list|object|str|bint|Py_ssize_t|frozenset) (_\w+)",
    r"^cdef class (\w+)", r"^class (\w+)\(", r"^cdef enum (_\w+)")


def _cross_part_uses():
    """{part: {defining part: names}} of the names one part of the core uses from another
    (code only: comments and docstrings are left out): its underscore names, and its
    classes, public ones too (``View`` is the core's hub: most parts use it, and say so)."""
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


# The pairs of parts that still use each other (renovation 3 cut them from 11 to these 5,
# besides the View's), none with _core.pyx. A new pair fails the test below; a pair that is
# gone must leave this list too.
#
# The View is the core's hub, said rather than hidden: its methods are doors to the parts
# that own the work (_core_view.pxi's header), and those parts take and make Views — 18
# parts use the View type. Its pairs are listed, exactly, as the other pairs are.
_VIEW_HUB_PAIRS = {(part, "_core_view.pxi") for part in (
    "_core_arrow.pxi", "_core_buffer.pxi", "_core_capi.pxi", "_core_describe.pxi",
    "_core_device_copy.pxi", "_core_hip_copy.pxi", "_core_host_copy.pxi",
    "_core_interface.pxi", "_core_layout.pxi", "_core_numpy.pxi", "_core_streams.pxi")}
_MUTUAL_PARTS = _VIEW_HUB_PAIRS | {
    ("_core_arrow.pxi", "_core_dispatch.pxi"),     # the Arrow import is a protocol of view;
    ("_core_dispatch.pxi", "_core_numpy.pxi"),     # so is the ndarray fast path;
    ("_core_dispatch.pxi", "_core_producers.pxi"),  # resolving a NeedsCopy views the copy;
    ("_core_dlpack.pxi", "_core_exchange.pxi"),    # DLPack import asks the exchange table,
    ("_core_dlpack.pxi", "_core_producers.pxi"),   # which imports like a capsule
}


def _mutual_pairs(uses):
    edges = {(part, home) for part, homes in uses.items() for home in homes}
    return {tuple(sorted(edge)) for edge in edges if (edge[1], edge[0]) in edges}


def test_the_parts_graph_has_no_new_pair_that_uses_each_other():
    """``pytest tests/test_architecture.py -k parts_graph -s`` prints who uses whom."""
    uses = _cross_part_uses()
    for part in sorted(uses):
        print(f"{part} uses {', '.join(sorted(uses[part]))}")
    mutual = _mutual_pairs(uses)
    assert mutual <= _MUTUAL_PARTS, f"parts that now use each other: {mutual - _MUTUAL_PARTS}"
    assert _MUTUAL_PARTS <= mutual, f"no longer mutual, drop from the list: {_MUTUAL_PARTS - mutual}"


def test_the_pair_finder_sees_a_pair():
    uses = {"a.pxi": {"b.pxi": {"_x"}}, "b.pxi": {"a.pxi": {"_y"}, "c.pxi": {"_z"}}}
    assert _mutual_pairs(uses) == {("a.pxi", "b.pxi")}


# ---- no two-way rooms ------------------------------------------------------------------------

def _import_graph():
    """{module: the package's modules it imports}, at module level or inside functions
    (a lazy import is still a dependency), the package root left out (every submodule
    imports it implicitly)."""
    import ast
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wanted = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wanted.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    trimmed = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(trimmed + ([base] if base else []))
                wanted.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules
                              else base for alias in node.names)
        found = set()
        for target in wanted:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target not in (name, "arrayport"):
                found.add(target)
        graph[name] = found
    return graph


def _cycles(graph):
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))
    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_no_module_imports_one_that_imports_it_back():
    graph = _import_graph()
    assert "arrayport.convert" in graph and "arrayport.libraries._torch" in graph
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_two_way_room():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---- one record per library -----------------------------------------------------------------

# Each library's module names, as code spells them (identifiers and strings; comments and
# docstrings are prose and may name any library).
_LIBRARY_SPELLINGS = {
    "torch": r"torch", "jax": r"jax|jaxlib", "pyarrow": r"pyarrow", "tvm_ffi": r"tvm_ffi",
    "cupy": r"cupy", "tensorflow": r"tensorflow", "mlx": r"mlx", "paddle": r"paddle",
    "warp": r"warp", "dask": r"dask", "xarray": r"xarray", "numba": r"numba",
    "cuda_core": r"cuda\.core|cuda_core", "array_api_strict": r"array_api_strict",
    "polars": r"polars", "nanoarrow": r"nanoarrow", "duckdb": r"duckdb"}


def _code_only(text):
    text = re.sub(r'[rbfu]?"""(?:.|\n)*?"""', '""', text)
    text = re.sub(r"[rbfu]?'''(?:.|\n)*?'''", "''", text)
    return "\n".join("" if line.lstrip().startswith("#") else line.split("  #", 1)[0]
                     for line in text.splitlines())


def _files_naming(spelling):
    """The files under src/arrayport whose code names a library; the compiled core (its
    .pyx and the .pxi parts it includes: one module) counts once, and so does an adapter
    (its runtime module and its cases)."""
    found = set()
    for path in PACKAGE.rglob("*"):
        if path.suffix not in (".py", ".pyx", ".pxi"):
            continue
        if re.search(rf"(?<!\w)({spelling})(?!\w)", _code_only(path.read_text())):
            name = str(path.relative_to(PACKAGE))
            # an adapter's two halves (runtime, cases) are one adapter
            name = name.replace("libraries/cases/", "libraries/")
            found.add("the core" if name.startswith("_core") else name)
    return found


@pytest.mark.parametrize("library", sorted(_LIBRARY_SPELLINGS))
def test_each_library_is_named_in_at_most_four_files(library):
    # its record, its adapter, the core's fast path where one exists, one more
    files = _files_naming(_LIBRARY_SPELLINGS[library])
    assert {"libraries/__init__.py"} <= files, files
    assert len(files) <= 4, f"{library} is named in {sorted(files)}"


def test_the_count_sees_a_name_in_code_and_not_in_prose():
    assert re.search(r"(?<!\w)(warp)(?!\w)", _code_only('x = "warp"\n'))
    assert not re.search(r"(?<!\w)(warp)(?!\w)", _code_only('"""warp"""\n# warp\n'))


def test_every_record_and_its_adapter_agree():
    from arrayport import libraries
    seen_targets = set()
    for library in libraries.LIBRARIES:
        assert library.quirks is None or library.quirks in libraries.QUIRKS, library
        if library.adapter is None:
            assert not library.targets and not library.roots, library
            continue
        adapter, cases = library.adapted(), library.cases()
        if library.variant:
            # a library's second record (its GPU arrays): no targets or types of its own,
            # its cases the "<variant>_" names in the first record's adapter
            assert not library.targets and not library.roots, library.name
            assert callable(getattr(cases, f"{library.variant}_make")), library.name
            assert callable(getattr(cases, f"{library.variant}_routes")), library.name
            continue
        assert cases is not None or library.note, library.name   # CuPy: converters only
        assert cases is None or cases.__doc__, library.name
        assert (adapter is None) == (not library.targets), library.name
        assert adapter is None or adapter.__doc__, library.name
        assert set(getattr(adapter, "TARGETS", {})) == set(library.targets), library.name
        assert not seen_targets & set(library.targets)
        seen_targets |= set(library.targets)
        if library.computes_on:
            assert callable(adapter.numpy_backend)
        # each name where its owner reads it: the runtime's in the runtime module only
        for name in libraries.RUNTIME_NAMES:
            assert not hasattr(cases, name), (library.name, name)
        for name in ("make", "routes", "via_arrayport", "kinds", "CHECK", "ARRAYPORT_CALL",
                     "address_of", "writable", "host_values"):
            assert adapter is None or not hasattr(adapter, name), (library.name, name)
        for name in ("make", "via_arrayport", "kinds", "address_of", "writable",
                     "host_values"):
            assert getattr(cases, name, None) is None or callable(getattr(cases, name))
        assert library.get("like") is None or callable(library.get("like"))
        if library.note == "" and library.memory == "host" and library.name != "dask":
            assert library.make is not None and library.via_arrayport is not None, library
    assert set(arrayport.convert.TARGETS) == seen_targets


def test_the_core_reads_the_records_quirks():
    from arrayport import libraries
    quirks = libraries.producer_quirks()
    assert quirks["jaxlib"] == "immutable" and quirks["dask"] == "lazy"
    with pytest.raises(ValueError, match="unknown quirk 'sticky'"):
        _core.install_producer_quirks({"somewhere": "sticky"})
    for quirk in libraries.QUIRKS:             # every name a record may use, the core knows
        _core.install_producer_quirks({"somewhere": quirk})
    _core.install_producer_quirks(quirks)      # as arrayport._policy installed it


def test_a_records_quirk_reaches_the_core(monkeypatch):
    # A made-up library whose record says "immutable": its arrays' Views are read-only,
    # though its export says writable — the record, not the core, decided.
    import numpy as np
    from arrayport import libraries

    class Array:
        __module__ = "madeup.arrays"

        def __init__(self):
            self.data = np.zeros(3)

        def __dlpack__(self, **kwargs):
            return self.data.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.data.__dlpack_device__()

    assert not arrayport.view(Array()).readonly
    try:
        _core.install_producer_quirks({**libraries.producer_quirks(), "madeup": "immutable"})
        assert arrayport.view(Array()).readonly
    finally:
        _core.install_producer_quirks(libraries.producer_quirks())
    assert not arrayport.view(Array()).readonly
