"""NVIDIA's own Python libraries as arrayport's peers, on the CUDA driver simulator (issue
32): cuda-core (over cuda-bindings) and numba-cuda exchange device arrays with arrayport
both ways, streams included. Each library reaches the driver as it would on a GPU
(cuGetProcAddress, cuDriverGetVersion), so what runs here is their real code against the
driver's rules; only kernels (NVRTC, NVVM) cannot run, and none is used.

Every exchange is checked for real: the memory is the same (written by one side, read by
the other through a copy, since the host cannot read device memory), and with streams
slowed down (30 ms per item of work) an exchange that did not order the consumer after the
producer would read zeros.
"""

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from on_simulator import needs_two_devices  # noqa: E402
from on_simulator import SIMULATED, nothing_leaks, slow_streams  # noqa: E402,F401

VALUES = np.arange(24, dtype=np.float32).reshape(4, 6)


def host_values(view):
    return ap.to_numpy(view.copy(device="cpu"))


# ---- cuda-core -----------------------------------------------------------------------------

@pytest.fixture
def core():
    """cuda-core with device 0 current, and two of its streams (closed after the test)."""
    cuda_core = pytest.importorskip("cuda.core", reason="needs cuda-core (pip install -e "
                                                        "'.[test]' installs it)")
    device = cuda_core.Device(0)
    device.set_current()
    streams = [device.create_stream() for _ in range(2)]
    yield cuda_core, device, streams
    for stream in streams:
        stream.sync()
        stream.close()


def pinned_buffer(cuda_core, values):
    """A cuda-core pinned host buffer holding ``values`` (host memory the device reads)."""
    buffer = cuda_core.LegacyPinnedMemoryResource().allocate(values.nbytes)
    np.copyto(ap.to_numpy(ap.view(buffer)).view(values.dtype).reshape(values.shape), values)
    return buffer


def test_a_cuda_core_buffer_is_viewed_and_ordered_on_arrayport_s_stream(core, slow_streams,
                                                                        nothing_leaks):
    cuda_core, device, (producer, consumer) = core
    source = pinned_buffer(cuda_core, VALUES)
    buffer = device.allocate(VALUES.nbytes, stream=producer)
    buffer.copy_from(source, stream=producer)          # still running when we look
    event = producer.record()
    consumer.wait(event)                                 # cuda-core orders its own streams
    view = ap.view(buffer, stream=consumer)              # a cuda-core Stream: __cuda_stream__
    assert (view.device.type.label, view.device.id, view.ptr) == ("cuda", 0, int(buffer.handle))
    assert view.protocol == "dlpack"
    copied = view.copy(device="cpu", stream=consumer)
    np.testing.assert_array_equal(ap.to_numpy(copied).view(np.float32).reshape(4, 6), VALUES)
    del view, copied
    buffer.close(producer)
    source.close()
    event.close()


def test_an_arrayport_copy_is_read_by_cuda_core_after_its_pending_work(core, slow_streams,
                                                                      nothing_leaks):
    # arrayport's copy is still being written on arrayport's stream; cuda-core asks for the
    # data on its own stream (DLPack's stream argument) and must see every value.
    cuda_core, device, (producer, consumer) = core
    from cuda.core.utils import StridedMemoryView
    on_device = ap.view(VALUES).copy(device="cuda:0", stream=producer)
    memory = StridedMemoryView.from_dlpack(on_device, stream_ptr=int(consumer.handle))
    assert (memory.ptr, memory.shape, memory.device_id) == (on_device.ptr, (4, 6), 0)
    assert memory.is_device_accessible and not memory.readonly
    target = pinned_buffer(cuda_core, np.zeros_like(VALUES))
    cuda_core.Buffer.from_handle(memory.ptr, VALUES.nbytes).copy_to(target, stream=consumer)
    consumer.sync()
    np.testing.assert_array_equal(ap.to_numpy(ap.view(target)).view(np.float32).reshape(4, 6),
                                  VALUES)
    del memory, on_device
    target.close()


