"""View.copy and the device layer's stream rules, on any machine: a fake CUDA driver
(tests/helpers/fake_gpu.py) does the transfers over host memory and logs every call, so
these tests check the bytes and exactly what arrayport asks of a driver. `pytest -m gpu`
runs the same copies on a real GPU (tests/test_gpu_devices.py)."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrayport as ap
from arrayport import _core, gpu
from arrayport.copies import plan_runs

import fake_gpu


@pytest.fixture
def cuda(monkeypatch):
    return fake_gpu.FakeCuda(monkeypatch)


@pytest.fixture
def sync_off():
    with ap.no_implicit_sync():
        yield


def layouts():
    base = np.arange(2 * 5 * 7 * 3, dtype=np.int32).reshape(2, 5, 7, 3)
    return {
        "contiguous": base, "transposed": base.T, "sliced": base[:, 1:4, ::2],
        "negative": base[::-1, :, ::-2], "broadcast": np.broadcast_to(base[0, 0], (4, 7, 3)),
        "0-d": np.array(3.5), "size-0": base[:, :0], "permuted": base.transpose(2, 0, 3, 1),
    }


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


@pytest.mark.parametrize("name", list(layouts()))
def test_plan_runs_copies_each_layout(name):
    array = layouts()[name]
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


# ---- copies in every direction --------------------------------------------------------------

@pytest.mark.parametrize("name", list(layouts()))
def test_host_to_device_and_back_bit_for_bit(cuda, name):
    array = layouts()[name]
    on_device = ap.view(array).copy(device="cuda:0")
    assert on_device.device == (2, 0) and on_device.is_copy and not on_device.readonly
    assert on_device.is_c_contiguous and on_device.shape == array.shape
    assert fake_gpu.contents(on_device) == np.ascontiguousarray(array).tobytes()
    back = on_device.copy(device="cpu")
    assert back.device == (1, 0) and back.is_copy
    assert ap.to_numpy(back).tobytes() == np.ascontiguousarray(array).tobytes()
    # Host sources are packed on the host and sent whole: one transfer at most.
    assert len(cuda.calls("copy_async")) == (2 if array.size else 0)
    assert not cuda.calls("copy_2d_async")


@pytest.mark.parametrize("name", ["transposed", "sliced", "negative", "broadcast", "permuted"])
def test_strided_device_data_moves_by_2d_transfers(cuda, name):
    array = layouts()[name]
    source = fake_gpu.device_view(array)
    for target in ("cuda:0", "cpu"):
        copy = source.copy(device=target)
        assert copy.device == ap.Device(target) and copy.is_c_contiguous
        assert fake_gpu.contents(copy) == np.ascontiguousarray(array).tobytes()
    assert cuda.calls("copy_2d_async") and not cuda.calls("copy_async")


def test_device_to_device_across_gpus_is_a_peer_transfer(cuda):
    array = np.arange(12.0).reshape(3, 4)
    copy = fake_gpu.device_view(array, (2, 1)).copy(device="cuda:0", stream=77)
    assert copy.device == (2, 0)
    assert fake_gpu.contents(copy) == array.tobytes()
    assert cuda.calls("copy_peer_async") == [(0, 1, array.nbytes, 77)]
    # Strided: packed on its own device first, then sent whole.
    copy = fake_gpu.device_view(array.T, (2, 1)).copy(device="cuda:0", stream=77)
    assert fake_gpu.contents(copy) == np.ascontiguousarray(array.T).tobytes()
    assert cuda.calls("allocate_device")[-2:] == [(0, array.nbytes), (1, array.nbytes)]


def test_pinned_host_memory_target(cuda):
    array = np.arange(6, dtype=np.uint16)
    pinned = ap.view(array).copy(device="cuda_host")
    assert pinned.device == (3, 0) and cuda.calls("allocate_pinned") == [(array.nbytes,)]
    assert ap.to_numpy(pinned).tobytes() == array.tobytes()  # the CPU reads pinned memory


def test_same_device_copy_is_new_memory(cuda):
    array = np.arange(5, dtype=np.int64)
    source = fake_gpu.device_view(array)
    copy = source.copy()
    assert copy.device == (2, 0) and copy.ptr != source.ptr
    array[0] = 99  # the copy does not share the source
    assert np.frombuffer(fake_gpu.contents(copy), np.int64)[0] == 0


def test_copy_keeps_its_source_alive_while_transfers_may_read_it(cuda):
    import gc
    import weakref
    array = np.arange(4.0)
    source = fake_gpu.device_view(array)
    watcher = weakref.ref(source)
    copy = source.copy()
    del source
    gc.collect()
    assert watcher() is not None  # the copy's owner holds the source
    del copy
    gc.collect()
    assert watcher() is None


# ---- streams around copies ------------------------------------------------------------------

def test_copy_orders_itself_between_the_producer_and_the_consumer(cuda):
    source = fake_gpu.device_view(np.arange(8.0), pending_stream=55)
    source.copy(stream=66)
    assert [entry[0] for entry in cuda.log] == [
        "allocate_device", "make_stream_wait", "copy_async", "make_stream_wait"]
    assert cuda.calls("make_stream_wait") == [(0, 66, 55), (0, 55, 66)]  # events, both ways
    assert not cuda.calls("synchronize")  # device results: no host wait


def test_copy_result_has_work_pending_on_its_stream(cuda):
    copy = ap.view(np.arange(3.0)).copy(device="cuda:0", stream=66)
    assert copy.__cuda_array_interface__["stream"] == 66
    assert cuda.calls("copy_async") == [(0, 24, 66)]


def test_default_stream_is_the_legacy_stream(cuda):
    source = fake_gpu.device_view(np.arange(3.0))
    source.copy()
    assert cuda.calls("copy_async") == [(0, 24, 1)]


def test_device_to_host_waits_on_the_host_for_its_own_transfer(cuda):
    source = fake_gpu.device_view(np.arange(3.0), pending_stream=55)
    result = source.copy(device="cpu", stream=66)
    assert cuda.calls("synchronize") == [(0, 66)]
    assert result.__array_interface__ and result.device == (1, 0)


def test_copies_with_sync_off_record_no_events(cuda, sync_off):
    source = fake_gpu.device_view(np.arange(3.0), pending_stream=55)
    source.copy(stream=66)
    source.copy(device="cpu", stream=66)
    assert not cuda.calls("make_stream_wait")
    assert cuda.calls("synchronize") == [(0, 66)]  # the host result must still be complete


@pytest.mark.parametrize("device,stream,message", [
    ("cuda:0", 0, "stream 0 is ambiguous on CUDA"),
    ("cuda:0", -1, "a copy needs one to run on"),
    ("cpu", 5, "stream must be None for cpu memory"),
])
def test_copy_stream_values_are_validated(cuda, device, stream, message):
    source = ap.view(np.arange(3.0))
    with pytest.raises(ValueError, match=message):
        source.copy(device=device, stream=stream)
    assert not cuda.log


def test_copy_to_a_device_without_a_driver_says_so():
    with pytest.raises(BufferError, match="^copy: cannot copy cpu memory to vulkan:0: "
                                          "arrayport has no driver for vulkan devices"):
        ap.view(np.arange(3.0)).copy(device="vulkan:0")
    with pytest.raises(BufferError, match="^copy: cannot copy cuda:0 memory to rocm:0: "
                                          "arrayport cannot copy between cuda and rocm"):
        fake_gpu.device_view(np.arange(3.0)).copy(device="rocm:0")


def test_copy_without_a_cuda_driver_says_so(without_cuda):
    with pytest.raises(BufferError,
                       match=r"^copy: cannot copy cpu memory to cuda:0: cuda: the CUDA driver "
                             r"\(libarrayport-no-such-cuda.so\) cannot be loaded"):
        ap.view(np.arange(3.0)).copy(device="cuda:0")


def test_copy_without_a_rocm_runtime_says_so(monkeypatch):
    from arrayport import _hip_driver
    from arrayport._gpu_library import NativeLibrary
    monkeypatch.setattr(_hip_driver.driver, "library", NativeLibrary(
        "rocm", "the HIP runtime", ("libarrayport-no-such-hip.so",),
        _hip_driver.HipUnavailable, {}, lambda library: None))
    with pytest.raises(_hip_driver.HipUnavailable) as caught:
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

@pytest.mark.parametrize("stream,waits", [
    (None, [(0, 1, 55)]),   # None: the legacy default stream
    (2, [(0, 2, 55)]),      # the per-thread default stream
    (123, [(0, 123, 55)]),
    (55, []),               # the same stream: nothing to do
    (-1, []),               # -1: no synchronization, by request
])
def test_export_orders_the_consumer_after_pending_work(cuda, stream, waits):
    view = fake_gpu.device_view(np.arange(3.0), pending_stream=55)
    capsule = view.__dlpack__(stream=stream, max_version=(1, 3))
    assert [w for w in cuda.calls("make_stream_wait") if w[1] != w[2]] == waits
    assert not cuda.calls("synchronize")  # events, never a host wait
    ap.from_dlpack(capsule)


def test_export_without_pending_work_needs_no_driver(without_cuda):
    view = fake_gpu.device_view(np.arange(3.0))
    ap.from_dlpack(view.__dlpack__(stream=123, max_version=(1, 3)))


def test_export_with_sync_off_records_no_event(cuda, sync_off):
    view = fake_gpu.device_view(np.arange(3.0), pending_stream=55)
    view.__dlpack__(stream=123, max_version=(1, 3))
    assert not cuda.log


def test_cpu_export_of_pinned_memory_waits_on_the_host(cuda):
    """Spec: with dl_device=kDLCPU, stream is None and the producer synchronizes."""
    view = fake_gpu.device_view(np.arange(3.0), (3, 0), pending_stream=55)
    capsule = view.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    assert cuda.calls("synchronize") == [(0, 55)]
    assert ap.from_dlpack(capsule).device == (1, 0)


def test_view_with_a_stream_orders_it_after_pending_work(cuda):
    view = fake_gpu.device_view(np.arange(3.0), pending_stream=55)
    assert ap.view(view, stream=123) is view
    assert cuda.calls("make_stream_wait") == [(0, 123, 55)]
    with pytest.raises(ValueError, match="stream 0 is ambiguous"):
        ap.view(view, stream=0)


# ---- the CUDA Array Interface with synchronization off --------------------------------------

def test_cai_with_sync_off_ignores_and_hides_streams(cuda):
    array = np.arange(4.0)
    interface = dict(fake_gpu.device_view(array).__cuda_array_interface__, stream=55)
    holder = type("CAI", (), {"__cuda_array_interface__": interface, "keep": array})()
    with ap.no_implicit_sync():
        view = ap.view(holder, stream=123)
        assert view.__cuda_array_interface__["stream"] is None
    assert not cuda.calls("make_stream_wait")
    view = ap.view(holder, stream=123)  # on again: wait, and the data is ready on 123
    assert cuda.calls("make_stream_wait") == [(0, 123, 55)]
    assert view.__cuda_array_interface__["stream"] == 123


# ---- DLPack import with synchronization off -------------------------------------------------

class GpuProducer:
    """A CUDA producer (over host memory) that records the stream it is asked for."""

    def __init__(self, device=(2, 0)):
        self.array, self.device, self.streams = np.arange(3.0), device, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        return fake_gpu.device_view(self.array, self.device).__dlpack__(
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
    from arrayport import _cuda_driver, _hip_driver
    assert gpu.driver_for(2) is _cuda_driver.driver and gpu.driver_for(13) is _cuda_driver.driver
    assert gpu.driver_for(3) is _cuda_driver.driver and gpu.driver_for(10) is _hip_driver.driver
    assert gpu.driver_for(11) is _hip_driver.driver
    assert gpu.driver_for(1) is None and gpu.driver_for(7) is None


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
    from arrayport._gpu_library import OwnedMemory
    released = []
    memory = OwnedMemory(0x1000, 64, released.append)
    memory.__del__()
    del memory
    assert released == [0x1000]

    def broken(address):
        raise OSError("driver unloaded")
    OwnedMemory(0x2000, 64, broken).__del__()  # swallowed: never an exception at exit


# ---- the C exchange API: "no sync" exports order the default stream ------------------------

def test_exchange_exports_order_the_default_stream_after_pending_work(cuda, capi_consumer):
    """The table's current work stream is the default stream (NULL); a consumer orders
    itself after it, so a View with work pending elsewhere first makes it wait (event)."""
    view = fake_gpu.device_view(np.arange(4.0), pending_stream=55)
    assert capi_consumer.exchange_import(view)["device"] == (2, 0)
    assert cuda.calls("make_stream_wait") == [(0, 1, 55)]
    capi_consumer.exchange_dltensor(view)
    assert cuda.calls("make_stream_wait") == [(0, 1, 55)] * 2
    with ap.no_implicit_sync():
        capi_consumer.exchange_import(view)
    assert len(cuda.calls("make_stream_wait")) == 2
    capi_consumer.exchange_import(fake_gpu.device_view(np.arange(4.0)))  # nothing pending
    assert len(cuda.calls("make_stream_wait")) == 2


def test_copy_to_a_device_without_a_driver_next_to_cuda(cuda):
    with pytest.raises(BufferError, match="^copy: cannot copy cuda:0 memory to vulkan:0: "
                                          "arrayport has no driver for vulkan devices"):
        fake_gpu.device_view(np.arange(3.0)).copy(device="vulkan:0")
    assert not cuda.log
    managed = fake_gpu.device_view(np.arange(3.0), (13, 0))  # managed memory as a source
    assert fake_gpu.contents(managed.copy(device="cuda:0")) == np.arange(3.0).tobytes()


def test_managed_memory_copies_into_new_managed_memory(cuda):
    managed = fake_gpu.device_view(np.arange(3.0), (13, 0))
    copy = managed.copy()
    assert copy.device == (13, 0) and fake_gpu.contents(copy) == np.arange(3.0).tobytes()
    assert cuda.calls("allocate_device") == [(0, 24, "managed")]


def test_cpu_to_pinned_runs_on_the_cuda_default_stream(cuda):
    ap.view(np.arange(3.0)).copy(device="cuda_host")
    assert cuda.calls("copy_async") == [(0, 24, 1)]
    with pytest.raises(ValueError, match="stream must be None for cuda_host memory"):
        ap.view(np.arange(3.0)).copy(device="cuda_host", stream=5)


def test_pinned_memory_with_pending_work_is_waited_for_before_export(cuda):
    """Pinned host memory has no DLPack stream (its consumer may be the CPU): export waits
    on the host for the GPU work pending on it."""
    view = fake_gpu.device_view(np.arange(3.0), (3, 0), pending_stream=55)
    ap.from_dlpack(view.__dlpack__(max_version=(1, 3)))
    assert cuda.calls("synchronize") == [(0, 55)] and not cuda.calls("make_stream_wait")
    with ap.no_implicit_sync():
        view.__dlpack__(max_version=(1, 3))
    assert len(cuda.calls("synchronize")) == 1


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
