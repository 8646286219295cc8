"""What the receiving processes of tests/test_gpu_ipc.py run (multiprocessing, spawn): a
module of its own, so that a child imports arrayport and nothing of the GPU suite's
fixtures. Each child finds the CUDA driver the parent does (the simulator through
LD_LIBRARY_PATH, on the simulator; the GPU's driver on hardware)."""

import os

import numpy as np


def read(handle, hold_until=None):
    """Open ``handle`` and read it back to the host: (values, read-only, device); with
    ``hold_until`` (an Event), the View stays open until it is set."""
    import arrayport as ap
    received = ap.View.from_shared(handle)
    values = np.asarray(received.copy(device="cpu")).tolist()
    if hold_until is not None:
        hold_until.wait(60)
    return values, received.readonly, str(received.device)


def write_raw(handle, value: int) -> int:
    """Open ``handle`` and write ``value`` into every byte of it with the driver itself (no
    arrayport check of the View's read-only flag), then wait for the write: the driver's
    status."""
    import ctypes

    import arrayport as ap
    from arrayport.gpu import cuda
    received = ap.View.from_shared(handle)
    library = cuda.driver.library.get()
    with cuda.driver.on_device(received.device.id):
        library.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                            ctypes.c_void_p]
        status = library.cuMemsetD8Async(received.ptr, value, received.nbytes, None)
        return status or library.cuCtxSynchronize()


def open_many(handles) -> dict:
    """Open every handle at once: how many distinct base pointers (a View's start less its
    offset) they map, their read-only flags, the pools imported, their values."""
    import arrayport as ap
    from arrayport.gpu import ipc_pool
    received = [ap.View.from_shared(handle) for handle in handles]
    return {"pointers": len({view.ptr - handle.offset
                             for view, handle in zip(received, handles)}),
            "readonly": [view.readonly for view in received], "imports": ipc_pool.imports(),
            "values": [np.asarray(view.copy(device="cpu")).tolist() for view in received]}


def reopen(handles) -> list:
    """Open each handle in turn, read its first byte and drop the View at once (its mapping
    then waits for the closer thread while the next is opened)."""
    import arrayport as ap
    firsts = []
    for handle in handles:
        received = ap.View.from_shared(handle)
        firsts.append(int(np.asarray(received[:1].copy(device="cpu"))[0]))
        del received
    return firsts


def open_each(handles) -> list:
    """Open each handle while holding the Views opened before: its first element, or the
    error it raised (type name and message)."""
    import arrayport as ap
    held, answers = [], []
    for handle in handles:
        try:
            held.append(ap.View.from_shared(handle))
            answers.append(int(np.asarray(held[-1][:1].copy(device="cpu"))[0]))
        except Exception as error:   # noqa: BLE001 — the answer
            answers.append(f"{type(error).__name__}: {error}")
    return answers


def die_holding(handle, opened):
    """Open ``handle``, say so, and die without closing anything (os._exit)."""
    import arrayport as ap
    received = ap.View.from_shared(handle)
    opened.set()
    os._exit(0 if received is not None else 1)


def handoffs(connection):
    """Receive handles until None; for each, open it, read its first byte, drop the View
    and answer with that byte."""
    import arrayport as ap
    while True:
        handle = connection.recv()
        if handle is None:
            return
        received = ap.View.from_shared(handle)
        first = int(np.asarray(received[:1].copy(device="cpu"))[0])
        del received
        connection.send(first)


def read_view(received):
    """A View that arrived already opened (multiprocessing's pickler, Dask, Ray): its
    values, read-only flag and device."""
    import arrayport as ap
    assert isinstance(received, ap.View), type(received)
    return (np.asarray(received.copy(device="cpu")).tolist(), received.readonly,
            str(received.device))


def unpickle_and_read(data: bytes):
    """A pickle of a device View made under ``device_pickling("share")``, loaded here."""
    import pickle
    return read_view(pickle.loads(data))


def _counting(driver, name: str, counts: dict) -> None:
    """``driver.<name>`` counted in ``counts[name]`` from now on (this process's driver;
    calls on any thread)."""
    import threading
    call, lock = getattr(driver, name), threading.Lock()

    def counted(*arguments):
        with lock:
            counts[name] = counts.get(name, 0) + 1
        return call(*arguments)
    setattr(driver, name, counted)


def open_at_once(handles) -> dict:
    """Open every handle on a thread of its own, all let go at once: the pool imports and
    block imports the driver was asked for, the distinct base pointers mapped, and each
    View's first element (or the errors raised)."""
    import threading

    import arrayport as ap
    from arrayport.gpu import cuda
    counts: dict = {}
    for name in ("import_pool", "import_pool_block"):
        _counting(cuda.driver, name, counts)
    start = threading.Barrier(len(handles))
    received = [None] * len(handles)

    def open_one(index):
        start.wait(30)
        try:
            received[index] = ap.View.from_shared(handles[index])
        except Exception as error:   # noqa: BLE001 — the answer
            errors.append(f"{type(error).__name__}: {error}")
    errors: list = []
    threads = [threading.Thread(target=open_one, args=(index,)) for index in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        return {"errors": errors}
    return {**counts, "pointers": len({view.ptr - handle.offset
                                       for view, handle in zip(received, handles)}),
            "firsts": [int(np.asarray(view[:1].copy(device="cpu"))[0]) for view in received]}


def open_beside_a_slow_exporter(slow, quick) -> dict:
    """Open ``slow`` on a thread whose exporter answers for the pool's descriptor only after
    ``quick`` was opened on this one (or after 5 s): whether ``quick`` was opened while
    ``slow`` still waited for its exporter, and each View's first element."""
    import threading

    import arrayport as ap
    from arrayport.gpu import ipc_pool
    asking, quick_opened, answered = threading.Event(), threading.Event(), threading.Event()
    fetch, firsts = ipc_pool.fetch_descriptor, {}

    def slow_exporter(*arguments):
        asking.set()
        quick_opened.wait(5)
        answered.set()
        return fetch(*arguments)
    ipc_pool.fetch_descriptor = slow_exporter

    def open_slow():
        firsts["slow"] = int(np.asarray(ap.View.from_shared(slow)[:1].copy(device="cpu"))[0])
    thread = threading.Thread(target=open_slow)
    thread.start()
    asking.wait(30)
    received = ap.View.from_shared(quick)
    while_waiting = not answered.is_set()
    quick_opened.set()
    thread.join(60)
    firsts["quick"] = int(np.asarray(received[:1].copy(device="cpu"))[0])
    return {"while the slow one waited": while_waiting, **firsts}
