"""The CUDA Array Interface v3, both ways, on any machine.

The driver is replaced by a fake where a test needs a GPU's answers (which device owns a
pointer, what kind of memory it is); the real driver is exercised by `pytest -m gpu`.
Validation must never reach the driver: those tests make any driver call fail loudly.
"""


import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver
from lifetime_checks import assert_view_keeps_source_alive
from producer import spec


class CAIObject:
    def __init__(self, interface, keep=None):
        self.__cuda_array_interface__ = interface
        self.keep = keep


class FakeDriver:
    """Stands in for libcuda: pointer -> (device type, id); records stream waits."""

    def __init__(self, monkeypatch, location=(2, 1), current=0):
        self.location, self.current = location, current
        self.located, self.waits = [], []
        monkeypatch.setattr(cuda_driver.driver, "locate_pointer", self.locate_pointer)
        monkeypatch.setattr(cuda_driver.driver, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda_driver.driver, "make_stream_wait", self.make_stream_wait)

    def locate_pointer(self, pointer):
        self.located.append(pointer)
        return self.location

    def make_stream_wait(self, ordinal, consumer, producer):
        self.waits.append((ordinal, consumer, producer))


@pytest.fixture
def fake_driver(monkeypatch):
    return FakeDriver(monkeypatch)


@pytest.fixture
def no_driver_calls(monkeypatch):
    def fail(*args):
        raise AssertionError("the driver was called before the dict was validated")

    for name in ("locate_pointer", "current_device", "make_stream_wait"):
        monkeypatch.setattr(cuda_driver.driver, name, fail)


def cai(array=None, **changes):
    """A valid CAI v3 dict over `array`'s memory (standing in for device memory)."""
    array = np.zeros((2, 3), np.float32) if array is None else array
    d = {"shape": array.shape, "typestr": array.dtype.str,
         "data": (array.__array_interface__["data"][0], False), "version": 3,
         "strides": None if array.flags.c_contiguous else array.strides, "stream": None}
    d.update(changes)
    return d


# ---- import ---------------------------------------------------------------------------------

def test_import_takes_the_device_from_the_pointer(fake_driver):
    memory = np.zeros((2, 3), np.float32)
    view = ap.View.from_cuda_array_interface(CAIObject(cai(memory), keep=memory))
    assert view.device == "cuda:1"  # the driver's answer, not an assumed device 0
    assert fake_driver.located == [memory.__array_interface__["data"][0]]
    assert (view.shape, view.strides, view.dtype, view.protocol) == (
        (2, 3), (12, 4), "float32", "cuda_array_interface")


@pytest.mark.parametrize("location,device", [((3, 0), "cuda_host"),
                                             ((13, 0), "cuda_managed"), ((2, 7), "cuda:7")])
def test_memory_kinds(monkeypatch, location, device):
    FakeDriver(monkeypatch, location=location)
    assert ap.view(CAIObject(cai())).device == device


def test_zero_size_arrays_may_have_a_null_pointer(monkeypatch):
    driver = FakeDriver(monkeypatch, current=2)
    view = ap.view(CAIObject(cai(shape=(0, 3), data=(0, False))))
    assert view.size == 0 and view.device == "cuda:2" and driver.located == []


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_versions_0_to_3_are_read(fake_driver, version):
    assert ap.view(CAIObject(cai(version=version))).shape == (2, 3)


def test_strides_and_read_only(fake_driver):
    memory = np.zeros((4, 6), np.int16)[::2, ::-3]
    view = ap.view(CAIObject(cai(memory, data=(memory.__array_interface__["data"][0], True))))
    assert view.strides == memory.strides and view.readonly


def test_the_view_keeps_the_producer_alive(fake_driver):
    assert_view_keeps_source_alive(lambda: CAIObject(cai()), ap.view)


def test_the_producer_stream_is_kept_and_waited_on(fake_driver):
    view = ap.view(CAIObject(cai(stream=77)))
    assert view.__cuda_array_interface__["stream"] == 77  # still pending: exported honestly
    assert fake_driver.waits == []  # no consumer stream: nothing to order yet
    ap.view(CAIObject(cai(stream=77)), stream=5)
    assert fake_driver.waits == [(1, 5, 77)]  # consumer 5 waits for producer 77 on cuda:1


