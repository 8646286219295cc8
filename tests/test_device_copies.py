"""View.copy and the device layer's stream rules, the part decided before any driver is
asked: the 2-D transfer plan, which devices arrayport can copy between, what producers are
asked for, the synchronization switch, and that no driver is needed where none is used.
What reaches a driver runs on the CUDA driver simulator (`pytest -m gpu`:
tests/test_gpu_copies_and_streams.py)."""

import sys

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core, gpu
from arrayport.gpu.copies import plan_runs

from copy_layouts import copy_layouts
from labelled import device_view
from optional import hypothesis_api

# Without hypothesis, its property tests skip and the rest of the module runs.
given, settings, st, _ = hypothesis_api()


@pytest.fixture
def sync_off():
    with ap.no_implicit_sync():
        yield


# ---- the 2-D transfer plan ------------------------------------------------------------------

def run_plan_on_host(array):
    """Execute plan_runs with memmove, as the driver would with cuMemcpy2D."""
    import ctypes
    out = np.empty(array.shape, array.dtype)
    src, dst = array.__array_interface__["data"][0], out.__array_interface__["data"][0]
    for s, d, width, height, pitch in plan_runs(array.shape, array.strides, array.itemsize):
        assert pitch >= width > 0 and height >= 1
        for row in range(height):
            ctypes.memmove(dst + d + row * width, src + s + row * pitch, width)
    return out


@pytest.mark.parametrize("name", list(copy_layouts()))
def test_plan_runs_copies_each_layout(name):
    array = copy_layouts()[name]
    assert run_plan_on_host(array).tobytes() == np.ascontiguousarray(array).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4).flatmap(lambda ndim: st.tuples(
    st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim),
    st.permutations(range(ndim)),
    st.lists(st.sampled_from([1, 2, -1, -3]), min_size=ndim, max_size=ndim),
    st.sampled_from(["uint8", "float32", "complex128"]))))
def test_plan_runs_matches_numpy(case):
    shape, axes, steps, dtype = case
    base = np.arange(int(np.prod([e * 3 for e in shape])), dtype=dtype).reshape(
        [e * 3 for e in shape])
    array = base[tuple(slice(None, None, s) for s in steps)].transpose(axes)
    assert run_plan_on_host(array).tobytes() == np.ascontiguousarray(array).tobytes()


def test_plan_uses_few_transfers():
    a = np.zeros((64, 32), np.float32)
    assert len(plan_runs(a.shape, a.strides, 4)) == 1                 # one transfer
    assert len(plan_runs(a[:, :16].shape, a[:, :16].strides, 4)) == 1  # rows a pitch apart
    t = a.T  # element columns: one 2-D transfer per destination row
    assert len(plan_runs(t.shape, t.strides, 4)) == 32
    assert plan_runs((3, 0), (4, 4), 4) == []


def test_rows_farther_apart_than_the_device_allows_are_copied_one_by_one():
    a = np.zeros((8, 32), np.float32)[:, :16]          # rows 128 bytes apart, 64 wide
    assert plan_runs(a.shape, a.strides, 4, max_pitch=128) == [(0, 0, 64, 8, 128)]
    runs = plan_runs(a.shape, a.strides, 4, max_pitch=127)
    assert runs == [(128 * row, 64 * row, 64, 1, 64) for row in range(8)]
    b = np.zeros((4, 2, 32), np.float32)[:, :, :16]     # outer axes stay one run per row
    assert len(plan_runs(b.shape, b.strides, 4, max_pitch=127)) == 8
    # a limit of 0 is a limit (every pitch passes it); None is none
    assert len(plan_runs(a.shape, a.strides, 4, max_pitch=0)) == 8
    assert plan_runs(a.shape, a.strides, 4) == [(0, 0, 64, 8, 128)]


