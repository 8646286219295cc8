"""Views through pickle (issue 17): protocol 5 out of band, zero-copy on receipt; protocols
2–4 in band; every DLPack type and layout; read-only survives; device memory refused unless
asked; process pools return Views; tampered pickles are clear errors that leak nothing."""

import concurrent.futures
import copy
import gc
import multiprocessing
import pickle
import pickletools

import numpy as np
import pytest

import arrayport as ap
from producer import spec

LAYOUTS = {
    "C": lambda a: a,
    "F": lambda a: np.asfortranarray(a),
    "transposed": lambda a: a.T,
    "strided": lambda a: a[::2, ::-1],
    "0-d": lambda a: a[1, 1, ...],
    "size-0": lambda a: a[:0],
    "broadcast": lambda a: np.broadcast_to(a[:1], a.shape),
}


def round_trip(view, protocol):
    """(unpickled View, the out-of-band buffers the pickler handed over)."""
    buffers = []
    data = pickle.dumps(view, protocol=protocol,
                        buffer_callback=buffers.append if protocol >= 5 else None)
    # Out of band: the receiver gets its own copy of each buffer (as a transport delivers).
    received = [bytearray(b.raw()) for b in buffers]
    return pickle.loads(data, buffers=received), buffers, received


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_layout_round_trips(layout, protocol):
    source = LAYOUTS[layout](np.arange(24.0).reshape(4, 6))
    view = ap.view(source) if layout != "broadcast" else ap.view(source.copy())
    back, buffers, received = round_trip(view, protocol)
    np.testing.assert_array_equal(np.asarray(back), source)
    assert back.dtype == view.dtype and back.shape == view.shape
    if protocol >= 5:
        assert len(buffers) == 1
        start = np.frombuffer(received[0], np.uint8).ctypes.data
        assert start <= back.ptr <= start + len(received[0]), "zero-copy on receipt"
    if layout in ("C", "F", "transposed", "0-d"):
        assert back.strides == view.strides, "contiguous layouts keep their strides"
    else:
        assert back.is_c_contiguous, "other layouts travel as compact C-order bytes"


def every_type():
    from arrayport.dtypes import DTypeCode
    names = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64", "complex64", "complex128", "bfloat16",
             "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e8m0fnu", "float32x4"]
    return [ap.DType(name) for name in names] + [ap.DType(DTypeCode.FLOAT4_E2M1FN, 4, 1),
                                                  ap.DType(DTypeCode.FLOAT6_E2M3FN, 6, 1)]


@pytest.mark.parametrize("dtype", every_type(), ids=str)
@pytest.mark.parametrize("protocol", [4, 5])
def test_every_dlpack_type_round_trips_bit_exact(dtype, protocol, producer):
    capsule = producer.capsule(spec((2, 8), dtype=(int(dtype.code), dtype.bits, dtype.lanes)))
    view = ap.from_dlpack(capsule)
    back, _, _ = round_trip(view, protocol)
    assert back.dtype == view.dtype and back.shape == (2, 8) and back.nbytes == view.nbytes
    original = bytes(memoryview(_bytes_of(view)))
    assert bytes(memoryview(_bytes_of(back))) == original


def _bytes_of(view):
    from arrayport import _core
    return _core.view_from_pointer(view.ptr, (view.nbytes,), None, "uint8", readonly=True,
                                   owner=view, protocol="test")


def test_read_only_survives_and_writable_arrives_writable():
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    for protocol in (2, 5):
        assert round_trip(ap.view(frozen), protocol)[0].readonly
        writable = round_trip(ap.view(np.arange(4.0)), protocol)[0]
        assert not writable.readonly
        np.asarray(writable)[0] = 7.0


def test_out_of_band_through_a_read_only_buffer_arrives_read_only():
    buffers = []
    data = pickle.dumps(ap.view(np.arange(3.0)), protocol=5, buffer_callback=buffers.append)
    back = pickle.loads(data, buffers=[bytes(buffers[0].raw())])
    assert back.readonly  # NumPy's rule: the buffer decides


