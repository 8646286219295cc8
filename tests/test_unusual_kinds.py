"""The differential test for fast paths (issue 22): every unusual array kind of every
producer library installed (arrayport.cli.unusual), through every arrayport route, against
the library's own conversion to NumPy with its lazy bits resolved.

For each kind and route the answer is either the reference values (same shape, dtype and
bytes) or a clean refusal — BufferError, TypeError or ValueError of Python's own types
(NeedsCopy is a BufferError), with arrayport's message — never a library's RuntimeError,
never wrong values. On top:
- a kind with no faithful strided form (sparse, meta, nulls…) is refused by every route;
- the fast path (PyTorch's exchange table, NumPy's C API) and the protocol path
  (``__dlpack__``) give the same View — same values, read-only flag and address — or the
  same kind of refusal;
- where writing through an alias is not allowed (grad tensors, broadcasts, JAX, Arrow), a
  writable result of any route is not an alias: writing to it leaves the source as the
  library reports it.
"""

import os

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.cli.unusual import FRAMEWORK_MODULES, KINDS_BY_LIBRARY, kinds_of
from optional import installed

CLEAN = (BufferError, TypeError, ValueError)
MESSAGE_PREFIXES = ("dlpack:", "arrow:", "array:", "view:", "buffer:", "array_interface:",
                    "from_dlpack:", "to_numpy:", "to_torch:", "to(", "__array__:")


# The frameworks that can kill each other (TensorFlow, MLX, PaddlePaddle, Warp) are left out
# of the suite's own process; tests/test_frameworks.py runs this file once per framework with
# ARRAYPORT_UNUSUAL_LIBRARY naming it, in a process of its own.
ONLY = os.environ.get("ARRAYPORT_UNUSUAL_LIBRARY")


def _selected(library):
    return library == ONLY if ONLY else library not in FRAMEWORK_MODULES


CASES = [kind for library in KINDS_BY_LIBRARY if _selected(library) and installed(library)
         for kind in kinds_of(library) if all(installed(m) for m in kind.needs)]


def _to_host(result):
    """What a route returned, as a NumPy array (without copying Views)."""
    tp = type(result).__module__.partition(".")[0]
    if tp == "torch":
        tensor = result.detach().resolve_conj().resolve_neg().cpu()
        try:
            return tensor.numpy()
        except TypeError:  # bfloat16, float8: NumPy has no such type; ml_dtypes has
            return ap.to_numpy(tensor)
    return np.asarray(result)


# Routes: name -> (call, zero_copy_only).
ROUTES = {
    "view": (lambda x: ap.view(x), True),
    "from_dlpack(copy=False)": (lambda x: ap.from_dlpack(x, copy=False), True),
    "dlpack protocol route": (lambda x: _core.dlpack_view(x, copy=False, exchange_api=False),
                              True),
    "from_dlpack": (lambda x: ap.from_dlpack(x), False),
    "from_dlpack(copy=True)": (lambda x: ap.from_dlpack(x, copy=True), False),
    "View.from_dlpack": (lambda x: ap.View.from_dlpack(x), False),
    "to_numpy": (lambda x: ap.to_numpy(x), False),
    "to_numpy(copy=True)": (lambda x: ap.to_numpy(x, copy=True), False),
    "to(torch)": (lambda x: ap.to(x, "torch"), False),
    "to(jax)": (lambda x: ap.to(x, "jax"), False),
}
_NEEDS = {"to(torch)": "torch", "to(jax)": "jax"}


def _make(kind):
    try:
        return kind.make()
    except LookupError as why:  # the machine cannot make it (one CPU device for JAX)
        pytest.skip(str(why))


def _outcome(kind, route):
    call, _ = ROUTES[route]
    source = _make(kind)
    try:
        return source, call(source), None
    except Exception as error:
        return source, None, error


def _assert_clean_refusal(error, kind, route):
    assert type(error) in CLEAN or isinstance(error, _core.NeedsCopy), (
        f"{kind.label} via {route}: {type(error).__module__}.{type(error).__name__}: {error}")
    assert str(error).startswith(MESSAGE_PREFIXES), (
        f"{kind.label} via {route}: not arrayport's message: {error}")


