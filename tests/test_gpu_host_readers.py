"""The host-reader rule on the CUDA driver simulator (issue 40, ``pytest -m gpu``): pinned
memory that an asynchronous copy is still writing, imported through the CUDA Array
Interface with the producer_stream's stream (as CuPy and Numba pinned arrays give it), is read
through every door of tests/helpers/host_forms.py — and each must read the written values,
not the zeros that were there before. tests/test_host_readers.py holds the same doors to the
decision on any machine."""

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from host_forms import HOST_FORMS  # noqa: E402
from on_simulator import (SIMULATED, nothing_leaks, producer_stream,  # noqa: E402,F401
                          slow_streams)
from optional import installed  # noqa: E402
from sim_arrays import DeviceArray  # noqa: E402

VALUES = np.arange(12, dtype=np.float32)


def pinned_being_written(stream):
    """(View, memory): pinned memory of VALUES whose write is still pending on ``stream``
    (behind two other items of work), imported with the producer_stream's stream."""
    memory = DeviceArray(VALUES, kind="pinned", stream=stream, busy=2)
    view = ap.view(memory)
    pending = int(stream) if ap.implicit_sync_enabled() else None
    assert str(view.device) == "cuda_host" and _core.pending_stream(view) == pending
    return view, memory


@pytest.mark.parametrize("form", HOST_FORMS, ids=[form.name for form in HOST_FORMS])
def test_every_host_form_reads_what_the_gpu_wrote(form, slow_streams, producer_stream, nothing_leaks):
    if form.attribute == "to_torch" and not installed("torch"):
        pytest.skip("needs torch (the [test] extra)")
    view, memory = pinned_being_written(producer_stream)
    try:
        np.testing.assert_array_equal(form.read(view), VALUES,
                                      err_msg=f"{form.name} read before the write was done")
        del view
    finally:
        producer_stream.synchronize()
        memory.free()


@pytest.mark.skipif(not SIMULATED, reason="on a GPU the race may be won by luck")
def test_the_race_is_real_without_the_rule(slow_streams, producer_stream, nothing_leaks):
    """With implicit synchronization off, nothing waits — and the host reads the zeros
    that were there: the rule is what makes the reads above right."""
    with ap.no_implicit_sync():
        view, memory = pinned_being_written(producer_stream)
        try:
            assert not np.array_equal(np.array(memoryview(view)), VALUES)
        finally:
            del view
            producer_stream.synchronize()
            memory.free()


def test_a_view_read_once_survives_its_producer_destroying_the_stream(nothing_leaks):
    """Once the host has waited, the View has nothing pending: its producer may destroy
    the stream (its work is done), and later reads neither fail nor wait."""
    from sim_arrays import Stream
    stream = Stream(0)
    view, memory = pinned_being_written(stream)
    try:
        np.testing.assert_array_equal(np.asarray(view), VALUES)
        stream.synchronize()
        stream.close()
        np.testing.assert_array_equal(np.array(memoryview(view)), VALUES)
        np.testing.assert_array_equal(view.host_copy(), VALUES)
        del view
    finally:
        memory.free()
