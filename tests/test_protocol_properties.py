"""Property tests: generated __array_interface__ / __cuda_array_interface__ dicts and PEP 3118
buffers, valid and malformed. The oracle: either a View that agrees with NumPy (or CPython's
memoryview) on shape, strides, item size, pointer and read-only flag, or a BufferError /
TypeError / ValueError whose message names the protocol. Never a crash, never a leak."""

import gc

import numpy as np
import pytest

# Every test here is a hypothesis property: without hypothesis the module skips.
pytest.importorskip("hypothesis", reason="needs hypothesis (not installed)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver

MEMORY = bytearray(4096)
BASE = np.frombuffer(MEMORY, np.uint8).__array_interface__["data"][0]
CLEAN_ERRORS = (BufferError, TypeError, ValueError)
# Deterministic in the suite (as the fuzz harnesses are): a new finding should come from a
# deliberate long run, not turn CI red at random. It found `offset: None` (accepted by
# arrayport, refused by NumPy) when it was random; now refused by both.
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

TYPESTRS = ["<i4", "<f8", "|u1", "|b1", "<c16", "<f2", "<u8", "|i1", ">i4", "<f16", "|O8",
            "<M8", "|V2", "|V4", "|S3", "<U2", "f4", "<x4", "", "<i0", "<i3", 7, None]
DESCRS = [None, [("bfloat16", "|V2")], [("float8_e4m3fn", "|V1")], [("a", "<i2")],
          [("a", "<i2"), ("b", "<i2")], "junk", [("", "<i4")]]

ints = st.integers(min_value=-3, max_value=8)
junk = st.sampled_from([None, "x", 1.5, True, object()])


@st.composite
def interface_dicts(draw):
    ndim = draw(st.integers(0, 4))
    shape = draw(st.one_of(st.tuples(*[ints] * ndim), st.lists(ints, max_size=5), junk))
    strides = draw(st.one_of(st.none(), st.lists(st.integers(-64, 64), min_size=0,
                                                 max_size=5).map(tuple), junk))
    offset = draw(st.integers(0, 512))
    data = draw(st.one_of(
        st.tuples(st.just(BASE + offset), st.booleans()),
        st.just(MEMORY), st.just(bytes(64)),
        st.tuples(st.integers(-5, 2**65), st.sampled_from([True, False, 0, "no"])),
        junk))
    d = {"version": draw(st.sampled_from([3, 3, 3, 2, 4, "3"])), "shape": shape,
         "typestr": draw(st.sampled_from(TYPESTRS)), "data": data, "strides": strides}
    if draw(st.booleans()):
        d["descr"] = draw(st.sampled_from(DESCRS))
    if draw(st.integers(0, 9)) == 0:
        d["mask"] = draw(st.sampled_from([None, np.ones(2, bool)]))
    if draw(st.integers(0, 4)) == 0:
        d["offset"] = draw(st.one_of(st.integers(-8, 64), junk))
    for key in draw(st.lists(st.sampled_from(["version", "shape", "typestr", "data"]),
                             max_size=1)):
        d.pop(key, None)
    return d


class Holder:
    def __init__(self, interface):
        self.__array_interface__ = interface


def assert_no_leak(before):
    if _core.live_counts() != before:  # only cycles need the (slow) collector
        gc.collect()
    assert _core.live_counts() == before


def assert_clean_error(error, protocol):
    assert isinstance(error, CLEAN_ERRORS), repr(error)
    assert str(error).startswith(f"{protocol}: "), str(error)


@SETTINGS
@given(interface_dicts())
def test_array_interface_dicts(d):
    before = _core.live_counts()
    try:
        view = ap.View.from_array_interface(Holder(d))
    except CLEAN_ERRORS as error:
        assert_clean_error(error, "array_interface")
    else:
        numpy_view = np.asarray(Holder(dict(d)))  # NumPy must accept what arrayport accepts
        assert view.shape == numpy_view.shape
        assert view.ptr == numpy_view.__array_interface__["data"][0]
        assert view.readonly == (not numpy_view.flags.writeable)
        if view.size > 1:
            assert view.strides == numpy_view.strides
        if d["typestr"][1] != "V":
            assert view.dtype == numpy_view.dtype
        assert view.itemsize == numpy_view.itemsize
        del view, numpy_view
    assert_no_leak(before)


@SETTINGS
@given(interface_dicts(), st.sampled_from([None, 1, 2, 99, 0, -1, "s"]))
def test_cuda_array_interface_dicts(monkeypatch, d, stream):
    monkeypatch.setattr(cuda_driver.driver, "locate_pointer", lambda pointer: (2, 1))
    monkeypatch.setattr(cuda_driver.driver, "current_device", lambda: 0)
    monkeypatch.setattr(cuda_driver.driver, "make_stream_wait", lambda *args: None)
    d = dict(d, stream=stream)
    d.pop("offset", None)

    class CAI:
        __cuda_array_interface__ = d

    try:
        view = ap.View.from_cuda_array_interface(CAI())
    except CLEAN_ERRORS as error:
        assert_clean_error(error, "cuda_array_interface")
    else:
        assert type(d["data"]) is tuple and d.get("mask") is None
        assert view.device == "cuda:1" or view.size == 0
        assert view.shape == tuple(d["shape"])
        assert view.__cuda_array_interface__["stream"] == stream


FORMATS = ["B", "b", "<i", "i", "l", "<l", "q", ">i", "!d", "e", "f", "d", "Zf", "Zd", "Zg",
           "?", "c", "s", "3f", "T{i:a:}", "g", "P", "O", "x", "", "ii", "@Q", "=H", "n", "<n",
           None]


@SETTINGS
@given(fmt=st.sampled_from(FORMATS), itemsize=st.integers(0, 17),
       shape=st.one_of(st.none(), st.lists(st.integers(-2, 6), max_size=6)),
       strides=st.one_of(st.none(), st.lists(st.integers(-40, 40), max_size=6)),
       suboffsets=st.one_of(st.none(), st.lists(st.integers(-2, 2), min_size=6, max_size=6)),
       readonly=st.booleans(), offset=st.integers(0, 2048))
def test_pep3118_buffers(buffer_exporter, fmt, itemsize, shape, strides, suboffsets, readonly,
                         offset):
    ndim = 1 if shape is None else len(shape)
    if strides is not None and shape is not None:
        strides = (strides + [1] * ndim)[:ndim]
    exporter = buffer_exporter.Exporter(bytearray(4096), fmt, itemsize, shape, strides,
                                        suboffsets, readonly, offset, ndim)
    before = _core.live_counts()
    try:
        view = ap.View.from_buffer(exporter)
    except CLEAN_ERRORS as error:
        assert_clean_error(error, "buffer")
    else:
        assert itemsize > 0 and view.itemsize == itemsize
        assert view.readonly == readonly
        if shape is not None:
            assert view.shape == tuple(shape)
            if strides is not None and view.size > 1:
                assert view.strides == tuple(strides)
        del view
    assert_no_leak(before)
    assert exporter.gets == exporter.releases  # every Py_buffer released exactly once