@pytest.mark.parametrize("changes,error,message", [
    ({"version": 4}, BufferError, "version 4 is not supported; arrayport reads versions 0 to 3"),
    ({"version": -1}, BufferError, "version -1 is not supported"),
    ({"version": 3.0}, TypeError, "version must be an int"),
    ({"shape": (2, -3)}, BufferError, r"shape\[1\] is negative"),
    ({"shape": "2,3"}, TypeError, "shape must be a tuple"),
    ({"typestr": ">f4"}, BufferError, "not in native byte order"),
    ({"typestr": "|V4"}, BufferError, "raw bytes with no DLPack type name"),
    ({"typestr": "|V4", "descr": [("x", "<i2"), ("y", "<i2")]}, BufferError, "structured"),
    ({"data": 1234}, TypeError, r"data must be a \(pointer, readonly\) tuple"),
    ({"data": (0, False)}, BufferError, "data is NULL for a tensor with 6 elements"),
    ({"data": (4096, None)}, TypeError, "read-only flag must be a bool"),
    ({"strides": (12,)}, BufferError, "strides has 1 entries for 2 dimensions"),
    ({"strides": (12, 2)}, BufferError, "stride 2 is not a multiple"),
    ({"mask": object()}, BufferError, "masked arrays are not supported"),
    ({"stream": 0}, ValueError, "stream 0 is disallowed"),
    ({"stream": -5}, ValueError, "stream -5 is not a stream handle"),
    ({"stream": True}, TypeError, "stream must be None or an int, got bool"),
    ({"stream": "s"}, TypeError, "stream must be None or an int, got str"),
])
def test_malformed_dicts_fail_before_any_driver_call(no_driver_calls, changes, error, message):
    with pytest.raises(error, match=f"^cuda_array_interface: .*{message}"):
        ap.View.from_cuda_array_interface(CAIObject(cai(**changes)))


@pytest.mark.parametrize("key", ["shape", "typestr", "data", "version"])
def test_required_entries(no_driver_calls, key):
    d = cai()
    del d[key]
    with pytest.raises(BufferError, match=f"^cuda_array_interface: the dict has no '{key}'"):
        ap.View.from_cuda_array_interface(CAIObject(d))


def test_a_consumer_stream_no_vendor_has_is_rejected_before_the_driver(no_driver_calls):
    with pytest.raises(ValueError, match="stream must be >= -1"):
        ap.view(CAIObject(cai(stream=3)), stream=-2)


def test_consumer_stream_zero_is_rejected_on_cuda_memory(fake_driver):
    """0 is a stream on ROCm, not on CUDA: refused once the driver has said whose memory
    it is, before any wait is placed."""
    with pytest.raises(ValueError, match="stream 0 is ambiguous on CUDA"):
        ap.view(CAIObject(cai(stream=3)), stream=0)
    assert fake_driver.waits == []


class FakeHip:
    """Stands in for the HIP runtime on a machine without CUDA: every pointer is HIP memory
    of ``location``; records stream waits."""

    def __init__(self, monkeypatch, location=(10, 0)):
        from arrayport.gpu import hip
        self.location, self.waits = location, []
        monkeypatch.setattr(hip.driver, "locate_pointer", lambda pointer: self.location)
        monkeypatch.setattr(hip.driver, "current_device", lambda: self.location[1])
        monkeypatch.setattr(hip.driver, "make_stream_wait",
                            lambda *args: self.waits.append(args))


@pytest.fixture
def fake_hip(monkeypatch, without_cuda):
    return FakeHip(monkeypatch)


def test_hip_memory_through_the_interface_is_a_rocm_view(fake_hip):
    """hip-python and CuPy's ROCm build export this interface for HIP memory: where no CUDA
    driver knows the pointer, HIP's runtime says where it is."""
    source = np.arange(6, dtype=np.float32)
    view = ap.view(CAIObject(cai(source), keep=source))
    assert view.device == (10, 0) and view.protocol == "cuda_array_interface"
    assert view.ptr == source.ctypes.data
    empty = ap.view(CAIObject(cai(np.zeros(0, np.float32), data=(0, False))))
    assert empty.device == (10, 0)


