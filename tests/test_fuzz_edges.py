"""Fuzzing aimed at the edges (issue 23): layouts whose products and sums cross 2**31,
2**32, 2**63 and 2**64, zero strides at huge extents, negative strides reaching below the
base, offsets at and past the end of a buffer — and the protocol dunders called directly
with wrong arities and types.

The oracle for layouts is a second implementation of arrayport's extent rule in Python
ints, which cannot overflow (``extent_model``): arrayport must accept exactly the layouts
the model accepts and report the model's ``size`` and ``nbytes``. Views over a real buffer
are then read in full and compared with NumPy's own view of the same bytes, so a bounds
check that is wrong reads outside the buffer (a crash here, a report under ASan).

Short run in the suite (deterministic, ARRAYPORT_FUZZ_EXAMPLES per test, 500 by default);
long run: ``ARRAYPORT_FUZZ_EXAMPLES=50000 pytest tests/test_fuzz_edges.py -x -p no:cacheprovider``,
and under the sanitizers: ``bash reliability/sanitize.sh tests/test_fuzz_edges.py``.
"""

import math
import os

import numpy as np
import pytest

# Every test here is a hypothesis property: without hypothesis the module skips.
pytest.importorskip("hypothesis", reason="needs hypothesis (not installed)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import arrayport as ap

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

EXAMPLES = int(os.environ.get("ARRAYPORT_FUZZ_EXAMPLES", "500"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=list(HealthCheck), database=None)
CLEAN_ERRORS = (BufferError, TypeError, ValueError)
INT64_MAX = 2**63 - 1
ADDRESS_MAX = 2**64 - 1
READ_LIMIT = 1 << 20  # Views over buffers up to this many bytes are read in full


def near_powers(*exponents):
    """2**k - 1, 2**k, 2**k + 1 for each k, and their negatives."""
    values = [2**k + d for k in exponents for d in (-1, 0, 1)]
    return values + [-v for v in values]


# Extents whose products cross 2**31, 2**32, 2**63 and 2**64 in one to four dimensions.
EDGE_EXTENTS = st.one_of(
    st.integers(0, 4),
    st.sampled_from([2**k + d for k in (15, 16, 21, 31, 32, 33, 61, 62, 63) for d in (-1, 0, 1)]),
    st.integers(0, INT64_MAX), st.integers(-2, -1))
# Element strides: small, zero (broadcasts), huge of either sign.
EDGE_STRIDES = st.one_of(
    st.integers(-4, 4), st.just(0),
    st.sampled_from(near_powers(15, 16, 31, 32, 33, 61, 62, 63)),
    st.integers(-2**63, INT64_MAX))
ITEMSIZES = st.sampled_from([1, 2, 4, 8, 16])
TYPESTR = {1: "|u1", 2: "<u2", 4: "<u4", 8: "<u8", 16: "<c16"}


def extent_model(shape, element_strides, itemsize, first):
    """(size, nbytes) of the layout, or None where arrayport must refuse it: the rule of
    _csrc/extent.h in Python integers. ``first``: the address of the first element."""
    if any(n < 0 or n > INT64_MAX for n in shape):
        return None
    # NumPy's rule: the non-zero extents' product, in bytes, fits (empty arrays included).
    product = math.prod(n for n in shape if n)
    if product * itemsize > INT64_MAX:
        return None
    size = 0 if 0 in shape else product
    if size == 0:
        return size, 0
    if first == 0:  # NULL data with elements
        return None
    spans = [s * (n - 1) for s, n in zip(element_strides, shape)]
    if any(not -2**63 <= span <= INT64_MAX for span in spans):
        return None
    low = sum(span for span in spans if span < 0)
    high = sum(span for span in spans if span >= 0)
    if low < -INT64_MAX or high + 1 > INT64_MAX:
        return None
    below, above = -low * itemsize, (high + 1) * itemsize
    if below > INT64_MAX or above > INT64_MAX:
        return None
    if below > first or first + above > ADDRESS_MAX:
        return None
    return size, size * itemsize


def model_reach(shape, element_strides, itemsize):
    """(low, high) bytes reached relative to the first element (size > 0)."""
    spans = [s * (n - 1) for s, n in zip(element_strides, shape)]
    low = sum(span for span in spans if span < 0)
    high = sum(span for span in spans if span >= 0)
    return low * itemsize, (high + 1) * itemsize


class Holder:
    def __init__(self, interface):
        self.__array_interface__ = interface


def import_as_modelled(interface, expected):
    """The View of ``interface``, checked against the model's (size, nbytes); None when
    arrayport refused it, which the model must have done too."""
    try:
        view = ap.View.from_array_interface(Holder(interface))
    except CLEAN_ERRORS as error:
        assert expected is None, f"refused a layout the model accepts: {error}"
        return None
    assert expected is not None, f"accepted a layout the model refuses: {view!r}"
    assert (view.size, view.nbytes) == expected
    return view


@st.composite
def edge_layouts(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(EDGE_EXTENTS) for _ in range(ndim))
    strides = tuple(draw(EDGE_STRIDES) for _ in range(ndim))
    return shape, strides, draw(ITEMSIZES)


ADDRESSES = st.one_of(
    st.sampled_from([1, 8, 4096, 2**31, 2**32, 2**47, 2**63 - 8, 2**63, 2**64 - 4096,
                     2**64 - 8, 2**64 - 1]),
    st.integers(1, ADDRESS_MAX))


@fuzz
@given(layout=edge_layouts(), address=ADDRESSES, readonly=st.booleans())
def test_pointer_layouts_match_the_extent_model(layout, address, readonly):
    # A (pointer, readonly) interface is trusted to point at memory; nothing is read here,
    # only the arithmetic arrayport does about it is checked.
    shape, element_strides, itemsize = layout
    byte_strides = tuple(s * itemsize for s in element_strides)
    interface = {"version": 3, "shape": shape, "strides": byte_strides,
                 "typestr": TYPESTR[itemsize], "data": (address, readonly)}
    expected = extent_model(shape, element_strides, itemsize, address)
    if any(not -2**63 <= s <= INT64_MAX for s in byte_strides):
        expected = None  # a byte stride itself must fit in int64
    view = import_as_modelled(interface, expected)
    if view is None:
        return
    # Several elements at one address; an empty array has none (issue 31).
    broadcast = 0 not in shape and any(s == 0 and n > 1 for s, n in zip(element_strides, shape))
    assert view.shape == shape and view.readonly == (readonly or broadcast)
    assert view.element_strides == element_strides
    # The buffer export's len is the same checked count (a wrapped len crashed here).
    assert memoryview(view).nbytes == view.nbytes


BUFFER_LENGTHS = st.sampled_from([0, 1, 7, 8, 64, 4096])


@st.composite
def buffer_layouts(draw):
    length = draw(BUFFER_LENGTHS)
    offset = draw(st.one_of(st.integers(0, length + 2),
                            st.sampled_from([2**31, 2**32, 2**63 - 1, 2**63 - 8, 2**62])))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.one_of(st.integers(0, 9), EDGE_EXTENTS)) for _ in range(ndim))
    strides = tuple(draw(st.one_of(st.integers(-9, 9), EDGE_STRIDES)) for _ in range(ndim))
    return length, offset, shape, strides, draw(ITEMSIZES)


