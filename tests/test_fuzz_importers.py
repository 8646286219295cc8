"""Fuzzing every importer (hypothesis): DLPack capsules built field by field, array
interface and CUDA Array Interface dicts, PEP 3118 buffers, and stream / device / copy /
max_version arguments.

The oracle, for every input: either a View whose metadata is the input's, or BufferError /
TypeError / ValueError — never another exception, a crash or a hang; and afterwards
nothing held: the producer's deleter ran exactly once (or never, for a capsule that is
not a DLPack capsule), every Py_buffer was released, arrayport's live counters are back
where they were.

Short run (part of the test suite, deterministic): ARRAYPORT_FUZZ_EXAMPLES examples per
importer, 500 by default. Long run (random, new inputs every time), one command:

    ARRAYPORT_FUZZ_EXAMPLES=100000 pytest tests/test_fuzz_importers.py -x -p no:cacheprovider

Any input a long run finds that breaks the oracle becomes an @example here.
"""

import os

import numpy as np
import pytest

# Every test here is a hypothesis property: without hypothesis the module skips.
pytest.importorskip("hypothesis", reason="needs hypothesis (not installed)")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import arrayport as ap
from producer import MAX_DIMS, TensorSpec

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

EXAMPLES = int(os.environ.get("ARRAYPORT_FUZZ_EXAMPLES", "500"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=list(HealthCheck), database=None)
CLEAN_ERRORS = (BufferError, TypeError, ValueError)

# Interesting integers first, then anything in range.
def edgy(low, high, *specials):
    picks = [v for v in (low, high, 0, 1, -1, 2, *specials) if low <= v <= high]
    return st.one_of(st.sampled_from(picks), st.integers(low, high))


INT64 = edgy(-2**63, 2**63 - 1, 2**31, 2**62, -2**62, 2**63 - 1)
DIMS = edgy(-2**63, 2**63 - 1, 3, 2**31, 2**62, -2**62)


def counters():
    """arrayport's live counters. No gc.collect(): everything an import makes is freed by
    reference counting the moment it is dropped, so a count that stays up is a leak (or a
    reference cycle, which would be a defect too)."""
    return ap._core.live_counts()


# ---- DLPack capsules ------------------------------------------------------------------------

@st.composite
def tensor_specs(draw):
    s = TensorSpec()
    s.versioned = draw(st.booleans())
    s.major = draw(st.sampled_from([1, 1, 1, 0, 2, 2**32 - 1]))
    s.minor = draw(edgy(0, 2**32 - 1, 3, 4))
    s.flags = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 7, 8]), st.integers(0, 2**64 - 1)))
    s.device_type = draw(edgy(-2**31, 2**31 - 1, 2, 3, 5, 13, 18, 19))
    s.device_id = draw(edgy(-2**31, 2**31 - 1))
    ndim = draw(st.one_of(st.integers(0, 4), edgy(-2**31, 2**31 - 1, 64, 65, MAX_DIMS)))
    s.ndim = ndim
    s.code = draw(edgy(0, 255, 2, 4, 5, 6, 17, 18))
    s.bits = draw(st.one_of(st.sampled_from([1, 4, 6, 8, 16, 32, 64, 128]), edgy(0, 255)))
    s.lanes = draw(st.one_of(st.sampled_from([1, 1, 1, 2, 4]), edgy(0, 2**16 - 1)))
    s.null_shape, s.null_strides, s.null_data = (draw(st.booleans()) for _ in range(3))
    s.byte_offset = draw(edgy(0, 2**64 - 1, 4, 2**63))
    for i in range(min(max(ndim, 0), MAX_DIMS)):
        s.shape[i] = draw(st.one_of(st.integers(0, 5), DIMS))
        s.strides[i] = draw(st.one_of(st.integers(-6, 6), INT64))
    return s


# None is the standard name for the layout. The other DLPack name is not drawn: a capsule
# named "dltensor_versioned" holding a legacy struct (or the reverse) lies about the only
# type information a capsule has, and no consumer can read it safely — undefined by the
# contract, like a wild pointer.
CAPSULE_NAMES = st.sampled_from([None, None, None, b"used_dltensor",
                                 b"used_dltensor_versioned", b"tensor", b"", b"dltensor_"])


