"""The GPU rules both vendors share, each stated once and run on CUDA (the CUDA driver
simulator) and on ROCm (the HIP runtime simulator) — issue 54: the HIP half proven as the
CUDA half is. Where the vendors differ (the stream values: CUDA refuses 0, ROCm 1 and 2;
what None stands for), the ``Vendor`` says so and the test asks it.

Producers are each vendor's own arrays (tests/helpers/sim_arrays.py, hip_arrays.py): their
writes still pending on a non-blocking stream when arrayport gets them, the simulators'
streams slowed down, so a missing wait reads stale memory. Nothing may leak: each test's
simulator has as much alive after it as before (less what arrayport's driver keeps for
reuse)."""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core

pytestmark = pytest.mark.gpu

from arrow_structs import DeviceArray as DeviceArrayStruct  # noqa: E402
from vendors import Producer, leaks, vendor  # noqa: E402,F401

VALUES = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) + 1
_pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
_pointer_of.restype = ctypes.c_void_p
_pointer_of.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.fixture
def sim(vendor):
    simulator = vendor.simulator
    if simulator is None:
        pytest.skip("counts and delays are the simulators'")
    return simulator


@pytest.fixture
def slow(vendor, sim):
    """The vendor's asynchronous work takes 30 ms per item: a missing wait is caught."""
    sim.set_delay_us(30000)
    yield
    sim.set_delay_us(2000)


@pytest.fixture
def streams(vendor, sim):
    """(producer, consumer) non-blocking streams of device 0; drained and destroyed after
    the test, which must leave nothing of the vendor's alive."""
    before = leaks(vendor)
    made = vendor.stream(0), vendor.stream(0)
    yield made
    gc.collect()
    for stream in made:
        stream.synchronize()
        stream.close()
    assert leaks(vendor) == before, "device memory, events or streams left behind"


def host_copy(view, stream=None):
    """``view``'s values as NumPy sees them, through a copy to the host (on ``stream``)."""
    return ap.to_numpy(view.copy(device="cpu", stream=stream))


# ---- DLPack: what the consumer's stream means, and who waits ---------------------------------

def test_an_import_without_a_stream_leaves_the_default_stream_to_the_producer(vendor, slow,
                                                                              streams):
    """None goes to the producer as None, which it reads by its vendor's rule (CUDA's
    legacy default stream, ROCm's null stream); the copy arrayport then makes of it reads
    after the write."""
    producer_stream, _ = streams
    array = vendor.array(VALUES, stream=producer_stream, busy=3)
    producer = Producer(vendor, array)
    view = ap.from_dlpack(producer)
    assert producer.asked == [None]
    assert view.device == (vendor.device_type, 0)
    np.testing.assert_array_equal(host_copy(view), VALUES)   # read after the write
    del view, producer
    array.free()


def test_a_consumer_stream_is_handed_to_the_producer_and_read_in_its_order(vendor, slow,
                                                                           streams):
    producer_stream, consumer = streams
    array = vendor.array(VALUES, stream=producer_stream, busy=3)
    producer = Producer(vendor, array)
    view = ap.view(producer, stream=int(consumer))
    assert producer.asked == [int(consumer)]
    np.testing.assert_array_equal(vendor.read_on(int(consumer), view), VALUES)
    del view, producer
    array.free()


def test_stream_values_that_are_no_streams_on_the_vendor_are_refused_before_the_producer(
        vendor, streams):
    producer_stream, _ = streams
    array = vendor.array(VALUES, stream=producer_stream)
    producer = Producer(vendor, array)
    for value in vendor.refused_streams:
        with pytest.raises(ValueError, match=f"stream {value}"):
            ap.view(producer, stream=value)
    with pytest.raises(ValueError, match="stream must be >= -1"):
        ap.view(producer, stream=-2)
    assert producer.asked == []
    other = 0 if vendor.name == "rocm" else 1   # the other vendor's refused value: a stream
    view = ap.view(producer, stream=other)      # here (ROCm's default, CUDA's legacy one)
    assert producer.asked == [other]
    del view, producer
    producer_stream.synchronize()
    array.free()


def test_minus_one_asks_for_no_order_and_the_race_is_the_consumers(vendor, slow, streams):
    producer_stream, consumer = streams
    array = vendor.array(VALUES, stream=producer_stream, busy=3)
    producer = Producer(vendor, array)
    view = ap.view(producer, stream=-1)
    assert producer.asked == [-1]
    early = vendor.read_on(int(consumer), view)
    assert not np.array_equal(early, VALUES)                  # nobody waited: stale
    producer_stream.synchronize()
    np.testing.assert_array_equal(vendor.read_on(int(consumer), view), VALUES)
    del view, producer
    array.free()