@fuzz
@given(layout=buffer_layouts())
def test_buffer_layouts_never_reach_outside_their_buffer(layout):
    length, offset, shape, element_strides, itemsize = layout
    memory = bytearray(os.urandom(length))
    byte_strides = tuple(s * itemsize for s in element_strides)
    interface = {"version": 3, "shape": shape, "strides": byte_strides, "offset": offset,
                 "typestr": TYPESTR[itemsize], "data": memory}
    # The model, plus the buffer: the offset inside it and every byte reached too.
    expected = extent_model(shape, element_strides, itemsize, 1 << 62)  # any valid address
    if any(not -2**63 <= s <= INT64_MAX for s in byte_strides) or offset > length:
        expected = None
    if expected is not None and expected[0] > 0:
        low, high = model_reach(shape, element_strides, itemsize)
        if offset + low < 0 or offset + high > length:
            expected = None
    view = import_as_modelled(interface, expected)
    if view is None:
        return
    if 0 < view.nbytes <= READ_LIMIT and itemsize != 16:
        # Read every element and compare with NumPy's own view of the same bytes (NumPy
        # checks the buffer bounds too: it must accept what arrayport accepted).
        reference = np.ndarray(shape, dtype=np.dtype(TYPESTR[itemsize]), buffer=memory,
                               offset=offset, strides=byte_strides)
        assert np.array_equal(np.asarray(view.host_copy()), reference)


