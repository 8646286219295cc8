"""A stand-in for the CUDA driver on machines without a GPU: "device memory" is host
memory, every transfer is a memmove done at once, and every call is logged in order, so
tests can check what arrayport asks of a driver — which copies, on which stream, and
which event waits and host synchronizations come before and after them. The real driver
is exercised by ``pytest -m gpu``."""

from __future__ import annotations

import ctypes

from arrayport import _core, _cuda_driver

DRIVER_FUNCTIONS = ("allocate_device", "allocate_pinned", "copy_async", "copy_2d_async",
                    "copy_peer_async", "make_stream_wait", "synchronize", "locate_pointer",
                    "current_device", "max_pitch")


class FakeMemory:
    def __init__(self, nbytes, kind):
        self.block = ctypes.create_string_buffer(max(nbytes, 1))
        self.address = ctypes.addressof(self.block)
        self.nbytes, self.kind = nbytes, kind


class FakeCuda:
    def __init__(self, monkeypatch):
        self.log = []
        for name in DRIVER_FUNCTIONS:
            monkeypatch.setattr(_cuda_driver.driver, name, getattr(self, name))

    def calls(self, name):
        return [entry[1:] for entry in self.log if entry[0] == name]

    def allocate_device(self, ordinal, nbytes, managed=False):
        self.log.append(("allocate_device", ordinal, nbytes) + (("managed",) if managed else ()))
        return FakeMemory(nbytes, ("managed" if managed else "device", ordinal))

    def allocate_pinned(self, nbytes):
        self.log.append(("allocate_pinned", nbytes))
        return FakeMemory(nbytes, "pinned")

    def copy_async(self, ordinal, dst, src, nbytes, stream):
        self.log.append(("copy_async", ordinal, nbytes, stream))
        ctypes.memmove(dst, src, nbytes)

    def copy_2d_async(self, ordinal, dst, dst_pitch, src, src_pitch, width, height, stream):
        assert src_pitch >= width and dst_pitch >= width, "the driver refuses such pitches"
        self.log.append(("copy_2d_async", ordinal, width, height, stream))
        for row in range(height):
            ctypes.memmove(dst + row * dst_pitch, src + row * src_pitch, width)

    def max_pitch(self, ordinal):
        return 2**31 - 1

    def copy_peer_async(self, dst_ordinal, dst, src_ordinal, src, nbytes, stream):
        self.log.append(("copy_peer_async", dst_ordinal, src_ordinal, nbytes, stream))
        ctypes.memmove(dst, src, nbytes)

    def make_stream_wait(self, ordinal, consumer, producer, producer_ordinal=None):
        if consumer == producer and producer_ordinal in (None, ordinal):
            return   # the driver's own rule: the same stream of one device waits for nothing
        self.log.append(("make_stream_wait", ordinal, consumer, producer))

    def synchronize(self, ordinal, stream):
        self.log.append(("synchronize", ordinal, stream))

    def locate_pointer(self, pointer):
        return (2, 0)

    def current_device(self):
        return 0


def device_view(host, device=(2, 0), pending_stream=None):
    """A View of ``host``'s memory labelled ``device``, with work pending on
    ``pending_stream`` (as a CUDA Array Interface import with a stream entry leaves it)."""
    view = _core.view_from_pointer(
        host.__array_interface__["data"][0], host.shape, host.strides, host.dtype,
        readonly=not host.flags.writeable, owner=host, device=device, protocol="test")
    if pending_stream is not None:
        _core.set_pending_stream(view, pending_stream)
    return view


def contents(view):
    """The bytes of a C-contiguous View in (fake) device memory."""
    assert view.is_c_contiguous
    return ctypes.string_at(view.ptr, view.nbytes)