def expected_view_of(spec):
    """What a View of this spec must say about itself."""
    ndim = spec.ndim
    return {"ndim": ndim, "shape": tuple(spec.shape[i] for i in range(ndim)),
            "device": (spec.device_type, spec.device_id)}


@fuzz
@given(spec=tensor_specs(), name=CAPSULE_NAMES)
def test_fuzz_dlpack_capsules(producer, spec, name):
    before, calls = counters(), producer.deleter_calls
    capsule = producer.capsule(spec, name)
    try:
        view = ap.from_dlpack(capsule)
    except CLEAN_ERRORS:
        view = None
    if view is not None:
        expected = expected_view_of(spec)
        assert (view.ndim, view.shape) == (expected["ndim"], expected["shape"])
        assert tuple(view.device) == expected["device"]
        assert (view.dtype.code, view.dtype.lanes) == (spec.code, spec.lanes)
        assert view.readonly == bool(spec.versioned and spec.flags & 1)
        if not spec.null_strides and spec.ndim:
            assert view.element_strides == tuple(spec.strides[i] for i in range(spec.ndim))
    del view, capsule
    # A capsule under its DLPack name is deleted exactly once, by arrayport or by the
    # capsule's destructor; one under any other name is not arrayport's to delete.
    assert producer.deleter_calls - calls == (1 if name is None else 0)
    assert counters() == before


# ---- __array_interface__ and __cuda_array_interface__ dicts ---------------------------------

class Holder:
    def __init__(self, **attributes):
        self.__dict__.update(attributes)


MEMORY = bytearray(256)
ADDRESS = np.frombuffer(MEMORY, np.uint8).__array_interface__["data"][0]

TYPESTRS = st.one_of(
    st.sampled_from(["<f4", "<f8", "|u1", "|b1", "<i8", ">i4", "<c16", "|V2", "<V4", "|V0",
                     "<M8[s]", "|O", "<U3", "f4", "<f3", "<f", "", "<f99999999999999999999"]),
    st.text(max_size=8), st.integers(), st.none())
SHAPES = st.one_of(
    st.lists(st.integers(0, 4), max_size=4).map(tuple),
    st.lists(DIMS, max_size=3).map(tuple), st.lists(st.integers(0, 4), max_size=3),
    st.just(()), st.integers(), st.none(), st.text(max_size=3))
STRIDES = st.one_of(st.none(), st.lists(st.one_of(st.integers(-16, 16), INT64),
                                        max_size=4).map(tuple), st.text(max_size=2))
DATA = st.one_of(
    st.tuples(st.sampled_from([ADDRESS, 0, 1, 2**64 - 1]) | st.integers(), st.booleans()),
    st.tuples(st.integers(0, 2**64)), st.just(MEMORY), st.just(bytes(16)), st.none(),
    st.integers(), st.text(max_size=2))
DESCR = st.one_of(st.none(), st.just([("", "<f4")]), st.just([("bfloat16", "|V2")]),
                  st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=2),
                  st.integers())


@st.composite
def interface_dicts(draw, cuda):
    d = {}
    for key, values in (("version", st.sampled_from([3, 3, 3, 0, 2, 4, -1, "3", None])),
                        ("shape", SHAPES), ("typestr", TYPESTRS), ("data", DATA),
                        ("strides", STRIDES), ("descr", DESCR),
                        ("offset", st.integers(-2, 64) | st.just(2**70)),
                        ("mask", st.sampled_from([None, None, MEMORY, 0])),
                        ("stream", st.sampled_from([None, 0, 1, 2, -1, 7, "1", 1.5]))):
        if key in ("offset", "stream") and not draw(st.booleans()):
            continue
        if key == "stream" and not cuda:
            continue
        if draw(st.integers(0, 9)) > 0 or key in ("mask", "descr"):  # sometimes missing
            d[key] = draw(values)
    return d


@pytest.mark.parametrize("protocol", ["__array_interface__", "__cuda_array_interface__"])
@fuzz
@given(data=st.data())
def test_fuzz_interface_dicts(protocol, data):
    interface = data.draw(interface_dicts(cuda=protocol == "__cuda_array_interface__"))
    before = counters()
    try:
        view = ap.view(Holder(**{protocol: interface}))
    except CLEAN_ERRORS:
        view = None
    if view is not None:
        assert view.shape == tuple(interface["shape"])
        if protocol == "__array_interface__":
            assert view.device == ap.Device("cpu")
    del view
    assert counters() == before


