"""The host-reader rule (issue 40), on any machine: before the host touches a View's memory
with GPU work pending on it — pinned memory an asynchronous copy is still writing — it
waits for that work, through every door (tests/helpers/host_forms.py lists them), in one
place (``_host_wait_for_pending`` in _core_streams.pxi); and nothing waits when nothing is
pending.

The pinned View here is NumPy memory labelled ``cuda_host``, holding zeros, with work
recorded as pending on stream 5; the CUDA driver's ``synchronize`` is replaced by a
stand-in that records the wait and then lands the pending write (the values appear in the
memory), as the GPU's work completes when the host waits for it. A form that reads before
it waits reads zeros; one that never waits reads zeros and records nothing.
tests/test_gpu_host_readers.py holds the same forms to the values on the CUDA driver
simulator, where the write is really still pending."""

import ctypes

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from arrayport.gpu import cuda as cuda_driver
from host_forms import HOST_FORMS, NOT_HOST_READERS, public_doors
from optional import installed

VALUES = np.arange(12, dtype=np.float32)
PENDING = 5


class HostWaits:
    """The CUDA driver's host waits, recorded; a wait for stream PENDING lands the pending
    write of every View made by ``pinned_with_pending_work`` since."""

    def __init__(self, monkeypatch):
        self.calls, self.pending_writes = [], []
        monkeypatch.setattr(cuda_driver.driver, "synchronize", self.synchronize)

    def synchronize(self, ordinal, stream):
        self.calls.append((ordinal, stream))
        if stream == PENDING:
            for memory in self.pending_writes:
                memory[...] = VALUES

    def pinned_with_pending_work(self):
        """A writable ``cuda_host`` View of zeros whose write of VALUES is pending on stream
        PENDING (it lands when the host waits for that stream)."""
        memory = np.zeros_like(VALUES)
        view = _core.view_from_pointer(memory.ctypes.data, memory.shape, None,
                                       str(memory.dtype), readonly=False, owner=memory,
                                       device=(3, 0), protocol="test")
        _core.set_pending_stream(view, PENDING)
        self.pending_writes.append(memory)
        return view


@pytest.fixture
def waits(monkeypatch):
    return HostWaits(monkeypatch)


@pytest.fixture(params=HOST_FORMS, ids=[form.name for form in HOST_FORMS])
def form(request):
    """Each host form that runs without a driver."""
    form = request.param
    if form.needs_gpu:
        pytest.skip("allocates through the driver: tests/test_gpu_host_readers.py")
    if form.attribute == "to_torch" and not installed("torch"):
        pytest.skip("needs torch (the [test] extra)")
    return form


def test_every_host_form_waits_for_the_pending_work_first(waits, form):
    values = form.read(waits.pinned_with_pending_work())
    np.testing.assert_array_equal(values, VALUES,
                                  err_msg=f"{form.name} read before the write landed")
    assert (0, PENDING) in waits.calls


def test_nothing_waits_when_nothing_is_pending(waits, form):
    view = waits.pinned_with_pending_work()
    waits.synchronize(0, PENDING)          # the write is done, and the View knows nothing
    _core.set_pending_stream(view, None)
    waits.calls.clear()
    np.testing.assert_array_equal(form.read(view), VALUES)
    assert waits.calls == []


def test_once_waited_a_view_waits_no_more(waits):
    """The work is done once waited for: later reads do not wait again (for unrelated work
    queued since, or on a stream its producer has destroyed); the stream is still known
    as one that may write the data, so copies order it after themselves."""
    view = waits.pinned_with_pending_work()
    np.testing.assert_array_equal(np.asarray(view), VALUES)
    np.testing.assert_array_equal(memoryview(view), VALUES)
    assert waits.calls == [(0, PENDING)]
    assert _core.pending_stream(view) is None and _core.producer_stream(view) == PENDING
    ordered = []

    class Driver:
        def make_stream_wait(self, *args):
            ordered.append(args)
    _core.order_writers_after_copy(Driver(), view, 0, 9)
    assert ordered == [(0, PENDING, 9, 0)], "the producer's stream waits for the copy"


def test_no_wait_with_implicit_synchronization_off(waits):
    """Off, the caller orders its own reads (docs/devices.md): arrayport waits for nothing."""
    with ap.no_implicit_sync():
        np.asarray(waits.pinned_with_pending_work())
    assert waits.calls == []


def test_the_rule_is_not_asked_of_a_layout_operation_until_the_host_reads(waits):
    """Metadata operations keep the pending stream and wait for nothing; the read waits."""
    view = waits.pinned_with_pending_work()[::2].T
    assert waits.calls == [] and _core.pending_stream(view) == PENDING
    np.testing.assert_array_equal(np.asarray(view), VALUES[::2])
    assert waits.calls == [(0, PENDING)]


# ---- the doors for C and for the frameworks' importers ------------------------------------------

def _values_at(address):
    return np.ctypeslib.as_array((ctypes.c_float * VALUES.size).from_address(address)).copy()


@pytest.mark.parametrize("door", ["capi_import", "capi_dltensor", "exchange_import_with",
                                  "exchange_dltensor_with"])
def test_the_c_doors_wait_before_handing_out_the_pointer(waits, capi_consumer, door):
    """arrayport's C API (to_managed with no stream, view_dltensor) and the DLPack exchange
    API (View's table): a C consumer reads the address it is given at once."""
    view = waits.pinned_with_pending_work()
    call = getattr(capi_consumer, door)
    described = call(view, view) if door.startswith("exchange") else call(view)
    np.testing.assert_array_equal(_values_at(described["data"]), VALUES)
    assert (0, PENDING) in waits.calls


def test_the_legacy_capsule_for_immutable_consumers_waits(waits):
    """What ap.to(x, "jax") hands JAX's importer: a legacy capsule, ordered as __dlpack__."""
    view = waits.pinned_with_pending_work()
    capsule = _core.legacy_capsule_for_immutable_consumer(view)
    np.testing.assert_array_equal(np.asarray(ap.view(capsule)), VALUES)
    assert (0, PENDING) in waits.calls


def test_every_door_is_a_host_form_or_says_why_it_is_not():
    """A new public attribute of View, or callable of arrayport, must be added to
    tests/helpers/host_forms.py: to HOST_FORMS (and then it must wait), or to
    NOT_HOST_READERS with the reason it reads no host memory."""
    forms = {form.attribute for form in HOST_FORMS}
    unclassified = public_doors() - forms - set(NOT_HOST_READERS)
    assert not unclassified, f"doors neither tested as host forms nor explained: {unclassified}"
    assert not forms & set(NOT_HOST_READERS)
    stale = set(NOT_HOST_READERS) - public_doors()
    assert not stale, f"NOT_HOST_READERS names what is no longer a door: {stale}"


def test_the_enumeration_sees_a_new_door(monkeypatch):
    """The check above can fail: a door nobody classified is found."""
    monkeypatch.setattr(ap, "__all__", [*ap.__all__, "peek"])
    monkeypatch.setattr(ap, "peek", lambda view: bytes(memoryview(view)), raising=False)
    forms = {form.attribute for form in HOST_FORMS}
    assert public_doors() - forms - set(NOT_HOST_READERS) == {"peek"}