def test_hip_memory_takes_rocms_stream_values(fake_hip):
    source = np.arange(6, dtype=np.float32)
    for refused in (1, 2):
        with pytest.raises(ValueError, match=f"stream {refused} is not supported on ROCm"):
            ap.view(CAIObject(cai(source, stream=1000)), stream=refused)
    # the interface's legacy default stream (1) is HIP's null stream (DLPack's 0 on ROCm)
    ap.view(CAIObject(cai(source, stream=1)), stream=4096)
    assert fake_hip.waits == [(0, 4096, 0)]
    view = ap.view(CAIObject(cai(source, stream=1)))
    assert view.__cuda_array_interface__["stream"] == 1          # said back the same way
    assert view.__dlpack__(stream=-1) is not None
    with pytest.raises(BufferError, match="per-thread default stream.*ROCm"):
        ap.view(CAIObject(cai(source, stream=2)))
    ap.view(CAIObject(cai(source, stream=1000)), stream=0)       # 0: ROCm's default stream
    assert fake_hip.waits[-1] == (0, 0, 1000)


@pytest.mark.parametrize("device", [(10, 0), (11, 0)])
def test_hip_memory_has_the_interface_rocms_libraries_read(producer, device):
    view = ap.from_dlpack(producer.capsule(spec(device=device)))
    interface = view.__cuda_array_interface__
    assert interface["data"] == (view.ptr, False) and interface["stream"] is None


def test_cudas_refusal_stands_where_hip_has_no_answer_either(without_cuda):
    with pytest.raises(BufferError, match="CUDA driver"):
        ap.view(CAIObject(cai()))


def test_without_a_driver_the_error_says_so(without_cuda):
    with pytest.raises(cuda_driver.CudaUnavailable,
                       match=r"^cuda: the CUDA driver \(libarrayport-no-such-cuda.so\) cannot "
                             r"be loaded"):
        ap.View.from_cuda_array_interface(CAIObject(cai()))
    assert issubclass(cuda_driver.CudaUnavailable, BufferError)


def test_cpu_work_never_loads_the_driver():
    import subprocess
    import sys

    code = ("import numpy, arrayport as ap, sys; ap.view(numpy.zeros(3)); "
            "memoryview(ap.view(b'x')); print('arrayport.gpu.cuda' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# ---- export ---------------------------------------------------------------------------------

@pytest.mark.parametrize("device", [(2, 0), (2, 3), (3, 0), (13, 0)])
def test_cuda_accessible_views_export_version_3(producer, device):
    view = ap.from_dlpack(producer.capsule(spec(shape=(2, 3), device=device)))
    d = view.__cuda_array_interface__
    assert d == {"version": 3, "shape": (2, 3), "typestr": "<f4", "descr": [("", "<f4")],
                 "data": (view.ptr, False), "strides": None, "stream": None}


def test_export_round_trips_through_import(producer, monkeypatch):
    FakeDriver(monkeypatch, location=(2, 3))
    view = ap.from_dlpack(producer.capsule(spec(shape=(3, 4), strides=(1, 3), device=(2, 3))))
    again = ap.view(CAIObject(view.__cuda_array_interface__, keep=view))
    assert (again.shape, again.strides, again.ptr, again.device) == (
        view.shape, view.strides, view.ptr, view.device)


def test_zero_size_export_uses_pointer_zero(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(0, 3), device=(2, 0))))
    assert view.__cuda_array_interface__["data"] == (0, False)


@pytest.mark.parametrize("device", [(1, 0), (4, 0), (7, 0)])
def test_other_memory_has_no_cuda_array_interface(producer, device):
    view = ap.from_dlpack(producer.capsule(spec(device=device)))
    assert not hasattr(view, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="the CUDA Array Interface describes CUDA"):
        view.__cuda_array_interface__


def test_host_views_have_no_cuda_array_interface():
    assert not hasattr(ap.view(np.zeros(3)), "__cuda_array_interface__")