def test_cuda_core_reads_arrayport_s_cuda_array_interface_with_a_stream(core, slow_streams,
                                                                       nothing_leaks):
    cuda_core, device, (producer, consumer) = core
    from cuda.core.utils import StridedMemoryView
    on_device = ap.view(VALUES.T).copy(device="cuda:0", stream=producer)   # strided source
    assert on_device.__cuda_array_interface__["stream"] == int(producer.handle)
    memory = StridedMemoryView.from_cuda_array_interface(on_device,
                                                         stream_ptr=int(consumer.handle))
    target = pinned_buffer(cuda_core, np.zeros_like(VALUES.T))
    cuda_core.Buffer.from_handle(memory.ptr, VALUES.nbytes).copy_to(target, stream=consumer)
    consumer.sync()
    np.testing.assert_array_equal(ap.to_numpy(ap.view(target)).view(np.float32).reshape(6, 4),
                                  VALUES.T)
    del memory, on_device
    target.close()


def test_writes_through_cuda_core_are_seen_by_arrayport(core, slow_streams, nothing_leaks):
    cuda_core, device, (stream, _) = core
    from cuda.core.utils import StridedMemoryView
    on_device = ap.view(np.zeros(24, np.float32)).copy(device="cuda:0")   # zeros, pending
    memory = StridedMemoryView.from_dlpack(on_device, stream_ptr=int(stream.handle))
    source = pinned_buffer(cuda_core, VALUES.ravel())
    cuda_core.Buffer.from_handle(memory.ptr, VALUES.nbytes).copy_from(source, stream=stream)
    stream.sync()
    np.testing.assert_array_equal(host_values(on_device), VALUES.ravel())
    del memory, on_device
    source.close()


# ---- numba-cuda --------------------------------------------------------------------------------

@pytest.fixture
def numba_cuda():
    cuda = pytest.importorskip("numba.cuda", reason="needs numba-cuda (pip install -e "
                                                    "'.[test]' installs it)")
    if not cuda.is_available():
        pytest.skip("numba-cuda finds no CUDA driver")
    return cuda


def release(cuda):
    """numba-cuda defers freeing memory and streams until its lists of pending frees (the
    context's, and its memory manager's) are long enough: free them now, so that the
    simulator can say whether anything leaked. arrayport's held memory goes back first: a
    dead copy result keeps numba's source array alive until then (its transfer may not have
    run), and numba's free of it joins the pending list only when it goes."""
    import gc
    gc.collect()
    ap.release_device_memory()
    gc.collect()
    context = cuda.current_context()
    for pending in (context.deallocations, context.memory_manager.deallocations):
        pending.clear()


def test_a_numba_array_with_a_stream_is_viewed_in_arrayport_s_stream_order(numba_cuda,
                                                                           slow_streams,
                                                                           nothing_leaks):
    from sim_arrays import Stream
    cuda = numba_cuda
    producer = cuda.stream()
    earlier = [cuda.to_device(np.zeros(4), stream=producer) for _ in range(3)]
    array = cuda.to_device(VALUES, stream=producer)      # runs after earlier work: late
    interface = array.__cuda_array_interface__
    assert interface["stream"] == int(producer.handle)
    consumer = Stream(0)
    try:
        view = ap.view(array, stream=int(consumer))
        assert (view.ptr, view.protocol) == (interface["data"][0], "cuda_array_interface")
        np.testing.assert_array_equal(ap.to_numpy(view.copy(device="cpu",
                                                            stream=int(consumer))), VALUES)
        del view
    finally:
        producer.synchronize()
        consumer.close()
    del array, earlier, producer
    release(cuda)


