"""Coverage-guided fuzzing of arrayport's public surface with atheris (issue 31).

One input drives one story: a producer built from the fuzzer's bytes (an
``__array_interface__`` dict over a real buffer, a buffer-protocol object, a NumPy array
with broadcast or negative strides, a pickle of a View with bytes flipped, an Arrow array,
device array or stream whose structs are fuzzed over honest buffers — and whose
fixed-size list widths and fixed_shape_tensor metadata are fuzzed text), then a chain of
layout operations, then every export and copy of the result, and contracts (``Spec``,
``require``) with the fuzzer's integers. Refusals of the contract's kinds are the expected
outcome of most inputs; anything else — another exception type, a wrong byte count, a
copy whose bytes differ from NumPy's, and above all a crash (ASan report, SIGSEGV) — is a
finding.

Where the CUDA driver simulator is this process's driver (``reliability/fuzz.sh`` loads it
when it can be built: ``CUDASIM_LIBRARY`` names it), Arrow device arrays also live in the
simulator's pinned or device memory, written by an asynchronous copy still pending on a
stream, with the producer's sync event recorded after it (issue 40): every host read of
pinned memory must wait for it (the exports compare NumPy's reading with the copies'),
and device memory must never be read by the host (the simulator's device memory is not
mapped there: a read is a crash).

Run it through ``reliability/fuzz.sh`` (builds the core instrumented with clang's coverage
and AddressSanitizer, then runs libFuzzer over the seed corpus in
``reliability/fuzz/corpus``). Without atheris, ``python reliability/fuzz/public_surface.py
--replay FILE…`` replays inputs through the same ``one_input`` (what the test suite does with the
seed corpus: tests/test_fuzz_public_surface.py).
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import io
import json
import os
import pickle
import struct
import sys
import weakref
from pathlib import Path

import numpy as np

import arrayport as ap

# The Arrow structs come from the test suite's hand-made producer (one definition of them).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "helpers"))
from arrow_structs import Made, MadeStream, device_capsules, metadata_bytes  # noqa: E402

# What arrayport may answer to a bad input (the contract's kinds), and what the fuzzed
# Python around it may raise on its own (NumPy refusing the same operation).
EXPECTED = (BufferError, TypeError, ValueError, IndexError, MemoryError, OverflowError,
            pickle.UnpicklingError, EOFError, AttributeError, KeyError)
COPY_LIMIT = 1 << 16        # results up to this many bytes are copied and compared
UNALLOCATABLE = 1 << 50     # copies at least this large must be a MemoryError
TYPESTRS = ["|u1", "|i1", "<u2", "<i4", "<f4", "<f8", "<c8", "<c16", "|b1", "<f2", "|V3",
            ">i4", "<M8", "|S2", "<u8", "zz"]
INTERESTING = [0, 1, 2, 3, 7, 8, -1, -2, -8, 2**31 - 1, 2**31, 2**32, 2**61, 2**62,
               2**63 - 1, -(2**63), 2**63, 2**64, -(2**62)]


class Reader:
    """The fuzzer's bytes as the choices a story needs (FuzzedDataProvider's role, written
    here so that replays need no atheris)."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def pick(self, choices):
        return choices[self.byte() % len(choices)]

    def small(self, limit: int = 8) -> int:
        return self.byte() % (limit + 1)

    def integer(self) -> int:
        """An interesting edge value or a small one, either sign."""
        kind = self.byte()
        if kind < 96:
            return self.pick(INTERESTING)
        if kind < 192:
            return self.small(16) - 4
        raw = self.data[self.at:self.at + 8].ljust(8, b"\0")
        self.at += 8
        return struct.unpack("<q", raw)[0]


ARROW_FORMATS = ["c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g", "b", "u", "z", "d",
                 "+w:2", "+w:0", "+w:x", "+s", "+l", "", "tsu:"]
# Hand-made Arrow producers must outlive every View on their arrays, as a real producer's
# memory lives until its release: the recent ones are kept (a View of one input is gone
# long before 4096 more inputs have run).
_ARROW_KEPT: collections.deque = collections.deque(maxlen=4096)


# Fixed-size list widths as text: what Arrow's C readers take (decimal digits) and what
# they do not (signs, spaces, underscores, other scripts' digits, widths past int32).
LIST_WIDTHS = ["2", "0", "002", " 2", "+2", "4_0", "-1", "", "99999999999999999999",
               "2147483648", "\u0662"]


