"""What arrayport asks of the CUDA driver, recorded while the driver does it: for the GPU
suite (``pytest -m gpu``), on the CUDA driver simulator or a GPU. Each driver method
arrayport calls is logged with the arguments a test judges (which device, how many bytes,
which streams) and then run for real — so a test checks both the decision (the copy went on
the caller's stream, the consumer's stream waited for the producer's) and that the driver
accepted it and the bytes arrived.

``device_array`` puts a NumPy array's values, layout included, into new memory of a device
(CUDA, pinned or managed), written by an upload still pending on a stream when asked;
``contents`` reads a C-contiguous View's bytes back through the driver itself, after every
stream of its device has finished."""

from __future__ import annotations

import ctypes

import numpy as np

from arrayport import _core
from arrayport.gpu import cuda as cuda_driver
from sim_arrays import Context, DeviceArray, check, cuda

# name -> the arguments worth judging, from those arrayport passed
# (ordinary and pinned allocations are logged where the memory policy, gpu/held_memory.py,
# asks the driver's memory floor for them: a result without a pool is one too)
FORMATS = {
    "allocate_ordinary": lambda ordinal, nbytes, managed:
        (ordinal, nbytes) + (("managed",) if managed else ()),
    "allocate_host": lambda nbytes: (nbytes,),
    "locate_pointer": lambda ptr: (),
    "allocate_result": lambda ordinal, nbytes, stream: (ordinal, nbytes, stream),
    "copy_async": lambda ordinal, dst, src, nbytes, stream: (ordinal, nbytes, stream),
    "copy_2d_async": lambda ordinal, dst, dst_pitch, src, src_pitch, width, height, stream:
        (ordinal, width, height, stream),
    "copy_peer_async": lambda dst_ordinal, dst, src_ordinal, src, nbytes, stream:
        (dst_ordinal, src_ordinal, nbytes, stream),
    "make_stream_wait": lambda ordinal, consumer, producer, producer_ordinal=None:
        (ordinal, consumer, producer),
    "synchronize": lambda ordinal, stream: (ordinal, stream),
    "launch_kernel": lambda ordinal, module, kernel, grid, block, params, stream:
        (ordinal, kernel, stream),
}

# the floor's calls, under the names the tests judge them by
_LOGGED_AS = {"allocate_ordinary": "allocate_device", "allocate_host": "allocate_pinned"}


class DriverLog:
    """Every call arrayport makes of the CUDA driver object, in order, as (name, *judged)."""

    def __init__(self, monkeypatch):
        self.log = []
        driver = cuda_driver.driver
        for name, judged in FORMATS.items():
            monkeypatch.setattr(driver, name, self._recording(name, judged,
                                                               getattr(driver, name)))

    def _recording(self, name, judged, real):
        logged = _LOGGED_AS.get(name, name)

        def call(*args, **kwargs):
            if not (name == "make_stream_wait" and _waits_for_itself(*args, **kwargs)):
                self.log.append((logged, *judged(*args, **kwargs)))
            return real(*args, **kwargs)
        return call

    def calls(self, name):
        return [entry[1:] for entry in self.log if entry[0] == name]


def _waits_for_itself(ordinal, consumer, producer, producer_ordinal=None):
    """The driver's own rule: a stream of one device waits for nothing of its own."""
    return consumer == producer and producer_ordinal in (None, ordinal)


_KINDS = {2: "device", 3: "pinned", 13: "managed"}


class _Freed:
    """Owns a DeviceArray for the View made over it: freed when the View goes."""

    def __init__(self, array):
        self.array = array

    def __del__(self):
        self.array.free()


def device_array(host, device=(2, 0), pending_on=None):
    """A View of ``host``'s values and layout in new memory of ``device`` (a DLPack (type,
    id): CUDA, pinned or managed), its upload still pending on the stream ``pending_on``
    (a sim_arrays.Stream) when given — as a CUDA Array Interface import leaves it."""
    root = host
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = host.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    array = DeviceArray(np.ascontiguousarray(root), device=device[1], stream=pending_on,
                        kind=_KINDS[device[0]])
    if pending_on is None:   # no pending work, truly: the upload is done before we return
        with Context(device[1] if device[0] == 2 else 0):
            check(cuda().cuCtxSynchronize(), "cuCtxSynchronize")
    view = _core.view_from_pointer(array.ptr + offset, host.shape, host.strides, host.dtype,
                                   readonly=not host.flags.writeable, owner=_Freed(array),
                                   device=device, protocol="test")
    if pending_on is not None:
        _core.set_pending_stream(view, int(pending_on))
    return view


def contents(view):
    """The bytes of a C-contiguous View, read through the driver once every stream of its
    device is done (host views: read as they are)."""
    assert view.is_c_contiguous
    if view.device.type.label == "cpu":
        return ctypes.string_at(view.ptr, view.nbytes)
    library = cuda()
    out = ctypes.create_string_buffer(max(view.nbytes, 1))
    ordinal = view.device.id if view.device.type.label == "cuda" else 0
    with Context(ordinal):
        check(library.cuCtxSynchronize(), "cuCtxSynchronize")
        if view.nbytes:
            check(library.cuMemcpyDtoH_v2(out, view.ptr, view.nbytes), "cuMemcpyDtoH")
    return out.raw[:view.nbytes]