def test_copy_to_a_device_without_a_driver_says_so():
    with pytest.raises(BufferError, match="^copy: cannot copy cpu memory to vulkan:0: "
                                          "arrayport has no driver for vulkan devices"):
        ap.view(np.arange(3.0)).copy(device="vulkan:0")
    with pytest.raises(BufferError, match="^copy: cannot copy cuda:0 memory to rocm:0: "
                                          "arrayport cannot copy between cuda and rocm"):
        device_view(np.arange(3.0)).copy(device="rocm:0")


def test_copy_without_a_cuda_driver_says_so(without_cuda):
    with pytest.raises(BufferError,
                       match=r"^copy: cannot copy cpu memory to cuda:0: cuda: the CUDA driver "
                             r"\(libarrayport-no-such-cuda.so\) cannot be loaded"):
        ap.view(np.arange(3.0)).copy(device="cuda:0")


def test_copy_without_a_rocm_runtime_says_so(monkeypatch):
    from arrayport.gpu import hip as hip_driver
    from arrayport.gpu.library import NativeLibrary
    monkeypatch.setattr(hip_driver.driver, "library", NativeLibrary(
        "rocm", "the HIP runtime", ("libarrayport-no-such-hip.so",),
        hip_driver.HipUnavailable, {}, lambda library: None))
    with pytest.raises(hip_driver.HipUnavailable) as caught:
        ap.view(np.arange(3.0)).copy(device="rocm:0")
    assert str(caught.value).startswith(
        "copy: cannot copy cpu memory to rocm:0: rocm: the HIP runtime")
    assert isinstance(caught.value, BufferError)


def test_host_copy_needs_no_driver():
    array = np.arange(12.0).reshape(3, 4).T
    copy = ap.view(array).copy()
    assert copy.device == (1, 0) and copy.is_copy and copy.is_c_contiguous
    np.testing.assert_array_equal(ap.to_numpy(copy), array)


# ---- DLPack export: the consumer's stream waits for pending work ---------------------------


def test_export_without_pending_work_needs_no_driver(without_cuda):
    view = device_view(np.arange(3.0))
    ap.from_dlpack(view.__dlpack__(stream=123, max_version=(1, 3)))


# ---- DLPack import with synchronization off -------------------------------------------------

class GpuProducer:
    """A CUDA producer (over host memory) that records the stream it is asked for."""

    def __init__(self, device=(2, 0)):
        self.array, self.device, self.streams = np.arange(3.0), device, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        return device_view(self.array, self.device).__dlpack__(
            max_version=max_version)


def test_import_with_sync_off_asks_producers_not_to_synchronize(sync_off):
    producer = GpuProducer()
    ap.view(producer)
    ap.from_dlpack(producer)
    ap.view(producer, stream=123)
    assert producer.streams == [-1, -1, -1]
    cpu_producer = GpuProducer(device=(1, 0))
    ap.view(cpu_producer)
    assert cpu_producer.streams == [None]  # CPU producers take None only


def test_import_with_a_stream_records_it_as_pending():
    producer = GpuProducer()
    view = ap.view(producer, stream=123)
    assert producer.streams == [123]
    assert _core.pending_stream(view) == 123
    assert view.__cuda_array_interface__["stream"] == 123


# ---- the switch ---------------------------------------------------------------------------

def test_switch_and_context_manager():
    assert ap.implicit_sync_enabled()
    with ap.no_implicit_sync():
        assert not ap.implicit_sync_enabled()
        with ap.no_implicit_sync():
            pass
        assert not ap.implicit_sync_enabled()
    assert ap.implicit_sync_enabled()
    assert ap.set_implicit_sync(False) is True
    assert ap.set_implicit_sync(True) is False
    with pytest.raises(TypeError, match="enabled must be True or False"):
        ap.set_implicit_sync(0)


@pytest.mark.parametrize("value,enabled", [("0", False), ("off", False), ("1", True), ("", True)])
def test_environment_variable_sets_the_default(value, enabled):
    import os
    import subprocess
    code = "import arrayport as ap; print(ap.implicit_sync_enabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, ARRAYPORT_IMPLICIT_SYNC=value))
    assert out.stdout.strip() == str(enabled)


