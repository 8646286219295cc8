"""The two GPU drivers' call sequences, against a recording stand-in for the vendor library.

No GPU is needed: the stand-in answers every entry point with success and records the call.
What this holds: each vendor's symbol table names entry points its signature table declares
(a typo would otherwise surface only on a GPU), the shared calls of ``VendorDriver`` make the
same sequence on both vendors (CUDA inside a primary context, HIP on the current device), an
event is destroyed on every path, errors name the call, and memory is freed exactly once.
The real libraries are exercised by ``pytest -m gpu``."""

import ctypes

import pytest

from arrayport.gpu import cuda as cuda_driver, hip as hip_driver
from arrayport.gpu.library import NativeLibrary

VENDORS = {"cuda": cuda_driver, "rocm": hip_driver}


class RecordingLibrary:
    """Every attribute is an entry point returning ``status`` (0 unless listed in
    ``failing``) and recording (name, args)."""

    def __init__(self, failing=()):
        self.log = []
        self.failing = dict(failing)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def entry(*args):
            self.log.append((name, args))
            if "Alloc" in name or "Malloc" in name:  # hand out a recognisable address
                ctypes.cast(args[0], ctypes.POINTER(ctypes.c_uint64)).contents.value = 0xA000
            return self.failing.get(name, 0)
        return entry

    def names(self):
        return [name for name, _ in self.log]


def wire_to_recorder(module, monkeypatch):
    """The module's driver talking to a new RecordingLibrary (returned) for this test."""
    recorder = RecordingLibrary()
    library = module.driver.library
    stand_in = NativeLibrary(library.label, library.description, library._names,
                             library.unavailable, {}, lambda lib: None)
    monkeypatch.setattr(stand_in, "get", lambda: recorder)
    monkeypatch.setattr(module.driver, "library", stand_in)
    return recorder


@pytest.fixture(params=sorted(VENDORS))
def vendor(request, monkeypatch):
    """(module, recording library) for each vendor in turn."""
    module = VENDORS[request.param]
    return module, wire_to_recorder(module, monkeypatch)


def test_every_table_entry_is_a_declared_signature():
    for module in VENDORS.values():
        symbols = module.driver.symbols
        names = [value for field, value in symbols._asdict().items()
                 if isinstance(value, str) and value and not field.endswith("_reason")]
        assert len(names) == (15 if module is cuda_driver else 14)
        missing = set(names) - set(module._SIGNATURES)
        assert not missing, f"{module.__name__}: {missing} has no declared C signature"


def test_every_call_the_vendor_makes_is_declared():
    """Each vendor's own methods call only entry points with a declared signature (ctypes
    would otherwise guess the argument types on a real GPU)."""
    import inspect
    import re
    for module in VENDORS.values():
        source = inspect.getsource(module)
        called = set(re.findall(r'\b((?:cu|hip)[A-Z]\w+)\b', source))
        called -= {"cuPointerGetAttribute", "hipPointerAttribute_t", "hipMemoryType",
                   "hipDeviceAttributeMaxPitch",
                   "hipStream_t", "hipErrorInvalidValue",   # named in comments
                   "hipEventDisableTiming", "hipMemcpyDefault",
                   # resolved for the compiled floor (its address), never called here
                   "cuGetProcAddress", "cuGetProcAddress_v2"}
        declared = set(module._SIGNATURES) | set(getattr(module, "_OPTIONAL_SIGNATURES", {}))
        if module is cuda_driver:   # CUDA's optional entry points: declared beside its pools
            from arrayport.gpu import cuda_memory
            declared |= set(cuda_memory._OPTIONAL_SIGNATURES)
        assert called <= declared, called - declared


def test_stream_wait_records_an_event_made_once_per_context(vendor):
    module, recorder = vendor
    module.driver.make_stream_wait(0, 111, 222)
    names = recorder.names()
    symbols = module.driver.symbols
    shared = [symbols.event_create, symbols.event_record, symbols.stream_wait_event]
    assert [name for name in names if name in shared] == shared
    record = dict(recorder.log)[symbols.event_record]
    assert record[1] == 222, "the event is recorded on the producer's stream"
    wait = dict(recorder.log)[symbols.stream_wait_event]
    assert wait[0] == 111, "the consumer's stream waits"
    create = dict(recorder.log)[symbols.event_create]
    assert create[1] == 0x2, "events are created without timing"
    if module is cuda_driver:  # inside the producer stream's context, popped after
        # (the recorder's answer to cuCtxGetCurrent is no context: so it is pushed)
        assert names[:3] == ["cuStreamGetCtx", "cuCtxGetCurrent", "cuCtxPushCurrent_v2"]
        assert dict(recorder.log)["cuStreamGetCtx"][0] == 222
        assert names[-1] == "cuCtxPopCurrent_v2"
        assert "cuDevicePrimaryCtxRelease_v2" not in names   # kept: see primary_context
    assert not any("Synchronize" in name for name in names), "no host wait"
    assert not any("Destroy" in name for name in names), "the event is kept for reuse"
    recorder.log.clear()
    module.driver.make_stream_wait(0, 333, 222)     # the same context: the same event
    again = recorder.names()
    assert symbols.event_create not in again
    assert dict(recorder.log)[symbols.event_record][0] == record[0]
    assert [name for name in again if name in shared] == shared[1:]


