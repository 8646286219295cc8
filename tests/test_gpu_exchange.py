"""CUDA tensors through the DLPack 1.3 exchange table (issue 42), proven on the CUDA driver
simulator with a producer whose type has a table over simulator memory and whose current
work stream still has the tensor's write pending (tests/helpers/exchange_producer.py).

The import is straight from C: the producer's ``__dlpack__`` is never called, the driver
is never called, the host never waits; the producer's current stream becomes the View's
pending work, and the one owner of stream order orders whoever reads after it, lazily. The
export to a consumer's own table orders the consumer's current stream first. Counts are
the simulator's."""

import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from exchange_producer import COUNTS, ExchangeTensor  # noqa: E402
from on_simulator import (needs_simulator, nothing_leaks, simulator,  # noqa: E402,F401
                          slow_streams, streams)
from sim_arrays import Context, DeviceArray  # noqa: E402

VALUES = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) + 1


def producing(stream, busy=3, values=VALUES):
    """A tensor whose upload is still pending on ``stream``, the producer's current stream."""
    ExchangeTensor.current_stream[0] = int(stream)
    return ExchangeTensor(DeviceArray(values, stream=stream, busy=busy))


def driver_calls(before):
    after = simulator.counters()
    return {name: after[name] - before[name] for name in after if after[name] != before[name]}


@needs_simulator
def test_the_import_is_straight_from_c_with_no_driver_call(streams):
    producer, _ = streams
    tensor = producing(producer)
    calls, deleted = dict(COUNTS), COUNTS["deleter"]
    before = simulator.counters()
    view = ap.view(tensor)
    assert driver_calls(before) == {}          # no event, no driver call, no host wait
    assert COUNTS["__dlpack__"] == calls.get("__dlpack__", 0) == 0
    assert COUNTS["from_py_object"] - calls.get("from_py_object", 0) == 1
    assert COUNTS["current_work_stream"] - calls.get("current_work_stream", 0) == 1
    assert view.device == ap.Device("cuda:0") and view.shape == VALUES.shape
    assert _core.pending_stream(view) == int(producer)   # the producer's work, pending
    del view
    gc.collect()
    assert COUNTS["deleter"] - deleted == 1               # the producer's deleter, once


def test_a_copy_on_another_stream_reads_the_pending_write(streams, slow_streams):
    producer, consumer = streams
    view = ap.view(producing(producer))
    copy = view.copy(stream=int(consumer))
    assert contents(copy) == VALUES.tobytes()
    del view, copy


def test_with_synchronization_off_nothing_is_asked_and_the_race_is_lost(streams, slow_streams):
    producer, consumer = streams
    asked = COUNTS["current_work_stream"]
    with ap.no_implicit_sync():
        view = ap.view(producing(producer))
        assert _core.pending_stream(view) is None
        copy = view.copy(stream=int(consumer))
        consumer.synchronize()
    assert COUNTS["current_work_stream"] == asked
    assert contents(copy) != VALUES.tobytes()   # read before the producer wrote
    del view, copy


def test_stream_minus_one_asks_nothing(streams):
    producer, _ = streams
    asked = COUNTS["current_work_stream"]
    view = ap.view(producing(producer), stream=-1)
    assert _core.pending_stream(view) is None and COUNTS["current_work_stream"] == asked
    del view


@needs_simulator
def test_a_consumer_stream_named_at_import_waits_once_with_a_reused_event(streams):
    producer, consumer = streams
    warm = ap.view(producing(producer), stream=int(consumer))   # the context's event exists
    del warm
    tensor = producing(producer)
    with Context(0):   # as a CUDA user's thread has it
        before = simulator.counters()
        view = ap.view(tensor, stream=int(consumer))
        calls = driver_calls(before)
    # One record and one wait, with a reused event, no host wait; besides them only the
    # lookups of the producer stream's context (cuStreamGetCtx, cuCtxGetCurrent) and of its
    # id (cuCtxGetId: the reused event is the context's only while the context is the same).
    assert calls == {"cuEventRecord": 1, "cuStreamWaitEvent": 1, "cuStreamGetCtx": 1,
                     "cuCtxGetCurrent": 1, "cuCtxGetId": 1}
    assert _core.pending_stream(view) == int(consumer)
    assert _core.producer_stream(view) == int(producer)
    assert contents(view.copy(stream=int(consumer))) == VALUES.tobytes()
    del view


