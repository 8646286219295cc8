"""The array libraries arrayport knows: one record each, the only list of them.

A record says how to find the library without importing it (``module``, ``distribution``),
which of its types are its arrays (``roots``: the first part of their ``__module__``), what
its exports leave out that the core must put back (``quirks``), which ``arrayport.to``
targets it offers, and which adapter holds the rest: the converters
(``arrayport.libraries._<name>``), and how the interop matrix makes and takes its arrays,
its unusual arrays, how ``arrayport check`` drives it and how to read a result it returns
(``arrayport.libraries.cases._<name>``). Everything that asks about a library asks here —
the core's producer quirks (installed at import, like the hooks), ``arrayport.to``,
``@accepts(returns="like:x")``, NumPy dispatch on device memory, and the ``arrayport``
command.

Adding a library is one record below and its adapter: a runtime module
(``arrayport.libraries._<name>``: converters, where it offers ``arrayport.to`` targets) and
a cases module (``arrayport.libraries.cases._<name>``: how the command and the tests
exercise it); docs/architecture.md shows the whole diff for one. Both are imported on first
use; importing one never imports its library (each function imports it when called), and a
conversion never imports the cases.

Every name an adapter may define, and who reads it (the first three in the runtime module,
the rest in the cases module):

    name                 what it is                                  who reads it
    TARGETS              {target name: converter(x, **options)}      arrayport.to
    like(type)           the target answering in that type's         contracts (default:
                         library                                     the first target)
    numpy_backend()      the library NumPy functions on its memory   numpy_dispatch
                         run on
    make(base, layout)   its array of a 3 x 4 sample in a layout     the matrix
                         class
    routes()             {protocol: consumer entry point}            the matrix (direct
                                                                     routes)
    via_arrayport(x)     the same consumer through arrayport         the matrix (default:
                                                                     arrayport.to(x, first
                                                                     target))
    ARRAYPORT_CALL       that route as a user writes it              the matrix report
                                                                     (default: ap.to(x,
                                                                     first target), or
                                                                     ap.view(x) without one)
    kinds()              its unusual arrays                          tests, check, matrix
                         (arrayport.libraries.toolkit.Kind)
    CHECK                (make, from_dlpack, make_read_only)         arrayport check
    address_of(x),       reading a result it returned                the matrix and check
    writable(x),
    host_values(x)"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

__all__ = ["LIBRARIES", "Library", "by_name", "for_module", "for_target", "for_type",
           "producer_quirks", "target_names"]

# The names a library's runtime adapter (arrayport.libraries._<name>) owns; every other name
# in the list above is its cases' (arrayport.libraries.cases._<name>), which only the
# command and the tests load.
RUNTIME_NAMES = frozenset({"TARGETS", "like", "numpy_backend"})

# What the core puts back for a library's arrays (_core_producers.pxi owns what each means).
QUIRKS = ("immutable", "torch", "tensorflow", "lazy", "labelled", "paddle", "masked")


@dataclass(frozen=True)
class Library:
    name: str                           # what reports call it
    module: str                         # what to import to use it
    distribution: str | tuple[str, ...]  # where its version comes from (first installed)
    adapter: str | None = None          # arrayport.libraries._<adapter>: the rest of it
    roots: tuple[str, ...] = ()         # __module__ roots of its array types
    quirks: str | None = None           # one of QUIRKS, for its arrays as producers
    targets: tuple[str, ...] = ()       # its arrayport.to target names
    memory: str = "host"                # "host", or "cuda": exercised where a driver answers
    note: str = ""                      # why the matrix does not exercise it
    computes_on: tuple[str, ...] = ()   # device memory (DeviceType names) NumPy functions on
                                        # Views run on it for (host memory: NumPy itself)
    # Frameworks that can kill each other in one process: tested one per process.
    isolated: bool = False
    # A second record of a library (its GPU arrays): the adapter's names prefixed
    # "<variant>_" are this record's; the rest are shared with the first record.
    variant: str = ""

    def adapted(self) -> ModuleType | None:
        """The runtime adapter (``arrayport.libraries._<adapter>``: what ``arrayport.to``
        and the core ask for), imported on first use; None where the library has none."""
        return _module_of(f"arrayport.libraries._{self.adapter}" if self.adapter else None)

    def cases(self) -> ModuleType | None:
        """The command's cases (``arrayport.libraries.cases._<adapter>``: the matrix,
        check, unusual arrays, reading results), imported on first use; or None."""
        return _module_of(f"arrayport.libraries.cases._{self.adapter}" if self.adapter
                          else None)

    def get(self, name: str, default=None):
        """What the adapter defines as ``name`` — read from the half that owns it (see
        ``RUNTIME_NAMES``) — or ``default``."""
        module = self.adapted() if name in RUNTIME_NAMES else self.cases()
        if module is None:
            return default
        if self.variant:
            own = getattr(module, f"{self.variant}_{name}", None)
            if own is not None:
                return own
        return getattr(module, name, default)

    # What the interop matrix asks (None / {} for a library it does not exercise).
    @property
    def make(self):
        return self.get("make")

    def unavailable(self) -> str | None:
        """Why the library cannot be exercised in this process although it imports (its
        cases' ``unavailable``: PyTorch without CUDA for torch-cuda), or None. Asked in
        the isolation worker, which has imported it; memoized there."""
        if self.name not in _UNAVAILABLE:
            ask = self.get("unavailable")
            _UNAVAILABLE[self.name] = ask() if ask is not None else None
        return _UNAVAILABLE[self.name]

    @property
    def routes(self) -> dict:
        routes = self.get("routes")
        return routes() if routes is not None else {}

    @property
    def via_arrayport(self):
        own = self.get("via_arrayport")
        if own is not None or not self.targets:
            return own
        target = self.targets[0]

        def through_arrayport(x):
            import arrayport
            return arrayport.to(x, target)
        return through_arrayport


# The order is the matrix's. PaddlePaddle before TensorFlow: imported after it, it kills the
# process (3.3 / 2.21); the isolation worker would reorder them anyway, at a restart's cost.
LIBRARIES = (
    Library("numpy", "numpy", "numpy", "numpy", ("numpy",), "masked", ("numpy",)),
    Library("arrayport", "arrayport", "arrayport", "arrayport", ("arrayport",)),
    Library("torch", "torch", "torch", "torch", ("torch",), "torch", ("torch",)),
    Library("jax", "jax", "jax", "jax", ("jax", "jaxlib"), "immutable", ("jax",)),
    Library("pyarrow", "pyarrow", "pyarrow", "pyarrow", ("pyarrow",), "immutable",
            ("pyarrow", "pyarrow.Tensor")),
    Library("tvm_ffi", "tvm_ffi", "apache-tvm-ffi", "tvm_ffi", ("tvm_ffi",), None,
            ("tvm_ffi",)),
    Library("array_api_strict", "array_api_strict", "array-api-strict", "array_api_strict",
            ("array_api_strict",)),
    Library("ml_dtypes", "ml_dtypes", "ml_dtypes",
            note="dtypes for NumPy, not an array type"),
    # CUDA memory: CuPy, PyTorch's and JAX's GPU arrays (exercised where a GPU answers),
    # arrayport's own device Views, numba-cuda and cuda-core (on the simulator too).
    Library("cupy", "cupy", "cupy", "cupy", ("cupy",), None, ("cupy",), memory="cuda",
            computes_on=("CUDA", "CUDA_MANAGED", "ROCM")),
    Library("torch-cuda", "torch", "torch", "torch", memory="cuda", variant="cuda"),
    Library("jax-gpu", "jax", "jax", "jax", memory="cuda", variant="gpu"),
    Library("arrayport-cuda", "arrayport", "arrayport", "arrayport_cuda", memory="cuda"),
    Library("numba-cuda", "numba.cuda", "numba-cuda", "numba", ("numba",), None, ("numba",),
            memory="cuda"),
    Library("cuda_core", "cuda.core", "cuda-core", "cuda_core", ("cuda",), None,
            ("cuda.core",), memory="cuda"),
    Library("paddle", "paddle", "paddlepaddle", "paddle", ("paddle",), "paddle", ("paddle",),
            isolated=True),
    Library("tensorflow", "tensorflow", ("tensorflow", "tensorflow-cpu"), "tensorflow",
            ("tensorflow",), "tensorflow", ("tensorflow",), isolated=True),
    Library("mlx", "mlx.core", "mlx", "mlx", ("mlx",), None, ("mlx",), isolated=True),
    Library("warp", "warp", "warp-lang", "warp", ("warp",), None, ("warp",), isolated=True),
    Library("xarray", "xarray", "xarray", "xarray", ("xarray",), "labelled"),
    Library("dask", "dask.array", "dask", "dask", ("dask",), "lazy",
            note="lazy arrays: a producer only (arrayport refuses them until computed)"),
    # Arrow columns: the matrix's arrow route (the PyCapsule interface, nothing else).
    Library("polars", "polars", "polars", "polars", ("polars",), "immutable", ("polars",)),
    Library("nanoarrow", "nanoarrow", "nanoarrow", "nanoarrow", ("nanoarrow",), "immutable"),
    Library("duckdb", "duckdb", "duckdb", "duckdb", ("duckdb",)),
)

_ADAPTERS: dict[str, ModuleType | None] = {}   # adapter modules imported so far, by name
_UNAVAILABLE: dict[str, str | None] = {}       # Library.unavailable's answers, by name


def _module_of(name: str | None) -> ModuleType | None:
    """Module ``name``, imported once; None where there is none (a library without a
    runtime adapter: nothing to convert to)."""
    if name is None:
        return None
    if name not in _ADAPTERS:
        try:
            _ADAPTERS[name] = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            _ADAPTERS[name] = None
    return _ADAPTERS[name]
_BY_NAME = {library.name: library for library in LIBRARIES}
_BY_MODULE: dict[str, Library] = {}
for _library in LIBRARIES:          # the first record of a module (arrayport: the host one)
    _BY_MODULE.setdefault(_library.module, _library)
_BY_ROOT = {root: library for library in LIBRARIES for root in library.roots}
_BY_TARGET = {target: library for library in LIBRARIES for target in library.targets}


def by_name(name: str) -> Library:
    return _BY_NAME[name]


def for_module(module: str) -> Library | None:
    """The library imported as ``module`` ("mlx.core", "dask.array", ...)."""
    return _BY_MODULE.get(module)


def for_type(tp: type) -> Library | None:
    """The library whose arrays ``tp`` makes (by its module's root), or None."""
    return _BY_ROOT.get((getattr(tp, "__module__", None) or "").partition(".")[0])


def for_target(target: str) -> Library | None:
    """The library offering the ``arrayport.to`` target ``target``."""
    return _BY_TARGET.get(target) if isinstance(target, str) else None


def target_names() -> tuple[str, ...]:
    return tuple(_BY_TARGET)


def producer_quirks() -> dict[str, str]:
    """{module root: quirk} for the core (_core_producers.pxi), every library's at once."""
    return {root: library.quirks for library in LIBRARIES if library.quirks
            for root in library.roots}
