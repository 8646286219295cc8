"""Host memory labelled as another device, for the decisions arrayport makes before it asks
any driver: which devices it can copy between, when an export needs no stream wait, what a
producer is asked for. A deliberate lie, kept where a rule is tested without a driver (the
tests that use it also run with no CUDA driver at all, ``without_cuda``); whatever reaches a
driver is tested on the CUDA driver simulator (tests/test_gpu_copies_and_streams.py)."""

from __future__ import annotations

from arrayport import _core


def device_view(host, device=(2, 0)):
    """A View of ``host``'s memory labelled ``device``."""
    return _core.view_from_pointer(
        host.__array_interface__["data"][0], host.shape, host.strides, host.dtype,
        readonly=not host.flags.writeable, owner=host, device=device, protocol="test")