def test_a_producer_on_its_default_stream_is_on_the_legacy_stream(streams):
    producer, _ = streams
    tensor = producing(producer, busy=0)
    ExchangeTensor.current_stream[0] = 0      # a NULL cudaStream_t: the default stream
    view = ap.view(tensor)
    assert _core.pending_stream(view) == 1
    producer.synchronize()
    del view


def test_a_stream_the_device_cannot_take_is_refused_and_the_tensor_released(streams):
    producer, _ = streams
    tensor = producing(producer, busy=0)
    deleted = COUNTS["deleter"]
    with pytest.raises(ValueError, match="stream 0 is ambiguous on CUDA"):
        ap.view(tensor, stream=0)
    gc.collect()
    assert COUNTS["deleter"] - deleted == 1
    producer.synchronize()


def test_the_host_reads_after_the_pending_write(streams, slow_streams):
    producer, _ = streams
    view = ap.view(producing(producer))
    host = view.copy(device="cpu")
    np.testing.assert_array_equal(ap.to_numpy(host), VALUES)
    del view, host


@needs_simulator
def test_an_export_to_a_consumers_table_orders_its_current_stream_first(streams,
                                                                       slow_streams):
    producer, consumer = streams
    view = ap.view(producing(producer))               # pending on the producer's stream
    ExchangeTensor.current_stream[0] = int(consumer)  # the consumer's current stream
    made = COUNTS["to_py_object"]
    before = simulator.counters()
    out = _core.object_via_exchange_api(view, ExchangeTensor)
    calls = driver_calls(before)
    assert calls.get("cuEventRecord") == 1 and calls.get("cuStreamWaitEvent") == 1
    assert calls.get("host_synchronizations", 0) == 0
    assert type(out) is ExchangeTensor and COUNTS["to_py_object"] - made == 1
    assert (out.ptr, out.shape, out.strides) == (view.ptr, view.shape, view.strides)
    # the consumer's stream reads the write (it waited on the GPU)
    copy = ap.view(out, stream=int(consumer)).copy(stream=int(consumer))
    assert contents(copy) == VALUES.tobytes()
    del out, copy, view


@needs_simulator
def test_an_export_of_nothing_pending_asks_no_stream(streams):
    producer, _ = streams
    view = ap.view(producing(producer, busy=0))
    producer.synchronize()
    _core.set_pending_stream(view, None)          # as after a host wait
    asked = COUNTS["current_work_stream"]
    before = simulator.counters()
    out = _core.object_via_exchange_api(view, ExchangeTensor)
    assert COUNTS["current_work_stream"] == asked and driver_calls(before) == {}
    del out, view


def test_a_failing_current_work_stream_is_a_buffer_error_and_the_tensor_released(streams,
                                                                                monkeypatch):
    producer, _ = streams
    tensor = producing(producer, busy=0)
    monkeypatch.setattr(ExchangeTensor, "fail_work_stream", True)
    deleted = COUNTS["deleter"]
    # a BufferError naming the call (never the producer's raw error): ap.view then tries
    # __dlpack__, which this producer refuses, and the table's refusal is the one raised
    with pytest.raises(BufferError, match="current_work_stream failed"):
        ap.view(tensor)
    with pytest.raises(BufferError, match="current_work_stream failed"):
        ap.view(tensor, stream=2)
    gc.collect()
    assert COUNTS["deleter"] - deleted == 2   # one tensor per try, each released once
    producer.synchronize()


