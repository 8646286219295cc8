"""The CUDA IPC calls of the driver, declared for ctypes: for the simulator's interprocess
tests (tests/test_cudasim_ipc.py), in the test process and in the child processes it starts
(which import this module alone, not the simulator's builder)."""

import contextlib
import ctypes
import json
import subprocess
import sys
import textwrap

u64, handle = ctypes.c_uint64, ctypes.c_void_p


class IpcHandle(ctypes.Structure):
    """CUipcMemHandle and CUipcEventHandle: 64 opaque bytes, passed by value."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class PointerExport(ctypes.Structure):
    """CUmemPoolPtrExportData: 64 opaque bytes, passed by pointer."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class Location(ctypes.Structure):
    """CUmemLocation."""
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AccessDesc(ctypes.Structure):
    """CUmemAccessDesc."""
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class PoolProps(ctypes.Structure):
    """CUmemPoolProps (88 bytes)."""
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("location", Location), ("win32SecurityAttributes", ctypes.c_void_p),
                ("reserved", ctypes.c_ubyte * 64)]


def declare(cuda):
    """The argument types of the calls these tests make (in either process)."""
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(handle), ctypes.c_int]
    cuda.cuCtxPushCurrent_v2.argtypes = [handle]
    cuda.cuStreamCreate.argtypes = [ctypes.POINTER(handle), ctypes.c_uint]
    cuda.cuEventCreate.argtypes = [ctypes.POINTER(handle), ctypes.c_uint]
    cuda.cuEventRecord.argtypes = [handle, handle]
    cuda.cuEventQuery.argtypes = [handle]
    cuda.cuEventSynchronize.argtypes = [handle]
    cuda.cuEventDestroy_v2.argtypes = [handle]
    cuda.cuStreamWaitEvent.argtypes = [handle, handle, ctypes.c_uint]
    cuda.cuStreamSynchronize.argtypes = [handle]
    cuda.cuStreamDestroy_v2.argtypes = [handle]
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [u64]
    cuda.cuMemHostAlloc.argtypes = [ctypes.POINTER(handle), ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemFreeHost.argtypes = [handle]
    cuda.cuMemsetD8Async.argtypes = [u64, ctypes.c_ubyte, ctypes.c_size_t, handle]
    cuda.cuMemcpyHtoD_v2.argtypes = [u64, handle, ctypes.c_size_t]
    cuda.cuMemcpyDtoH_v2.argtypes = [handle, u64, ctypes.c_size_t]
    cuda.cuMemcpyDtoHAsync_v2.argtypes = [handle, u64, ctypes.c_size_t, handle]
    cuda.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
    cuda.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(IpcHandle), u64]
    cuda.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(u64), IpcHandle, ctypes.c_uint]
    cuda.cuIpcCloseMemHandle.argtypes = [u64]
    cuda.cuIpcGetEventHandle.argtypes = [ctypes.POINTER(IpcHandle), handle]
    cuda.cuIpcOpenEventHandle.argtypes = [ctypes.POINTER(handle), IpcHandle]
    cuda.cuMemPoolCreate.argtypes = [ctypes.POINTER(handle), ctypes.POINTER(PoolProps)]
    cuda.cuMemPoolDestroy.argtypes = [handle]
    cuda.cuMemPoolTrimTo.argtypes = [handle, ctypes.c_size_t]
    cuda.cuMemPoolGetAttribute.argtypes = [handle, ctypes.c_int, ctypes.c_void_p]
    cuda.cuMemPoolSetAccess.argtypes = [handle, ctypes.POINTER(AccessDesc), ctypes.c_size_t]
    cuda.cuMemAllocFromPoolAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle, handle]
    cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle]
    cuda.cuMemFreeAsync.argtypes = [u64, handle]
    cuda.cuMemPoolExportToShareableHandle.argtypes = [ctypes.c_void_p, handle, ctypes.c_int,
                                                      ctypes.c_ulonglong]
    cuda.cuMemPoolImportFromShareableHandle.argtypes = [ctypes.POINTER(handle), ctypes.c_void_p,
                                                        ctypes.c_int, ctypes.c_ulonglong]
    cuda.cuMemPoolExportPointer.argtypes = [ctypes.POINTER(PointerExport), u64]
    cuda.cuMemPoolImportPointer.argtypes = [ctypes.POINTER(u64), handle,
                                            ctypes.POINTER(PointerExport)]


@contextlib.contextmanager
def device_zero_current(cuda):
    """Device 0's primary context retained and current on this thread for the block (the
    driver initialised), then popped and released (the rules tests count the retains)."""
    assert cuda.cuInit(0) == 0
    context = handle()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
    assert cuda.cuCtxPushCurrent_v2(context) == 0
    try:
        yield context
    finally:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(handle()))
        cuda.cuDevicePrimaryCtxRelease_v2(0)


def child_prelude(simulator: str) -> str:
    """The start of a child process's code (an importer of the interprocess tests): the
    simulator at ``simulator`` loaded as ``cuda``, these calls declared, device 0's primary
    context current; NumPy as ``np``, and ``json`` and ``sys`` imported."""
    return f"""
import ctypes, json, sys
import numpy as np
sys.path.insert(0, {__file__.rsplit("/", 1)[0]!r})
from cuda_ipc import AccessDesc, IpcHandle, Location, PointerExport, declare, handle, u64
cuda = ctypes.CDLL({simulator!r})
declare(cuda)
cuda.cuInit(0)
context = handle()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0)
cuda.cuCtxPushCurrent_v2(context)
"""


def run_importer(prelude: str, body: str, arguments: list, stdin=None, pass_fds=()):
    """Run ``prelude`` then ``body`` in a child process with ``arguments``; its ``found``
    dict (printed as JSON on its last line), or the process when it is to be talked to
    (``stdin=subprocess.PIPE``)."""
    code = prelude + textwrap.dedent(body) + "\nprint(json.dumps(found), flush=True)\n"
    command = [sys.executable, "-c", code, *arguments]
    if stdin is not None:
        return subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, text=True,
                                pass_fds=pass_fds)
    child = subprocess.run(command, capture_output=True, text=True, timeout=60,
                           pass_fds=pass_fds)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])
