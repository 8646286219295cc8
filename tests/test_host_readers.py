"""The host-reader rule (issue 40), on any machine: before the host touches a View's memory
with GPU work pending on it — pinned memory an asynchronous copy is still writing — it
waits for that work, through every door (tests/helpers/host_forms.py lists them), in one
place (``_host_wait_for_pending`` in _core_streams.pxi); and nothing waits when nothing is
pending.

The pinned View here is NumPy memory labelled ``cuda_host`` with work recorded as pending
on stream 5, and the CUDA driver's ``synchronize`` is replaced by a recorder: the test
judges the decision (the host waited for stream 5 of device 0 before the form returned).
tests/test_gpu_host_readers.py holds the same forms to the values on the CUDA driver
simulator, where the write is really still pending."""

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core, _cuda_driver
from host_forms import HOST_FORMS, NOT_HOST_READERS, public_doors
from optional import installed

VALUES = np.arange(12, dtype=np.float32)
PENDING = 5


class HostWaits:
    """The CUDA driver's host waits, recorded and not run."""

    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(_cuda_driver.driver, "synchronize",
                            lambda ordinal, stream: self.calls.append((ordinal, stream)))


def pinned_with_pending_work(values=VALUES):
    """``values`` as a writable ``cuda_host`` View with work pending on stream PENDING."""
    memory = np.array(values)
    view = _core.view_from_pointer(memory.ctypes.data, memory.shape, None, str(memory.dtype),
                                   readonly=False, owner=memory, device=(3, 0),
                                   protocol="test")
    _core.set_pending_stream(view, PENDING)
    return view


@pytest.fixture(params=HOST_FORMS, ids=[form.name for form in HOST_FORMS])
def form(request):
    """Each host form that runs without a driver."""
    form = request.param
    if form.needs_gpu:
        pytest.skip("allocates through the driver: tests/test_gpu_host_readers.py")
    if form.attribute == "to_torch" and not installed("torch"):
        pytest.skip("needs torch (the [test] extra)")
    return form


def test_every_host_form_waits_for_the_pending_work_first(monkeypatch, form):
    waits = HostWaits(monkeypatch)
    values = form.read(pinned_with_pending_work())
    np.testing.assert_array_equal(values, VALUES)
    assert (0, PENDING) in waits.calls, f"{form.name} read pinned memory without waiting"


def test_nothing_waits_when_nothing_is_pending(monkeypatch, form):
    waits = HostWaits(monkeypatch)
    view = pinned_with_pending_work()
    _core.set_pending_stream(view, None)
    np.testing.assert_array_equal(form.read(view), VALUES)
    assert waits.calls == []


def test_no_wait_with_implicit_synchronization_off(monkeypatch):
    """Off, the caller orders its own reads (docs/devices.md): arrayport waits for nothing."""
    waits = HostWaits(monkeypatch)
    with ap.no_implicit_sync():
        np.testing.assert_array_equal(np.asarray(pinned_with_pending_work()), VALUES)
    assert waits.calls == []


def test_the_rule_is_not_asked_of_a_layout_operation_until_the_host_reads(monkeypatch):
    """Metadata operations keep the pending stream and wait for nothing; the read waits."""
    waits = HostWaits(monkeypatch)
    view = pinned_with_pending_work()[::2].T
    assert waits.calls == [] and _core.pending_stream(view) == PENDING
    np.testing.assert_array_equal(np.asarray(view), VALUES[::2])
    assert waits.calls == [(0, PENDING)]


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
