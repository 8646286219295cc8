"""A CUDA producer for the GPU suite on the driver simulator (issue 32): device arrays made
with the driver API itself, through ctypes — what a GPU library does underneath, without
kernels. ``DeviceArray`` offers the CUDA Array Interface v3 with the stream its last write
was enqueued on (that write still pending: the simulator runs streams asynchronously), as
CuPy and Numba do.

Everything here talks to the process's libcuda.so.1, which ``pytest -m gpu`` makes the
simulator (tests/conftest.py)."""

from __future__ import annotations

import ctypes
import os

import numpy as np

u64, handle = ctypes.c_uint64, ctypes.c_void_p
NON_BLOCKING = 1


def cuda():
    """The process's CUDA driver (the simulator under ``pytest -m gpu``)."""
    library = ctypes.CDLL(os.environ.get("CUDASIM_LIBRARY", "libcuda.so.1"))
    for name, argtypes in {
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(handle), ctypes.c_int],
            "cuCtxPushCurrent_v2": [handle], "cuCtxPopCurrent_v2": [ctypes.POINTER(handle)],
            "cuMemAlloc_v2": [ctypes.POINTER(u64), ctypes.c_size_t], "cuMemFree_v2": [u64],
            "cuMemAllocManaged": [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.c_uint],
            "cuMemHostAlloc": [ctypes.POINTER(handle), ctypes.c_size_t, ctypes.c_uint],
            "cuMemFreeHost": [handle],
            "cuMemcpyHtoDAsync_v2": [u64, handle, ctypes.c_size_t, handle],
            "cuMemcpyDtoH_v2": [handle, u64, ctypes.c_size_t],
            "cuMemcpyDtoHAsync_v2": [handle, u64, ctypes.c_size_t, handle],
            "cuMemsetD8Async": [u64, ctypes.c_ubyte, ctypes.c_size_t, handle],
            "cuStreamCreate": [ctypes.POINTER(handle), ctypes.c_uint],
            "cuStreamDestroy_v2": [handle], "cuStreamSynchronize": [handle],
            "cuEventCreate": [ctypes.POINTER(handle), ctypes.c_uint],
            "cuEventRecord": [handle, handle], "cuEventDestroy_v2": [handle],
            "cuStreamWaitEvent": [handle, handle, ctypes.c_uint],
            "cudasim_set_delay_us": [ctypes.c_long]}.items():
        if name.startswith("cudasim_") and not hasattr(library, name):
            continue   # the simulator's own control: a real driver (ARRAYPORT_GPU=hardware)
        getattr(library, name).argtypes = argtypes
    check(library.cuInit(0), "cuInit")
    return library


def check(status, call):
    if status != 0:
        raise RuntimeError(f"{call} failed with CUDA error {status}")


_retained: dict[int, handle] = {}