# ---- PEP 3118 buffers --------------------------------------------------------------------------

FORMATS = st.one_of(
    st.sampled_from([None, "B", "b", "?", "h", "i", "l", "q", "Q", "n", "N", "e", "f", "d",
                     "Zf", "Zd", "<i", ">i", "=L", "!d", "@q", "g", "Zg", "c", "x", "P", "O",
                     "3f", "T{i:a:}", "", "ii", "<", "Z", "w"]),
    st.text(max_size=5))


@fuzz
@given(fmt=FORMATS, itemsize=edgy(-1, 64, 4, 8, 16), ndim=st.integers(-2, 5),
       shape=st.none() | st.lists(st.integers(-1, 6) | DIMS, max_size=5).map(tuple),
       strides=st.none() | st.lists(st.integers(-16, 16) | INT64, max_size=5).map(tuple),
       suboffsets=st.none() | st.lists(st.integers(-2, 4), max_size=5).map(tuple),
       readonly=st.booleans(), offset=st.integers(0, 64))
def test_fuzz_buffers(buffer_exporter, fmt, itemsize, ndim, shape, strides, suboffsets,
                      readonly, offset):
    before = counters()
    try:
        exporter = buffer_exporter.Exporter(
            bytearray(128), fmt, itemsize, shape, strides, suboffsets=suboffsets,
            readonly=readonly, offset=offset, ndim=ndim)
    except (ValueError, TypeError, OverflowError):
        return  # the test exporter refuses it itself: nothing to import
    try:
        view = ap.view(exporter)
    except CLEAN_ERRORS:
        view = None
    if view is not None:
        assert view.readonly == readonly
        if shape is not None and ndim in (-1, len(shape)):  # else the exporter's own mix
            assert view.shape == shape
    del view
    assert exporter.gets == exporter.releases
    assert counters() == before


@fuzz
@given(fmt=st.text(max_size=6) | st.binary(max_size=4) | st.integers() | st.none(),
       itemsize=st.integers(-2, 40))
def test_fuzz_format_strings(fmt, itemsize):
    from arrayport.formats import dtype_from_buffer_format
    try:
        dtype = dtype_from_buffer_format(fmt, itemsize)
    except CLEAN_ERRORS:
        return
    assert dtype.itemsize == itemsize


# ---- stream, device, copy and max_version arguments -------------------------------------------

ANYTHING = st.one_of(st.none(), st.booleans(), INT64, st.integers(), st.floats(),
                     st.text(max_size=4),
                     st.tuples(st.integers(-2, 20), st.integers(-2, 3)),
                     st.tuples(INT64, INT64), st.tuples(st.integers()),
                     st.lists(st.integers(0, 3), max_size=3))


@fuzz
@example(stream=0, max_version=(1, 3), dl_device=(2, 0), copy=None)
@given(stream=ANYTHING, max_version=ANYTHING, dl_device=ANYTHING, copy=ANYTHING)
def test_fuzz_export_arguments(stream, max_version, dl_device, copy):
    before = counters()
    view = ap.view(np.arange(6.0).reshape(2, 3))
    try:
        capsule = view.__dlpack__(stream=stream, max_version=max_version,
                                  dl_device=dl_device, copy=copy)
    except CLEAN_ERRORS:
        capsule = None
    if capsule is not None:
        imported = ap.from_dlpack(capsule)
        assert imported.shape == (2, 3)
        del imported
    del view, capsule
    assert counters() == before


@fuzz
@example(stream=None, device=(2, 2**63 - 1), copy=None)  # found: OverflowError in NumPy
@given(stream=ANYTHING, device=ANYTHING | st.sampled_from(["cpu", "cuda", "cuda:1", "x:1"]),
       copy=ANYTHING)
def test_fuzz_import_arguments(stream, device, copy):
    before = counters()
    source = np.arange(4, dtype=np.int32)
    for attempt in (lambda: ap.view(source, stream=stream),
                    lambda: ap.from_dlpack(source, device=device, copy=copy),
                    lambda: ap.to_numpy(source, copy=copy)):
        try:
            result = attempt()
        except CLEAN_ERRORS:
            continue
        assert ap.view(result).shape == (4,)
        del result
    assert counters() == before