@fuzz
@given(layout=edge_layouts(), mode=st.sampled_from(["host_copy", "copy", "memoryview",
                                                     "to_numpy", "dlpack"]))
def test_zero_stride_broadcasts_at_huge_extents(layout, mode):
    # One real element, broadcast: whatever arrayport accepts it can copy or export, and
    # whatever it cannot count it refuses before allocating anything.
    shape, _, itemsize = layout
    memory = np.zeros(1, dtype=np.dtype(TYPESTR[itemsize]))
    interface = {"version": 3, "shape": shape, "strides": (0,) * len(shape),
                 "typestr": TYPESTR[itemsize], "data": (memory.ctypes.data, True)}
    before = ap._core.live_counts()
    try:
        view = ap.View.from_array_interface(Holder(interface))
    except CLEAN_ERRORS:
        assert extent_model(shape, (0,) * len(shape), itemsize, memory.ctypes.data) is None
        return
    assert view.nbytes == view.size * itemsize <= INT64_MAX
    if view.nbytes > READ_LIMIT:
        return  # counted exactly; too big to copy on a test machine (not a defect)
    if mode == "host_copy":
        result = np.asarray(view.host_copy())
    elif mode == "copy":
        result = np.asarray(view.copy())
    elif mode == "memoryview":
        result = np.asarray(memoryview(view)) if itemsize != 16 else np.asarray(view)
    elif mode == "to_numpy":
        result = ap.to_numpy(view, copy=True)
    else:
        result = np.asarray(ap.from_dlpack(view.__dlpack__(max_version=(1, 3), copy=True)))
    assert result.shape == shape and not result.any()
    del view, result
    assert ap._core.live_counts() == before


# ---- the dunders, called directly with anything ------------------------------------------------

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.sampled_from([2**63, -2**63 - 1, 2**64, 0, 1, 2, -1]),
    st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=3),
    st.tuples(), st.tuples(st.integers(-3, 20)), st.tuples(st.integers(-3, 20), st.integers(-3, 2**40)),
    st.lists(st.integers(0, 3), max_size=3), st.just(np.add), st.just(np.zeros(2)),
    st.just(object()), st.just(()), st.just([]), st.just({}), st.just("__call__"),
    st.sampled_from(["reduce", "at", "outer", "accumulate", "reduceat"]))

DUNDERS = ["__dlpack__", "__dlpack_device__", "__array__", "__array_ufunc__",
           "__array_function__", "__array_wrap__", "copy", "host_copy", "__reduce__",
           "__setstate__", "__init__", "__buffer__", "__release_buffer__"]


@fuzz
@given(name=st.sampled_from(DUNDERS), args=st.lists(JUNK, max_size=5),
       kwargs=st.dictionaries(st.sampled_from(["stream", "max_version", "dl_device", "copy",
                                               "out", "dtype", "where", "axis", "context",
                                               "return_scalar", "device"]),
                              JUNK, max_size=3),
       use_view_argument=st.booleans(), readonly=st.booleans())
def test_dunders_with_wrong_arities_and_types(name, args, kwargs, use_view_argument, readonly):
    source = np.arange(4.0)
    source.flags.writeable = not readonly
    view = ap.view(source)
    before_bytes = source.tobytes()
    if use_view_argument:
        args = [view, *args]
    if name == "__array_ufunc__" and args and not use_view_argument:
        args = [np.add, "__call__", *args]
    method = getattr(view, name, None)
    if method is None:
        return
    try:
        method(*args, **kwargs)
    except CLEAN_ERRORS:
        pass
    except Exception as error:
        # Only where NumPy's own ndarray raises the same for the same call (np.add(False,
        # 2**63) is NumPy's OverflowError): never an error of arrayport's own making.
        assert name in ("__array_ufunc__", "__array_function__"), error
        twin = [source if a is view else a for a in args]
        with pytest.raises(type(error)):
            getattr(np.ndarray, name)(source, *twin, **kwargs)
    if readonly:
        assert source.tobytes() == before_bytes, "a read-only View was written through"
