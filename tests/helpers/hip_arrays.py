"""A ROCm producer for the GPU suite on the HIP runtime simulator (issue 54): device arrays
made with the HIP runtime itself, through ctypes — the counterpart of sim_arrays.py for
CUDA. ``DeviceArray`` offers the CUDA Array Interface v3 (as hip-python and CuPy's ROCm
build do for HIP memory) with the stream its last write was enqueued on, that write still
pending (the simulator runs streams asynchronously).

Everything here talks to the process's libamdhip64.so, which ``pytest -m gpu`` makes the
simulator (tests/conftest.py). HIP has no contexts: each call works on the calling thread's
current device, switched here with hipSetDevice and restored."""

from __future__ import annotations

import contextlib
import ctypes
import os

import numpy as np

VOIDP = ctypes.c_void_p
NON_BLOCKING = 1          # hipStreamNonBlocking
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2   # hipMemcpyKind
DEFAULT = 4               # hipMemcpyDefault: the direction read from the pointers
DISABLE_TIMING = 0x2      # hipEventDisableTiming


def hip():
    """The process's HIP runtime (the simulator under ``pytest -m gpu``)."""
    library = ctypes.CDLL(os.environ.get("HIPSIM_LIBRARY", "libamdhip64.so"))
    for name, argtypes in {
            "hipSetDevice": [ctypes.c_int], "hipGetDevice": [ctypes.POINTER(ctypes.c_int)],
            "hipMalloc": [ctypes.POINTER(VOIDP), ctypes.c_size_t], "hipFree": [VOIDP],
            "hipHostMalloc": [ctypes.POINTER(VOIDP), ctypes.c_size_t, ctypes.c_uint],
            "hipHostFree": [VOIDP],
            "hipStreamCreateWithFlags": [ctypes.POINTER(VOIDP), ctypes.c_uint],
            "hipStreamDestroy": [VOIDP], "hipStreamSynchronize": [VOIDP],
            "hipEventCreateWithFlags": [ctypes.POINTER(VOIDP), ctypes.c_uint],
            "hipEventRecord": [VOIDP, VOIDP], "hipEventDestroy": [VOIDP],
            "hipStreamWaitEvent": [VOIDP, VOIDP, ctypes.c_uint],
            "hipMemcpyAsync": [VOIDP, VOIDP, ctypes.c_size_t, ctypes.c_int, VOIDP]}.items():
        getattr(library, name).argtypes = argtypes
    return library


def check(status, call):
    if status != 0:
        raise RuntimeError(f"{call} failed with HIP error {status}")


@contextlib.contextmanager
def on_device(runtime, device):
    previous = ctypes.c_int()
    check(runtime.hipGetDevice(ctypes.byref(previous)), "hipGetDevice")
    check(runtime.hipSetDevice(device), "hipSetDevice")
    try:
        yield
    finally:
        runtime.hipSetDevice(previous.value)


class Stream:
    """A non-blocking stream of device ``n`` (its handle is ``int(stream)``)."""

    def __init__(self, device=0):
        self.device, self.runtime = device, hip()
        self.handle = VOIDP()
        with on_device(self.runtime, device):
            check(self.runtime.hipStreamCreateWithFlags(ctypes.byref(self.handle),
                                                        NON_BLOCKING), "hipStreamCreate")

    def __int__(self):
        return self.handle.value

    def synchronize(self):
        check(self.runtime.hipStreamSynchronize(self.handle), "hipStreamSynchronize")

    def close(self):
        if self.handle:
            self.runtime.hipStreamDestroy(self.handle)
            self.handle = VOIDP()


def make_wait(device, consumer: int, producer: int) -> None:
    """Stream ``consumer`` (a handle; 0 the null stream) waits for ``producer``'s work so
    far: an event recorded and waited on, as a producer's ``__dlpack__`` does."""
    runtime, event = hip(), VOIDP()
    with on_device(runtime, device):
        check(runtime.hipEventCreateWithFlags(ctypes.byref(event), DISABLE_TIMING),
              "hipEventCreateWithFlags")
        check(runtime.hipEventRecord(event, producer or None), "hipEventRecord")
        check(runtime.hipStreamWaitEvent(consumer or None, event, 0), "hipStreamWaitEvent")
        check(runtime.hipEventDestroy(event), "hipEventDestroy")


def read_on(stream: int, device, pointer, shape, dtype):
    """The values at device ``pointer`` as a copy queued on stream ``stream`` (a handle; 0
    the null stream) reads them, in that stream's order alone (then only that stream is
    waited for): what a consumer working on ``stream`` sees."""
    runtime, out = hip(), np.empty(shape, dtype)
    with on_device(runtime, device):
        check(runtime.hipMemcpyAsync(out.ctypes.data, pointer, out.nbytes, DEFAULT,
                                     stream or None), "hipMemcpyAsync")
        check(runtime.hipStreamSynchronize(stream or None), "hipStreamSynchronize")
    return out


class DeviceArray:
    """``host``'s values in new memory of device ``device`` (``kind`` "device" or "pinned"),
    written by an asynchronous copy on ``stream`` — still pending when this returns, so a
    consumer that does not order itself after ``stream`` reads zeros (``busy`` earlier
    copies on the stream make the write later still)."""

    def __init__(self, host, device=0, stream=None, kind="device", busy=0):
        host = np.ascontiguousarray(host)
        self.device, self.kind, self.runtime = device, kind, hip()
        self.shape, self.dtype, self.nbytes = host.shape, host.dtype, max(host.nbytes, 1)
        self.stream = stream
        pointer = VOIDP()
        with on_device(self.runtime, device):
            if kind == "pinned":
                check(self.runtime.hipHostMalloc(ctypes.byref(pointer), self.nbytes, 0),
                      "hipHostMalloc")
            else:
                check(self.runtime.hipMalloc(ctypes.byref(pointer), self.nbytes), "hipMalloc")
            self.ptr = pointer.value
            on = stream.handle if stream is not None else None
            self._host = host   # alive until the asynchronous copies have run
            self._zeros = np.zeros(self.nbytes, np.uint8)
            for _ in range(busy):   # earlier work on the stream: the write comes late
                check(self.runtime.hipMemcpyAsync(self.ptr, self._zeros.ctypes.data,
                                                  self.nbytes, DEFAULT, on),
                      "hipMemcpyAsync")
            check(self.runtime.hipMemcpyAsync(self.ptr, host.ctypes.data, host.nbytes,
                                              DEFAULT, on), "hipMemcpyAsync")

    @property
    def __cuda_array_interface__(self):
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (self.ptr, False), "strides": None,
                "stream": int(self.stream) if self.stream is not None else None}

    def read(self):
        """The values now in the memory, read on the null stream (which waits for nothing
        on non-blocking streams)."""
        out = np.empty(self.shape, self.dtype)
        with on_device(self.runtime, self.device):
            check(self.runtime.hipMemcpyAsync(out.ctypes.data, self.ptr, out.nbytes,
                                              DEVICE_TO_HOST, None), "hipMemcpyAsync")
            check(self.runtime.hipStreamSynchronize(None), "hipStreamSynchronize")
        return out

    def free(self):
        """Free the memory after the stream it was written on, as a GPU library's allocator
        does (hipFree itself also waits for the device's work)."""
        if self.ptr:
            if self.stream is not None and self.stream.handle:
                self.stream.synchronize()
            with on_device(self.runtime, self.device):
                if self.kind == "pinned":
                    check(self.runtime.hipHostFree(self.ptr), "hipHostFree")
                else:
                    check(self.runtime.hipFree(self.ptr), "hipFree")
            self.ptr = 0