def _write_leaves_source_alone(kind, source, got):
    """Write one element of a writable result; the source, as its library reports it, must
    not change (a writable alias of memory that must not be written would)."""
    if got.size == 0 or not got.flags.writeable:
        return
    before = kind.reference(source)
    index = (0,) * got.ndim
    got[index] = np.zeros((), got.dtype) if got[index] != np.zeros((), got.dtype) \
        else np.ones((), got.dtype)
    after = kind.reference(source)
    assert before.tobytes() == after.tobytes(), (
        f"{kind.label}: writing a route's result changed memory that must not be written")


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("kind", CASES, ids=[kind.label for kind in CASES])
def test_every_route_gives_the_reference_or_a_clean_refusal(kind, route):
    if route in _NEEDS and not installed(_NEEDS[route]):
        pytest.skip(f"{_NEEDS[route]} is not installed")
    source, result, error = _outcome(kind, route)
    if error is not None:
        _assert_clean_refusal(error, kind, route)
        if isinstance(error, ap.NeedsCopy) and error.explicit and route != "to_numpy(copy=True)":
            return  # a lazy array (Dask): computed only where copy=True asks for it
        if kind.reference is not None and not ROUTES[route][1] and route.startswith("to_numpy"):
            # arrayport's own NumPy converter may copy: it must manage whatever NumPy can
            # hold, lazy bits resolved.
            pytest.fail(f"{kind.label}: {route} refused an array NumPy can hold: {error}")
        return
    if result is source:
        return  # a conversion to the library's own type: the array itself (to_numpy(ndarray))
    if isinstance(source, np.ndarray) and type(result) is np.ndarray:
        # NumPy to NumPy (to_numpy(ndarray, copy=True)): NumPy's own copy, any dtype.
        assert result.dtype == source.dtype and np.array_equal(result, source, equal_nan=False) \
            or result.dtype.kind in "OV", f"{kind.label} via {route}: {result!r}"
        return
    assert kind.reference is not None, (
        f"{kind.label} has no faithful strided form, yet {route} returned {result!r}")
    expected = kind.reference(source)
    got = _to_host(result)
    assert got.shape == expected.shape, f"{kind.label} via {route}: shape {got.shape}"
    if route == "to(jax)" and got.dtype != expected.dtype:
        pytest.fail(f"{kind.label} via to(jax): dtype {got.dtype} instead of {expected.dtype}")
    assert got.dtype == expected.dtype, f"{kind.label} via {route}: dtype {got.dtype}"
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), (
        f"{kind.label} via {route}: wrong values {got!r}, expected {expected!r}")
    if type(result) is ap.View and not result.is_copy and not kind.writable:
        assert result.readonly, f"{kind.label} via {route}: a writable View of read-only memory"
    if not kind.writable and type(result).__module__.partition(".")[0] != "jax":
        _write_leaves_source_alone(kind, source, got)


@pytest.mark.parametrize("kind", CASES, ids=[kind.label for kind in CASES])
def test_fast_path_and_protocol_route_agree(kind):
    """ap.view / from_dlpack take the fast paths (exchange table, NumPy's C API); the
    protocol route asks __dlpack__. Same View, or the same kind of refusal."""
    source = _make(kind)
    if not hasattr(type(source), "__dlpack__"):
        pytest.skip(f"{kind.label} has no __dlpack__")
    outcomes = {}
    for route in ("from_dlpack(copy=False)", "dlpack protocol route"):
        try:
            view = ROUTES[route][0](source)
            outcomes[route] = ("view", view.shape, view.strides, view.dtype, view.readonly,
                               view.ptr, view.device)
        except Exception as error:
            _assert_clean_refusal(error, kind, route)
            outcomes[route] = ("refused", BufferError if isinstance(error, BufferError)
                               else type(error))
    fast, protocol = outcomes.values()
    assert fast == protocol, f"{kind.label}: fast path {fast} vs protocol route {protocol}"


def test_the_cases_cover_every_library_installed():
    """The count the issue asks for, and a guard against a silently empty matrix."""
    if ONLY:
        assert CASES and {kind.library for kind in CASES} == {ONLY}
        return
    libraries = {kind.library for kind in CASES}
    assert "numpy" in libraries and len(CASES) >= 16
    for library in ("torch", "jax", "pyarrow", "tvm_ffi"):
        if installed(library):
            assert library in libraries
