"""The same memory crosses every pair of protocols, and every library that speaks them,
with identical bytes and no copy: data imported through one protocol is exported through
each of the others, then written through the far end and read at the near end."""

import array
import gc
import mmap
import weakref

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module

torch = optional_module("torch")


class Holder:
    def __init__(self, interface, keep):
        self.__array_interface__ = interface
        self.keep = keep


class ArrayOnly:
    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


def address(array) -> int:
    return array.__array_interface__["data"][0]


# Each importer turns a writable int32 NumPy array into a View through one protocol.
IMPORTERS = {
    "dlpack": lambda a: ap.View.from_dlpack(a),
    "buffer": lambda a: ap.View.from_buffer(a),
    "array_interface": lambda a: ap.View.from_array_interface(Holder(a.__array_interface__, a)),
    "array": lambda a: ap.View.from_array(ArrayOnly(a)),
}
# Each exporter turns a View into a NumPy array through one protocol.
EXPORTERS = {
    "dlpack": lambda v: np.from_dlpack(v),
    "buffer": lambda v: np.asarray(memoryview(v)),
    "array_interface": lambda v: np.asarray(Holder(v.__array_interface__, v)),
    "array": lambda v: v.__array__(),
}


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("importer", IMPORTERS)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_every_pair_of_protocols_shares_the_same_bytes(importer, exporter, layout):
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    source = base if layout == "contiguous" else base[1:, ::-2]
    view = IMPORTERS[importer](source)
    assert view.protocol == importer and not view.is_copy
    out = EXPORTERS[exporter](view)
    assert address(out) == address(source) and out.strides == source.strides
    assert out.tobytes() == source.tobytes()
    out[0, 0] = -1  # written at the far end ...
    assert source[0, 0] == -1  # ... read at the near end


@pytest.mark.parametrize("importer", IMPORTERS)
def test_read_only_survives_every_crossing(importer):
    source = np.arange(6, dtype=np.int32)
    source.flags.writeable = False
    if importer == "dlpack":
        view = ap.View.from_dlpack(source)
    else:
        view = IMPORTERS[importer](source)
    assert view.readonly
    for name, export in EXPORTERS.items():
        assert not export(view).flags.writeable, name


@pytest.mark.parametrize("importer", IMPORTERS)
def test_the_source_lives_while_any_export_does(importer):
    source = np.arange(5, dtype=np.int32)
    ref = weakref.ref(source)
    out = EXPORTERS["dlpack"](IMPORTERS[importer](source))
    del source
    gc.collect()
    assert ref() is not None and out.tolist() == [0, 1, 2, 3, 4]
    del out
    gc.collect()
    assert ref() is None


# ---- standard-library producers -------------------------------------------------------------

@needs('torch')
@pytest.mark.parametrize("make", [
    lambda: bytearray(b"\x01\x02\x03\x04"),
    lambda: array.array("B", [1, 2, 3, 4]),
    lambda: mmap.mmap(-1, 4),
    lambda: memoryview(bytearray(b"\x01\x02\x03\x04")),
])
def test_stdlib_buffers_cross_to_numpy_torch_and_back(make):
    source = make()
    view = ap.view(source)
    tensor = torch.from_dlpack(view)
    tensor[0] = 99
    assert memoryview(source)[0] == 99
    back = ap.view(tensor)
    assert back.ptr == view.ptr
    assert bytes(memoryview(back)) == bytes(memoryview(source))
    del view, tensor, back
    gc.collect()
    if isinstance(source, mmap.mmap):
        source.close()  # every export is gone, so it can close


def test_bytes_cross_read_only():
    data = b"\x00\x01\x02\x03"
    view = ap.view(data)
    out = np.from_dlpack(view)
    assert not out.flags.writeable and out.tobytes() == data
    with pytest.raises(BufferError, match="read-only"):
        view.__dlpack__()  # a legacy capsule cannot say read-only: refused


# ---- libraries ----------------------------------------------------------------------------------

@needs('torch')
def test_pytorch_both_ways():
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = ap.view(tensor)
    via_array_interface = np.asarray(Holder(view.__array_interface__, view))
    via_buffer = np.asarray(memoryview(view))
    via_dlpack = torch.from_dlpack(view)
    for out in (via_array_interface, via_buffer):
        assert address(out) == tensor.data_ptr()
    assert via_dlpack.data_ptr() == tensor.data_ptr()
    via_dlpack[1, 1] = -5
    assert tensor[1, 1] == -5 and via_buffer[1, 1] == -5
    ref = weakref.ref(tensor)
    del tensor, via_dlpack
    gc.collect()
    assert ref() is not None  # the View (and its exports) keep it alive
    del view, via_array_interface, via_buffer, out
    gc.collect()
    assert ref() is None


def test_pyarrow_both_ways():
    pa = pytest.importorskip("pyarrow")
    arrow = pa.array([1, 2, 3], type=pa.int64())
    view = ap.view(arrow)
    assert view.readonly and np.asarray(view).tolist() == [1, 2, 3]
    buffer = pa.py_buffer(bytearray(b"\x05\x06"))
    assert ap.view(buffer).protocol == "buffer"
    # arrayport -> pyarrow: the buffer protocol, zero-copy.
    source = np.arange(4, dtype=np.int32)
    exported = pa.py_buffer(ap.view(source))
    assert exported.address == address(source) and exported.size == 16
    tensor = pa.Tensor.from_numpy(np.asarray(ap.view(source)))
    source[0] = 7
    assert tensor.to_numpy()[0] == 7


def test_array_api_strict_both_ways():
    xp = pytest.importorskip("array_api_strict")
    x = xp.asarray([1.0, 2.0, 3.0])
    view = ap.view(x)
    assert view.protocol == "dlpack" and view.shape == (3,)
    source = np.arange(3.0)
    y = xp.from_dlpack(ap.view(source))
    source[1] = 10
    assert float(y[1]) == 10.0


def test_numpy_both_ways_for_every_protocol():
    source = np.arange(6.0).reshape(2, 3)
    view = ap.view(source)
    for out in (np.from_dlpack(view), np.asarray(view), np.asarray(memoryview(view)),
                np.array(view, copy=False)):
        assert np.shares_memory(out, source)