def test_in_process_out_of_band_shares_the_original_memory():
    array = np.arange(6.0)
    buffers = []
    data = pickle.dumps(ap.view(array), protocol=5, buffer_callback=buffers.append)
    back = pickle.loads(data, buffers=buffers)
    assert back.ptr == array.ctypes.data
    array[0] = 42.0
    assert np.asarray(back)[0] == 42.0


def test_the_pickle_holds_no_copy_of_the_data_out_of_band():
    view = ap.view(np.zeros(1 << 16))
    buffers = []
    data = pickle.dumps(view, protocol=5, buffer_callback=buffers.append)
    assert len(data) < 512 and buffers[0].raw().nbytes == view.nbytes
    assert "NEXT_BUFFER" in {op.name for op, _, _ in pickletools.genops(data)}




def test_copy_and_deepcopy():
    view = ap.view(np.arange(3.0))
    assert copy.copy(view) is view
    deep = copy.deepcopy(view)
    assert deep.ptr != view.ptr and deep.is_copy
    np.testing.assert_array_equal(np.asarray(deep), [0.0, 1.0, 2.0])


# ---- tampered and truncated pickles ----------------------------------------------------------

def test_a_layout_reaching_past_the_buffer_is_refused(live):
    from arrayport.pickling import _rebuild
    with pytest.raises(BufferError, match="pickle: the array reaches bytes 0..64 of a "
                                          "32-byte data buffer"):
        _rebuild(bytearray(32), (2, 64, 1, False), (8,), None, False)
    with pytest.raises(BufferError, match="reaches bytes"):
        _rebuild(bytearray(32), (2, 64, 1, False), (2, 2), (8, 32), False)
    with pytest.raises(BufferError, match="not a DLPack type"):
        _rebuild(bytearray(32), (2, 12, 1, False), (1,), None, False)
    with pytest.raises(BufferError, match="malformed"):
        _rebuild(bytearray(32), (2, 64), (1,), None, False)
    with pytest.raises(BufferError, match="malformed"):
        _rebuild(bytearray(32), ("2", 64, 1, False), (1,), None, False)
    gc.collect()
    assert live.delta() == {}


def test_a_truncated_stream_is_an_unpickling_error():
    data = pickle.dumps(ap.view(np.arange(100.0)), protocol=4)
    for cut in (10, len(data) // 2, len(data) - 1):
        with pytest.raises((pickle.UnpicklingError, EOFError, ValueError)):
            pickle.loads(data[:cut])


def test_a_tampered_shape_in_band_is_refused():
    data = pickle.dumps(ap.view(np.arange(4.0)), protocol=4)
    # The shape (4,) is pickled as BININT1 4, TUPLE1; make it (200,) past the 32 bytes.
    assert data.count(b"K\x04\x85\x94N") == 1
    tampered = data.replace(b"K\x04\x85\x94N", b"K\xc8\x85\x94N")
    with pytest.raises(BufferError, match="reaches bytes"):
        pickle.loads(tampered)


def test_missing_out_of_band_buffers_are_an_error():
    data = pickle.dumps(ap.view(np.arange(4.0)), protocol=5, buffer_callback=lambda b: False)
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


# ---- process pools --------------------------------------------------------------------------

def _scaled(factor):
    return ap.view(np.arange(6.0) * factor)


def _total(view):
    return float(np.asarray(view).sum())


def test_a_spawn_pool_returns_and_takes_views():
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = pool.map(_scaled, [1, 2])
        assert all(isinstance(r, ap.View) for r in results)
        assert pool.map(_total, results) == [15.0, 30.0]


def test_a_process_pool_executor_returns_views():
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as executor:
        result = executor.submit(_scaled, 3).result()
    np.testing.assert_array_equal(np.asarray(result), np.arange(6.0) * 3)