def test_an_export_orders_the_consumers_stream_after_the_views_pending_work(vendor, slow,
                                                                            streams):
    producer_stream, consumer = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)   # the copy comes late
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    capsule = pending.__dlpack__(stream=int(consumer))
    received = ap.from_dlpack(capsule)
    np.testing.assert_array_equal(vendor.read_on(int(consumer), received), VALUES)
    for value in vendor.refused_streams:
        with pytest.raises(ValueError, match=f"stream {value}"):
            pending.__dlpack__(stream=value)
    del pending, capsule, received
    filler.free()


def test_the_default_stream_export_waits_on_the_gpu_not_the_host(vendor, sim, slow, streams):
    producer_stream, _ = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)   # the copy comes late
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    before = sim.counters()["host_synchronizations"]
    capsule = pending.__dlpack__(stream=None)
    assert sim.counters()["host_synchronizations"] == before
    received = ap.from_dlpack(capsule)
    np.testing.assert_array_equal(vendor.read_on(vendor.none_stream, received), VALUES)
    del pending, capsule, received
    filler.free()


# ---- the CUDA Array Interface (ROCm's libraries export it for HIP memory too) ----------------

def test_the_interface_is_located_by_the_vendor_and_its_stream_waited_for(vendor, slow,
                                                                          streams):
    producer_stream, consumer = streams
    array = vendor.array(VALUES, stream=producer_stream, busy=3)
    view = ap.view(array, stream=int(consumer))
    assert view.protocol == "cuda_array_interface"
    assert view.device == (vendor.device_type, 0) and view.ptr == array.ptr
    np.testing.assert_array_equal(vendor.read_on(int(consumer), view), VALUES)
    interface = view.__cuda_array_interface__           # said back: the consumer's stream
    assert interface["data"][0] == array.ptr and interface["stream"] == int(consumer)
    del view
    array.free()


# ---- copies ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_copies_to_the_device_between_devices_and_back_keep_every_value(vendor, sim, layout):
    before = leaks(vendor)
    source = {"contiguous": VALUES, "transposed": VALUES.T,
              "sliced": VALUES[::-1, ::2]}[layout]
    on_device = ap.view(source).copy(device=vendor.device(0))
    assert on_device.device == (vendor.device_type, 0)
    strided = on_device.T if layout == "contiguous" else on_device
    again = strided.copy(device=vendor.device(0))             # on the device, re-laid
    other = on_device.copy(device=vendor.device(1))           # to the second device
    assert other.device == (vendor.device_type, 1)
    expected = np.ascontiguousarray(source)
    np.testing.assert_array_equal(host_copy(on_device), expected)
    np.testing.assert_array_equal(host_copy(again), np.ascontiguousarray(
        expected.T if layout == "contiguous" else expected))
    np.testing.assert_array_equal(host_copy(other), expected)
    assert ap.to_numpy(on_device, copy=True).tolist() == expected.tolist()
    with pytest.raises(BufferError, match="NumPy reads host memory only"):
        ap.to_numpy(on_device)
    del on_device, strided, again, other
    assert leaks(vendor) == before


def test_pinned_memory_is_the_vendors_host_kind_and_read_after_its_write(vendor, slow,
                                                                         streams):
    producer_stream, _ = streams
    array = vendor.array(VALUES, stream=producer_stream, kind="pinned", busy=3)
    producer = Producer(vendor, array)
    view = ap.from_dlpack(producer)
    assert view.device == (vendor.host_type, 0)
    np.testing.assert_array_equal(ap.to_numpy(view), VALUES)   # host memory: zero-copy
    assert ap.to_numpy(view).ctypes.data == array.ptr
    del view, producer
    array.free()


# ---- lifetimes -------------------------------------------------------------------------------

def test_the_producer_is_released_once_when_the_last_view_goes(vendor, streams):
    producer_stream, _ = streams
    array = vendor.array(VALUES, stream=producer_stream)
    producer = Producer(vendor, array)
    gone = weakref.ref(producer)
    view = ap.from_dlpack(producer)
    child = view[1:, ::2]
    exported = ap.from_dlpack(child.__dlpack__(stream=None))
    del producer, view
    gc.collect()
    assert gone() is not None                       # the slice and its export hold it
    del child
    gc.collect()
    assert gone() is not None
    del exported
    gc.collect()
    assert gone() is None
    producer_stream.synchronize()
    array.free()


# ---- the Arrow device interface --------------------------------------------------------------