def test_an_event_wait_on_the_host_blocks_on_that_event_on_its_device(vendor):
    """synchronize_event (issue 40: a pinned Arrow bitmap counted after its producer's sync
    event): the event itself is waited for, with its device current; no stream is."""
    module, recorder = vendor
    symbols = module.driver.symbols
    module.driver.synchronize_event(1, 0xE7E7)
    assert dict(recorder.log)[symbols.event_synchronize] == (0xE7E7,)
    assert symbols.stream_synchronize not in recorder.names()
    names = recorder.names()
    if module is cuda_driver:   # inside device 1's primary context
        push = names.index("cuCtxPushCurrent_v2")
        assert push < names.index(symbols.event_synchronize)
        assert recorder.log[push][1][0] is module.driver.primary_context(1)
    else:
        assert ("hipSetDevice", (1,)) in recorder.log


def test_equal_streams_need_no_call(vendor):
    module, recorder = vendor
    module.driver.make_stream_wait(0, 7, 7)
    assert recorder.log == []


def test_a_failed_record_names_the_call_and_waits_for_nothing(vendor):
    module, recorder = vendor
    symbols = module.driver.symbols
    recorder.failing[symbols.event_record] = 700
    with pytest.raises(BufferError, match=f"{symbols.event_record} failed with error 700"):
        module.driver.make_stream_wait(0, 1, 2)
    assert symbols.stream_wait_event not in recorder.names()


def test_device_memory_is_freed_once_on_its_device(vendor):
    module, recorder = vendor
    memory = module.driver.allocate_device(1, 64)
    symbols = module.driver.symbols
    allocation = dict(recorder.log)[symbols.allocate]
    assert allocation[1] == 64
    assert memory.address == 0xA000 and memory.nbytes == 64
    recorder.log.clear()
    del memory
    if module is cuda_driver:
        # cuMemFree "may" synchronize, and promises nothing: held, freed after every
        # device's work, at the next return of what arrayport holds
        assert recorder.names().count(symbols.free) == 0
        module.driver.release_cached_memory()
        names = recorder.names()   # the devices at work looked up (none answers here), then free
        assert "cuDeviceGetCount" in names[:names.index(symbols.free)]
    assert recorder.names().count(symbols.free) == 1
    assert dict(recorder.log)[symbols.free] == (0xA000,)
    if module is cuda_driver:  # freed inside device 1's primary context, retained once
        freed = recorder.names().index(symbols.free)
        pushed = [args for name, args in recorder.log[:freed]
                  if name == "cuCtxPushCurrent_v2"]
        assert pushed[-1][0] is module.driver.primary_context(1)


def test_pinned_memory_is_portable_and_freed_once(vendor):
    module, recorder = vendor
    symbols = module.driver.symbols
    memory = module.driver.allocate_pinned(0)
    call = dict(recorder.log)[symbols.host_allocate]
    assert call[1:] == (1, symbols.host_allocate_portable), "size 0 asks for 1 byte, portable"
    del memory
    if module is cuda_driver:   # cuMemFreeHost promises no wait: held, as device memory is
        assert recorder.names().count(symbols.host_free) == 0
        module.driver.release_cached_memory()
    assert recorder.names().count(symbols.host_free) == 1


def test_linear_copy_passes_the_stream_last(vendor):
    module, recorder = vendor
    module.driver.copy_async(0, 0x1000, 0x2000, 48, 0x9999)
    arguments = dict(recorder.log)[module.driver.symbols.copy]
    assert arguments[:3] == (0x1000, 0x2000, 48) and arguments[-1] == 0x9999
    if module is hip_driver:
        assert arguments[3] == 4, "hipMemcpyDefault: HIP infers the direction from UVA"


def test_managed_memory_is_cuda_only(vendor):
    module, recorder = vendor
    if module is hip_driver:
        with pytest.raises(module.HipUnavailable, match="managed"):
            module.driver.allocate_device(0, 16, managed=True)
        assert recorder.log == []
    else:
        memory = module.driver.allocate_device(0, 16, managed=True)
        assert dict(recorder.log)["cuMemAllocManaged"][1:] == (16, 1)
        del memory
        module.driver.release_cached_memory()   # held, as device memory is
        assert recorder.names().count("cuMemFree_v2") == 1


def test_device_count_reads_the_output(vendor, monkeypatch):
    module, recorder = vendor
    name = module.driver.symbols.device_count

    def answer(out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_int)).contents.value = 3
        return 0
    monkeypatch.setattr(RecordingLibrary, name, staticmethod(answer), raising=False)
    assert module.driver.device_count() == 3


def test_hip_switches_the_device_and_restores_it(monkeypatch):
    recorder = wire_to_recorder(hip_driver, monkeypatch)
    monkeypatch.setattr(hip_driver.driver, "current_device", lambda: 0)
    hip_driver.driver.synchronize(2, 5)
    assert recorder.log == [("hipSetDevice", (2,)), ("hipStreamSynchronize", (5,)),
                            ("hipSetDevice", (0,))]