def test_numba_reads_an_arrayport_copy_after_its_pending_work(numba_cuda, slow_streams,
                                                              nothing_leaks):
    from sim_arrays import Stream
    cuda = numba_cuda
    stream = Stream(0)
    try:
        on_device = ap.view(VALUES).copy(device="cuda:0", stream=int(stream))
        assert on_device.__cuda_array_interface__["stream"] == int(stream)
        # numba-cuda synchronizes on the interface's stream (the spec's consumer rule).
        array = cuda.as_cuda_array(on_device)
        np.testing.assert_array_equal(array.copy_to_host(), VALUES)
        # The same memory: numba writes, arrayport reads.
        array.copy_to_device(np.full_like(VALUES, 7))
        np.testing.assert_array_equal(host_values(on_device), np.full_like(VALUES, 7))
        del array, on_device
    finally:
        stream.close()
    release(cuda)


def test_with_synchronization_off_numba_is_not_told_and_reads_too_early(numba_cuda,
                                                                       slow_streams):
    # The switch's documented effect: no stream in the interface, so nothing orders numba
    # after arrayport's copy — on the simulator, numba reads memory not yet written.
    from sim_arrays import DeviceArray, Stream
    cuda = numba_cuda
    stream = Stream(0)
    earlier = DeviceArray(np.zeros(4, np.uint8), device=0, stream=stream, busy=3)  # late
    try:
        with ap.no_implicit_sync():
            on_device = ap.view(VALUES).copy(device="cuda:0", stream=int(stream))
            assert on_device.__cuda_array_interface__["stream"] is None
            early = cuda.as_cuda_array(on_device).copy_to_host()
        if SIMULATED:
            assert not np.array_equal(early, VALUES)
        stream.synchronize()
        del on_device
    finally:
        earlier.free()
        stream.close()


@needs_two_devices
def test_arrayport_copies_between_numba_arrays_on_two_devices(numba_cuda, nothing_leaks):
    cuda = numba_cuda
    if len(cuda.gpus) < 2:
        pytest.skip("needs two devices")
    array = cuda.to_device(VALUES)
    copied = ap.view(array).copy(device="cuda:1")
    assert str(copied.device) == "cuda:1"
    np.testing.assert_array_equal(host_values(copied), VALUES)
    del copied, array
    release(cuda)


# ---- ap.to(x, "numba") and ap.to(x, "cuda.core") ---------------------------------------------

def test_to_numba_shares_device_memory_and_copies_what_numba_cannot_hold(numba_cuda,
                                                                         nothing_leaks):
    on_device = ap.view(VALUES).copy(device="cuda:0")
    array = ap.to(on_device, "numba")
    assert array.__cuda_array_interface__["data"][0] == on_device.ptr       # shared
    # numba's arrays are always writable: read-only memory arrives as a copy by default
    frozen = on_device.as_readonly()
    copied = ap.to(frozen, "numba")
    assert copied.__cuda_array_interface__["data"][0] != on_device.ptr
    np.testing.assert_array_equal(copied.copy_to_host(), VALUES)
    with pytest.raises(BufferError, match="read-only"):
        ap.to(frozen, "numba", copy=False)
    host = ap.to(VALUES, "numba")                                          # host data: copied
    np.testing.assert_array_equal(host.copy_to_host(), VALUES)
    with pytest.raises(BufferError, match="needs a copy, but copy=False"):
        ap.to(VALUES, "numba", copy=False)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="numba-cuda has no type for bfloat16"):
        ap.to(VALUES.astype(ml_dtypes.bfloat16), "numba")
    del array, copied, host, frozen, on_device
    release(numba_cuda)


def test_to_cuda_core_keeps_read_only_and_refuses_types_it_cannot_name(core, nothing_leaks):
    on_device = ap.view(VALUES).copy(device="cuda:0")
    memory = ap.to(on_device.as_readonly(), "cuda.core")
    assert (memory.ptr, memory.readonly, memory.device_id) == (on_device.ptr, True, 0)
    host = ap.to(VALUES, "cuda.core")                       # host memory, viewed as it is
    assert (host.ptr, host.is_device_accessible) == (VALUES.ctypes.data, False)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="cuda-core has no type for float8_e4m3fn"):
        ap.to(ap.view(VALUES.astype(ml_dtypes.float8_e4m3fn)).copy(device="cuda:0"),
              "cuda.core")
    del memory, host, on_device