class Context:
    """Device ``n``'s primary context current on this thread within ``with``. Retained
    once and never released, as a GPU library's runtime does (the driver destroys a
    primary context, with its memory and streams, at its last release)."""

    def __init__(self, device=0):
        self.device, self.driver = device, cuda()

    def __enter__(self):
        context = _retained.get(self.device)
        if context is None:
            context = handle()
            check(self.driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), self.device),
                  "cuDevicePrimaryCtxRetain")
            _retained[self.device] = context
        check(self.driver.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        return context

    def __exit__(self, *exc):
        self.driver.cuCtxPopCurrent_v2(ctypes.byref(handle()))


class Stream:
    """A non-blocking stream of device ``n`` (its handle is ``int(stream)``)."""

    def __init__(self, device=0):
        self.device, self.driver = device, cuda()
        self.handle = handle()
        with Context(device):
            check(self.driver.cuStreamCreate(ctypes.byref(self.handle), NON_BLOCKING),
                  "cuStreamCreate")

    def __int__(self):
        return self.handle.value

    def synchronize(self):
        with Context(self.device):
            check(self.driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def close(self):
        if self.handle:
            with Context(self.device):
                self.driver.cuStreamDestroy_v2(self.handle)
            self.handle = handle()


def make_wait(device, consumer: int, producer: int) -> None:
    """Stream ``consumer`` (a handle; 1 and 2 the legacy and per-thread default streams)
    waits for ``producer``'s work so far: an event recorded and waited on, as a producer's
    ``__dlpack__`` does."""
    driver, event = cuda(), handle()
    with Context(device):
        check(driver.cuEventCreate(ctypes.byref(event), 2), "cuEventCreate")   # no timing
        check(driver.cuEventRecord(event, producer), "cuEventRecord")
        check(driver.cuStreamWaitEvent(consumer, event, 0), "cuStreamWaitEvent")
        check(driver.cuEventDestroy_v2(event), "cuEventDestroy")


def read_on(stream: int, device, pointer, shape, dtype):
    """The values at device ``pointer`` as a copy queued on stream ``stream`` (a handle; 1
    and 2 the default streams) reads them, in that stream's order alone (then only that
    stream is waited for): what a consumer working on ``stream`` sees."""
    driver, out = cuda(), np.empty(shape, dtype)
    with Context(device):
        check(driver.cuMemcpyDtoHAsync_v2(out.ctypes.data, pointer, out.nbytes, stream),
              "cuMemcpyDtoHAsync")
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    return out


class DeviceArray:
    """``host``'s values in new device memory of device ``device`` (or ``kind`` "managed"
    / "pinned"), written by an asynchronous copy on ``stream`` — still pending when this
    returns, so a consumer that does not order itself after ``stream`` reads zeros
    (``busy`` earlier items of work on the stream make the write later still)."""

    def __init__(self, host, device=0, stream=None, kind="device", fill=None, busy=0):
        host = np.ascontiguousarray(host)
        self.device, self.kind, self.driver = device, kind, cuda()
        self.shape, self.dtype, self.nbytes = host.shape, host.dtype, max(host.nbytes, 1)
        self.stream = stream
        with Context(device):
            if kind == "pinned":
                pointer = handle()
                check(self.driver.cuMemHostAlloc(ctypes.byref(pointer), self.nbytes, 1),
                      "cuMemHostAlloc")
                self.ptr = pointer.value
            else:
                pointer = u64()
                allocate = (self.driver.cuMemAlloc_v2 if kind == "device" else
                            lambda p, n: self.driver.cuMemAllocManaged(p, n, 1))
                check(allocate(ctypes.byref(pointer), self.nbytes), f"allocate {kind}")
                self.ptr = pointer.value
            on = stream.handle if stream is not None else None
            for _ in range(busy):   # earlier work on the stream: the write comes late
                check(self.driver.cuMemsetD8Async(self.ptr, 0, self.nbytes, on),
                      "cuMemsetD8Async")
            if fill is not None:
                check(self.driver.cuMemsetD8Async(self.ptr, fill, self.nbytes, on),
                      "cuMemsetD8Async")
            else:
                self._host = host   # alive until the asynchronous copy has run
                check(self.driver.cuMemcpyHtoDAsync_v2(self.ptr, host.ctypes.data,
                                                       host.nbytes, on), "cuMemcpyHtoDAsync")

    @property
    def __cuda_array_interface__(self):
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (self.ptr, False), "strides": None,
                "stream": int(self.stream) if self.stream is not None else 1}

    def read(self):
        """The values now in device memory, read synchronously (after all pending work on
        the legacy default stream's rules: waits for nothing on non-blocking streams)."""
        out = np.empty(self.shape, self.dtype)
        with Context(self.device):
            check(self.driver.cuMemcpyDtoH_v2(out.ctypes.data, self.ptr, out.nbytes),
                  "cuMemcpyDtoH")
        return out

    def free(self):
        """Free the memory in the order of the stream it was written on, as a GPU library's
        allocator does (CuPy's, PyTorch's): the driver's free calls do not wait for work
        still using it (the simulator poisons freed memory), so this waits for the write
        and for what was ordered before the stream's later work (the consumers that made
        the stream wait for them, as arrayport's copies do)."""
        if self.ptr:
            with Context(self.device):
                on = self.stream.handle if self.stream is not None else None
                if on is None or on.value:   # a destroyed stream's work has all run
                    self.driver.cuStreamSynchronize(on)
                if self.kind == "pinned":
                    check(self.driver.cuMemFreeHost(self.ptr), "cuMemFreeHost")
                else:
                    check(self.driver.cuMemFree_v2(self.ptr), "cuMemFree")
            self.ptr = 0