def test_a_pending_view_goes_to_arrow_on_its_device_with_an_event(vendor, sim, slow, streams):
    producer_stream, _ = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)   # the copy comes late
    pending = ap.view(VALUES.ravel()).copy(device=vendor.device(0),
                                           stream=int(producer_stream))
    host_waits = sim.counters()["host_synchronizations"]
    schema, capsule = pending.__arrow_c_device_array__()
    assert sim.counters()["host_synchronizations"] == host_waits
    struct = DeviceArrayStruct.from_address(_pointer_of(capsule, b"arrow_device_array"))
    assert (struct.device_type, struct.device_id) == (vendor.device_type, 0)
    assert struct.sync_event is not None
    again = ap.View.from_arrow((schema, capsule))    # the event waited for, on the GPU
    assert again.device == (vendor.device_type, 0) and again.ptr == pending.ptr
    np.testing.assert_array_equal(vendor.read_on(vendor.none_stream, again), VALUES.ravel())
    del struct, again, schema, capsule, pending
    filler.free()


# ---- the DLPack exchange table ---------------------------------------------------------------

def test_the_exchange_table_is_asked_for_the_work_stream_of_the_tensors_vendor(vendor, slow,
                                                                               streams):
    """PyTorch's table once answered ROCm tensors with the CUDA path's stream
    (pytorch#175432): arrayport asks with the tensor's own device type, and orders after
    the stream it is told."""
    from exchange_producer import COUNTS, ExchangeTensor
    producer_stream, consumer = streams
    array = vendor.array(VALUES, stream=producer_stream, busy=3)
    ExchangeTensor.current_stream[0] = int(producer_stream)
    tensor = ExchangeTensor(array, device_type=vendor.device_type)
    asked, python_exports = len(ExchangeTensor.asked), COUNTS["__dlpack__"]
    view = ap.view(tensor, stream=int(consumer))
    assert ExchangeTensor.asked[asked:] == [(vendor.device_type, 0)]
    assert COUNTS["__dlpack__"] == python_exports          # the table alone was used
    np.testing.assert_array_equal(vendor.read_on(int(consumer), view), VALUES)
    del view, tensor
    gc.collect()
    ExchangeTensor.current_stream.clear()


# ---- host readers, synchronization off, threads ----------------------------------------------

def test_a_host_reader_of_pending_device_memory_waits_for_the_write(vendor, sim, slow,
                                                                   streams):
    producer_stream, _ = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)   # the copy comes late
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    np.testing.assert_array_equal(ap.to_numpy(pending, copy=True), VALUES)
    np.testing.assert_array_equal(ap.from_dlpack(pending, device="cpu").__array__(), VALUES)
    del pending
    filler.free()


def test_with_synchronization_off_an_export_orders_nothing(vendor, sim, slow, streams):
    """The switch for graph capture: off, the consumer's stream is not made to wait (the
    race is then the consumer's, and is lost here), on either vendor."""
    producer_stream, consumer = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    with ap.no_implicit_sync():
        received = ap.from_dlpack(pending.__dlpack__(stream=int(consumer)))
    assert not np.array_equal(vendor.read_on(int(consumer), received), VALUES)
    producer_stream.synchronize()
    del pending, received
    filler.free()


def test_views_released_on_other_threads_release_the_producer_once(vendor, streams):
    import threading
    producer_stream, _ = streams
    array = vendor.array(VALUES, stream=producer_stream)
    producer = Producer(vendor, array)
    gone = weakref.ref(producer)
    views = [ap.from_dlpack(producer)[i] for i in range(4)]
    del producer
    threads = [threading.Thread(target=views.pop) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    assert views == [] and gone() is None
    producer_stream.synchronize()
    array.free()


def test_a_copy_to_the_second_device_reads_after_the_first_devices_pending_write(vendor,
                                                                               slow,
                                                                               streams):
    producer_stream, _ = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    other = pending.copy(device=vendor.device(1))
    assert other.device == (vendor.device_type, 1)
    np.testing.assert_array_equal(ap.to_numpy(other, copy=True), VALUES)
    del pending, other
    filler.free()


def test_an_export_to_a_consumers_exchange_table_orders_its_current_work_stream(vendor, slow,
                                                                               streams):
    """arrayport as the producer of a consumer with a DLPack 1.3 exchange table (as
    ``to_torch`` makes a tensor): the table is asked for its current work stream with the
    View's own device type, and that stream waits for the View's pending work."""
    from exchange_producer import ExchangeTensor
    producer_stream, consumer = streams
    filler = vendor.array(VALUES, stream=producer_stream, busy=3)
    pending = ap.view(VALUES).copy(device=vendor.device(0), stream=int(producer_stream))
    ExchangeTensor.current_stream[0] = int(consumer)
    asked = len(ExchangeTensor.asked)
    made = _core.object_via_exchange_api(pending, ExchangeTensor)
    assert ExchangeTensor.asked[asked:] == [(vendor.device_type, 0)]
    assert (made.device_type, made.ptr) == (vendor.device_type, pending.ptr)
    np.testing.assert_array_equal(
        vendor.arrays.read_on(int(consumer), 0, made.ptr, made.shape, made.dtype), VALUES)
    del made, pending
    gc.collect()
    ExchangeTensor.current_stream.clear()
    filler.free()