def test_a_pytorch_without_cuda_refuses_a_cuda_view_at_once(streams):
    torch = pytest.importorskip("torch")
    if torch.version.cuda or torch.version.hip:
        pytest.skip("this PyTorch is built for GPUs: it takes CUDA Views")
    producer, _ = streams
    view = ap.view(producing(producer, busy=0))
    # PyTorch's own table would make a cuda:0 tensor that fails at first use; its
    # from_dlpack refuses at once, as before issue 42
    with pytest.raises((AssertionError, RuntimeError, BufferError), match="CUDA|cuda"):
        ap.to_torch(view)
    producer.synchronize()
    del view


def test_a_table_written_in_c_is_imported_the_same_and_its_deleter_runs_once(streams,
                                                                            slow_streams):
    # The benchmark's producer of a compiled table (tests/helpers/exchange_table.c, as
    # PyTorch's is C++): the same import — its current work stream pending on the View, the
    # memory shared, its managed tensor deleted once when the View goes.
    import compiled_exchange_producer as compiled
    if compiled.unavailable() is not None:
        pytest.skip(f"the compiled exchange table: {compiled.unavailable()}")
    producer, consumer = streams
    array = DeviceArray(VALUES, stream=producer, busy=3)
    compiled.set_stream(0, int(producer))
    tensor = compiled.CompiledExchangeTensor(array)
    alive, made, asked = compiled.counts()
    view = ap.view(tensor)
    assert compiled.counts() == (alive + 1, made + 1, asked + 1)
    assert view.ptr == array.ptr and _core.pending_stream(view) == int(producer)
    copy = view.copy(stream=int(consumer))   # ordered after the pending write
    consumer.synchronize()
    assert contents(copy) == VALUES.tobytes()
    del view, copy
    gc.collect()   # the copy's dead block holds its source until the pool's next return
    memory = cuda_driver.driver.memory
    memory.return_held(memory.result_pool(0), memory.result_pool(0).take())
    gc.collect()
    assert compiled.counts()[0] == alive
    compiled.set_stream(0, 0)
    del tensor
    producer.synchronize()
    array.free()


@pytest.mark.parametrize("kind", ["device", "pinned"])
def test_to_torch_of_gpu_memory_takes_the_fast_path_and_answers_as_the_general_one(
        streams, monkeypatch, kind):
    # to_torch's fast path (_core_convert.pxi) serves Views on any device: it ends in the
    # same _torch_tensor_of as the general path (stream order included), so a GPU View
    # meets the same answer — here this PyTorch's own, a CPU build's refusal or tensor —
    # without arrayport's Python.
    torch = pytest.importorskip("torch")
    from arrayport.libraries import _torch as torch_adapter
    producer, _ = streams
    array = DeviceArray(VALUES, stream=producer, busy=0, kind=kind)
    producer.synchronize()
    view = ap.view(array) if kind == "device" else _core.view_from_pointer(
        array.ptr, VALUES.shape, None, "float32", readonly=False, owner=array, device=(3, 0),
        protocol="test")
    answers = []
    for convert in (ap.to_torch, torch_adapter.to_torch_general):
        general = []
        real = torch_adapter.to_torch_general
        monkeypatch.setattr(torch_adapter, "to_torch_general",   # (the hook's, by name)
                            lambda *a, **k: general.append(1) or real(*a, **k))
        try:
            tensor = convert(view)
        except Exception as error:   # a CPU build refuses CUDA memory: its own words
            answers.append((type(error), str(error)))
        else:
            answers.append((tensor.device.type, tensor.data_ptr() == view.ptr,
                            tensor.tolist() if tensor.device.type == "cpu" else None))
            del tensor
        monkeypatch.undo()
        if convert is ap.to_torch:
            assert general == [], "the fast path took it"
    assert answers[0] == answers[1], answers
    if not (torch.version.cuda or torch.version.hip) and kind == "device":
        assert issubclass(answers[0][0], (AssertionError, RuntimeError, BufferError))
    del view
    gc.collect()
    array.free()