def _list_format(r: Reader, fmt: str) -> str:
    return "+w:" + r.pick(LIST_WIDTHS) if fmt.startswith("+w:") and r.byte() & 1 else fmt


def _tensor_metadata(r: Reader):
    """None, or arrow.fixed_shape_tensor metadata whose JSON the fuzzer writes: shape and
    permutation entries of every JSON kind (huge, negative, fractional, boolean, infinite
    integers...), truncated text, or deep nesting."""
    if r.byte() & 3:
        return None

    def entry():
        return r.pick([r.small(4), r.small(4), r.integer(), 2**64 + 2, 1.5, True, "2",
                       None, float("inf"), [2]])
    described = {}
    for field in ("shape", "permutation"):
        if r.byte() & 1:
            described[field] = [entry() for _ in range(r.small(3))]
    text = json.dumps(r.pick([described, described, described, [2, 3], "x"]))
    kind = r.small(3)
    if kind == 2:
        text = text[:r.small(len(text))]
    elif kind == 3:
        text = '{"shape": ' + "[" * (1 + r.byte() * 100)
    return metadata_bytes({b"ARROW:extension:name": b"arrow.fixed_shape_tensor",
                           b"ARROW:extension:metadata": text.encode()})


def _arrow_made(r: Reader, depth: int = 0):
    """A hand-made Arrow array: fuzzed format, lengths, offsets, null counts and buffer and
    child counts, over buffers as large as the lengths honestly need (the C data interface
    does not carry buffer sizes: a consumer must trust them, so lying about them reads
    wild memory by design, not by bug)."""
    fmt = r.pick(ARROW_FORMATS)
    # Small honest values, negative ones (refused) and ones whose sizes overflow (refused):
    # a large value that fits is trusted by every Arrow consumer, so it is not fuzzed.
    length = r.pick([r.small(12), r.small(12), -1, -(2**63)])
    offset = r.pick([0, r.small(4), -1, -(2**63), 2**63 - 1])
    rows = max(length, 0) + max(offset, 0) if abs(length) < 64 and abs(offset) < 64 else 0
    child = None
    if fmt.startswith("+") and depth < 3 and r.byte() & 3:
        child = _arrow_made(r, depth + 1)
    values = np.arange(max(rows, 1) * 16, dtype=np.uint8)
    bits = np.frombuffer(bytes(r.byte() for _ in range(max(rows, 1) // 8 + 1)), np.uint8)
    validity = r.pick([None, None, bits.ctypes.data])
    n_buffers = r.pick([1 if fmt.startswith("+") else 2, r.small(3)])
    buffers = [validity, r.pick([values.ctypes.data, values.ctypes.data, None])][:n_buffers]
    buffers += [None] * (n_buffers - len(buffers))
    made = Made(_list_format(r, fmt), None, length=length, offset=offset,
                null_count=r.pick([0, 0, -1, r.integer()]), n_buffers=n_buffers,
                buffers=buffers, children=(child,) if child is not None else (),
                metadata=_tensor_metadata(r) if fmt.startswith("+w:") else None)
    made.keep += [values, bits]
    made.host_buffers = {values.ctypes.data: values, bits.ctypes.data: bits}
    return made


# ---- Arrow device arrays in the simulator's memory, still being written ---------------------

_GPU = None          # (driver, stream, event) once the simulator answers; False: no simulator


def _simulator():
    """The simulator's stream and event the fuzzed producers write and record on, when the
    simulator is this process's CUDA driver (fuzz.sh); None elsewhere (replays in the suite)."""
    global _GPU
    if _GPU is None:
        _GPU = False
        if os.environ.get("CUDASIM_LIBRARY"):
            from sim_arrays import Context, Stream, check, cuda
            driver = cuda()
            driver.cudasim_set_delay_us(200)   # pending long enough to be caught, not longer
            driver.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
            driver.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            event = ctypes.c_void_p()
            with Context(0):
                check(driver.cuEventCreate(ctypes.byref(event), 0), "cuEventCreate")
            _GPU = (driver, Stream(0), event)
            atexit.register(_release_simulator_objects)
    return _GPU or None


def _release_simulator_objects():
    """At exit: the stream and event back to the simulator (which reports what is not)."""
    from sim_arrays import Context
    driver, stream, event = _GPU
    _ARROW_KEPT.clear()
    import gc
    gc.collect()
    stream.synchronize()
    with Context(0):
        driver.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]
        driver.cuEventDestroy_v2(event)
    stream.close()


def _on_the_simulator(r: Reader, made, gpu) -> tuple[int, int]:
    """Move ``made``'s own buffers into simulator memory (pinned or device, as the fuzzer
    picks), each written by an asynchronous copy on the stream behind a few items of
    work; record the event after them. Returns (device type, address of the sync event)."""
    from sim_arrays import Context, DeviceArray, check
    driver, stream, event = gpu
    kind = r.pick(["pinned", "device"])
    pointers = made.keep[0]                   # the array's buffers (see Made)
    for i in range(made.array.n_buffers):
        host = made.host_buffers.get(pointers[i])
        if host is not None:
            memory = DeviceArray(host, kind=kind, stream=stream, busy=r.small(2))
            weakref.finalize(made, memory.free)
            pointers[i] = memory.ptr
    with Context(0):
        check(driver.cuEventRecord(event, stream.handle), "cuEventRecord")
    return (3 if kind == "pinned" else 2), ctypes.addressof(event)


def arrow_producer(r: Reader):
    """An Arrow array as capsules, a device array, or a stream of one to three arrays."""
    shape = r.small(2)
    if shape == 2:
        made = MadeStream([_arrow_made(r) for _ in range(1 + r.small(2))],
                          fail_at=r.pick([None, None, r.small(3)]))
        _ARROW_KEPT.append(made)
        return ap.View.from_arrow(made.capsule())
    made = _arrow_made(r)
    _ARROW_KEPT.append(made)
    gpu = _simulator() if shape == 1 else None
    if gpu is not None and r.byte() & 1:
        device_type, event = _on_the_simulator(r, made, gpu)
        return ap.View.from_arrow(device_capsules(made, device_type=device_type, device_id=0,
                                                  sync_event=event))
    if shape == 1:
        return ap.View.from_arrow(device_capsules(
            made, device_type=r.pick([1, 1, 3, 2, r.integer()]),
            device_id=r.pick([-1, 0, r.integer()])))
    return ap.View.from_arrow(made.capsules())


def producer(r: Reader):
    kind = r.small(4)
    if kind == 4:
        return arrow_producer(r)
    if kind == 0:
        # An array interface whose data is a buffer object, so that arrayport knows its
        # length and must keep every byte the layout reaches inside it. (A raw pointer is
        # trusted by the protocol, as NumPy trusts it: fuzzing one reads wild memory.)
        memory = bytearray(r.small(64))
        ndim = r.small(4)
        interface = {"version": 3, "typestr": r.pick(TYPESTRS),
                     "shape": tuple(r.integer() for _ in range(ndim)),
                     "data": memory if r.byte() & 1 else memoryview(bytes(memory))}
        if r.byte() & 1:
            interface["strides"] = tuple(r.integer() for _ in range(ndim))
        if r.byte() & 1:
            interface["offset"] = r.integer()

        class Holder:
            __array_interface__ = interface
        return Holder()
    if kind == 1:               # a buffer, cast
        memory = bytearray(range(r.small(48)))
        view = memoryview(memory)
        if r.byte() & 1 and len(memory) % 4 == 0:
            view = view.cast("i")
        return view[::r.pick([1, 2, -1])]
    if kind == 2:               # NumPy: broadcast, negative, sub-byte through ml_dtypes
        row = np.arange(r.small(6) + 1, dtype=r.pick(["u1", "i2", "f4", "f8", "c16", "?"]))
        if r.byte() & 1:
            row = row[::-1]
        shape = tuple(r.pick([0, 1, 3, 2**20, 2**31 + 1, 2**61, 2**62 - 1])
                      for _ in range(r.small(2))) + row.shape
        try:
            return np.broadcast_to(row, shape)
        except ValueError:
            return row
    # kind 3: a pickle of a View, with bytes flipped
    source = ap.view(np.arange(r.small(12), dtype=r.pick(["u1", "f8", "i4"])))
    data = bytearray(pickle.dumps(source, protocol=r.pick([2, 4, 5])))
    for _ in range(r.small(3)):
        if data:
            data[r.byte() * 7 % len(data)] = r.byte()
    try:
        return _ViewsOnly(io.BytesIO(bytes(data))).load()
    except (LookupError, UnicodeError, ImportError, RecursionError) as error:
        raise pickle.UnpicklingError(f"pickle's own refusal: {error}")   # before arrayport


class _ViewsOnly(pickle.Unpickler):
    """Unpickles what a View's pickle names and nothing else: a flipped byte must not turn
    a module name into another module, or a function into ``os.system``."""

    ALLOWED = {("arrayport.pickling", "rebuild"), ("__builtin__", "bytearray"),
               ("builtins", "bytearray"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"not a View's pickle: {module}.{name}")
        return super().find_class(module, name)


def operation(r: Reader, v):
    kind = r.small(6)
    if kind == 0:
        return v[tuple(slice(r.pick([None, r.integer()]), r.pick([None, r.integer()]),
                             r.pick([None, 1, -1, 2, r.integer()]))
                       for _ in range(r.small(v.ndim)))]
    if kind == 1:
        return v[r.integer()]
    if kind == 2:
        return v[None, ..., None] if r.byte() & 1 else v.T
    if kind == 3:
        return v.permute([r.integer() for _ in range(v.ndim)])
    if kind == 4:
        return v.reshape(tuple(r.integer() for _ in range(r.small(4))))
    if kind == 5:
        return v.view_as(r.pick(["uint8", "int16", "float32", "complex128", "float4_e2m1fn",
                                 "bool"]))
    return v.as_readonly()


def exports(v) -> None:
    """Every way out; held to NumPy where NumPy can hold the View."""
    assert v.nbytes >= 0 and v.size >= 0
    if v.dtype.numpy_native and v.device.type.is_host_accessible:
        array = np.asarray(v)
        assert array.nbytes == v.nbytes, (array.nbytes, v.nbytes)
        assert memoryview(v).nbytes == v.nbytes
        np.from_dlpack(v)
        if v.nbytes <= COPY_LIMIT:
            expected = np.ascontiguousarray(array).tobytes()
            for copy in (v.copy(), v.host_copy(), pickle.loads(pickle.dumps(v, protocol=5)),
                         pickle.loads(pickle.dumps(v, protocol=2))):
                assert ap.to_numpy(copy).tobytes() == expected
    if v.nbytes >= UNALLOCATABLE:
        try:
            v.copy()
        except MemoryError:
            pass
        else:
            raise AssertionError(f"a copy of {v.nbytes} bytes succeeded")
    elif v.nbytes <= COPY_LIMIT:
        ap.to_numpy(v, copy=True)
    arrow_round_trip(v)


def arrow_round_trip(v) -> None:
    """A View that Arrow can hold comes back from its own Arrow export as the same memory
    and values; one it cannot is refused with a BufferError."""
    try:
        capsules = v.__arrow_c_array__()
    except BufferError:
        return
    back = ap.View.from_arrow(capsules)
    assert back.shape == v.shape and back.dtype == v.dtype, (back, v)
    assert back.__array_interface__["data"][0] == v.__array_interface__["data"][0]
    if v.dtype.numpy_native and v.nbytes <= COPY_LIMIT:
        assert ap.to_numpy(back).tobytes() == np.asarray(v).tobytes()


def contracts(r: Reader, v) -> None:
    spec = ap.Spec(ndim=r.pick([None, r.integer(), [r.integer(), r.small(3)]]),
                   shape=r.pick([None, tuple(r.pick([None, r.integer()])
                                             for _ in range(r.small(3)))]),
                   align=r.pick([None, r.integer()]), order=r.pick([None, "C", "F", "A"]))
    spec.first_failure(v)
    if v.nbytes <= COPY_LIMIT:
        ap.require(v, ndim=spec.ndims or None, order=r.pick([None, "C"]), copy=None)


def one_input(data: bytes) -> None:
    r = Reader(data)
    try:
        source = producer(r)
        v = source if isinstance(source, ap.View) else ap.view(source)
        for _ in range(r.small(4)):
            v = operation(r, v)
        exports(v)
        contracts(r, v)
    except EXPECTED:
        pass


def main(argv) -> None:
    if len(argv) > 1 and argv[1] == "--replay":   # python public_surface.py --replay FILE…
        for path in argv[2:]:
            with open(path, "rb") as handle:
                one_input(handle.read())
        return
    import atheris
    atheris.instrument_all()       # the Python layers' branches count too, not only the core's
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