def test_gpu_module_names_drivers():
    from arrayport.gpu import cuda as cuda_driver, hip as hip_driver
    assert gpu.driver_for(2) is cuda_driver.driver and gpu.driver_for(13) is cuda_driver.driver
    assert gpu.driver_for(3) is cuda_driver.driver and gpu.driver_for(10) is hip_driver.driver
    assert gpu.driver_for(11) is hip_driver.driver
    assert gpu.driver_for(1) is None and gpu.driver_for(7) is None
    with pytest.raises(ValueError):   # not a DLPack device type
        gpu.driver_for(5)


def test_the_bare_value_questions_answer_as_devicetype_does():
    # gpu.is_device_memory and driver_for ask devices' tables of a bare value, without the
    # enum member (a copy asks at every step): the same answers, for every value
    from arrayport.devices import DeviceType, is_gpu_memory_type, vendor_of_type
    for value in range(-1, 21):
        try:
            member = DeviceType(value)
        except ValueError:
            assert not is_gpu_memory_type(value) and not gpu.is_device_memory(value)
            with pytest.raises(ValueError):
                vendor_of_type(value)
            continue
        assert is_gpu_memory_type(value) is member.is_gpu_memory is gpu.is_device_memory(member)
        assert vendor_of_type(value) == member.vendor == vendor_of_type(member)
    assert not gpu.is_device_memory([2]) and not gpu.is_device_memory("cuda")
    for bad in ([2], "cuda", 5):   # refused as the enum refuses them
        with pytest.raises(ValueError):
            gpu.driver_for(bad)


# ---- from_dlpack(stream=) -----------------------------------------------------------------

def test_from_dlpack_passes_the_consumer_stream():
    producer = GpuProducer()
    view = ap.from_dlpack(producer, stream=123)
    assert producer.streams == [123] and _core.pending_stream(view) == 123
    with pytest.raises(ValueError, match="stream 0 is ambiguous on CUDA"):
        ap.from_dlpack(producer, stream=0)
    with pytest.raises(ValueError, match="stream must be None for cpu memory"):
        ap.from_dlpack(np.arange(3.0), stream=5)
    with pytest.raises(ValueError, match="a stream cannot apply to it"):
        ap.from_dlpack(ap.view(np.arange(3.0)).__dlpack__(max_version=(1, 3)), stream=5)


def test_from_dlpack_to_the_cpu_asks_with_a_cpu_stream():
    class Mover(GpuProducer):
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            self.streams.append((stream, dl_device))
            return ap.view(self.array).__dlpack__(max_version=max_version)

    producer = Mover()
    view = ap.from_dlpack(producer, device="cpu", stream=123)
    assert producer.streams == [(None, (1, 0))]  # spec: kDLCPU takes stream None
    assert view.device == (1, 0)


def test_driver_memory_is_released_once_even_if_the_driver_is_gone():
    from arrayport.gpu.library import OwnedMemory
    released = []
    memory = OwnedMemory(0x1000, 64, released.append)
    memory.__del__()
    del memory
    assert released == [0x1000]

    def broken(address):
        raise OSError("driver unloaded")
    OwnedMemory(0x2000, 64, broken).__del__()  # swallowed: never an exception at exit


def test_failed_copies_and_exports_leak_nothing(producer, live, without_cuda):
    """Every refusal frees what it made: no host buffer, export or import left behind, the
    producer's deleter run exactly once when its View goes."""
    from producer import spec
    view = ap.from_dlpack(producer.capsule(spec(shape=(40, 30), device=(2, 0))))
    host = ap.view(np.arange(3.0))
    for source, arguments in ((view, {"device": "cpu"}), (view, {}),
                              (view, {"device": "vulkan:0"}), (host, {"device": "cuda:0"})):
        with pytest.raises(BufferError):
            source.copy(**arguments)
    with pytest.raises(BufferError):
        view.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    for stream in (0, -1):
        with pytest.raises(ValueError):
            view.copy(stream=stream)
    del view, host
    assert live.delta() == {"producer_deleter_calls": 1}
