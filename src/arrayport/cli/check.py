"""``arrayport check TARGET``: a DLPack conformance run for any array library.

TARGET is a module (``numpy``, ``torch``, ``jax``, ``pyarrow``, ``tvm_ffi``,
``array_api_strict``, ``tensorflow``, ``mlx.core``, ``paddle``, ``warp``, ``xarray``,
``arrayport``, or any module with ``asarray``) or ``module:factory``,
a callable that takes a NumPy array and returns the library's array holding it. The library
is tested as a producer (its arrays' ``__dlpack__``, ``__dlpack_device__``, array interface,
buffer and Arrow PyCapsule exports) and, when the module has ``from_dlpack``, as a consumer of
capsules arrayport makes — and, when its record in ``arrayport.libraries`` has an ``arrow``
route (the matrix's), as a consumer of Arrow capsules arrayport makes: a library that speaks
only Arrow (nanoarrow) is checked over Arrow alone. Every check names the clause it holds the
library to, and ends ``pass``,
``fail``, ``warn`` (allowed by the letter of the spec, but a hazard) or ``skip`` (with why).
Checks run in an isolated worker: a check that crashes the process fails, it does not end
the run.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
from typing import Any, Callable

import numpy as np

from arrayport.devices import DeviceType
from arrayport.libraries.results import element0_address, to_host_numpy
from arrayport.libraries.samples import available_dtypes, base_array, numpy_dtype
from arrayport.libraries.toolkit import ARROW_METHODS, arrow_only

from . import capsules, isolation
from .check_registry import (CHECKS, Fail, Skip, Target, Warn, _home, _host_only, _on_device,
                             _sample, _same_values, check, placed_view, read_only_verdict)

RUNNER = "arrayport.cli.check"


class TargetError(Exception):
    """TARGET names nothing that can be checked."""


# --- the target -------------------------------------------------------------------------------

def _known_targets() -> dict[str, tuple[Callable, Callable | None, Callable | None]]:
    """module -> (make, from_dlpack, make_read_only) for libraries without ``asarray``
    or with an immutable array type worth checking: each library's adapter's ``CHECK``
    (arrayport.libraries)."""
    from arrayport.libraries import LIBRARIES
    return {library.module: library.get("CHECK") for library in LIBRARIES
            if library.adapter and library.get("CHECK") is not None}


def _route(module_name: str, route: str) -> Callable[[Any], Any] | None:
    """The library's consumer for ``route`` (``arrow``, ``cuda_array_interface``): its
    record's route, as the matrix takes it (None for a module without one)."""
    from arrayport.libraries import for_module
    library = for_module(module_name)
    return None if library is None else library.routes.get(route)


@functools.lru_cache(maxsize=None)
def resolve(target: str) -> Target:
    """The target's factory and consumer, worked out once per worker process."""
    module_name, _, factory = target.partition(":")
    module = importlib.import_module(module_name)
    known = _known_targets().get(module_name)
    consume = getattr(module, "from_dlpack", None)
    routes = {"from_arrow": _route(module_name, "arrow"),
              "from_interface": _route(module_name, "cuda_array_interface")}
    if factory:
        make = getattr(module, factory, None)
        if not callable(make):
            raise TargetError(f"{module_name} has no callable {factory!r}")
        return Target(target, make, consume, None, **routes)
    if known is not None:
        return Target(target, known[0], known[1], known[2], **routes)
    if callable(getattr(module, "asarray", None)):
        return Target(target, module.asarray, consume, None, **routes)
    raise TargetError(f"{module_name} has no asarray; name a factory: {module_name}:FUNCTION")


# --- the checks -------------------------------------------------------------------------------

def _export(x, **kwargs):
    capsule = x.__dlpack__(**kwargs)
    if not capsules.is_capsule(capsule):
        raise Fail(f"__dlpack__ returned {type(capsule).__name__}, not a PyCapsule")
    return capsule


def _producer(target: Target, dtype: str = "float32"):
    source, x = _sample(target, dtype)
    if not hasattr(type(x), "__dlpack__"):
        raise Skip(f"{type(x).__name__} has no __dlpack__")
    return source, x


def _read(capsule) -> np.ndarray:
    """The values a capsule holds, copied to the host first when they are on a device."""
    import arrayport
    view = arrayport.from_dlpack(capsule)
    if not view.device.type.is_host_accessible:
        view = view.copy(device="cpu")
    return np.array(arrayport.to_numpy(view))


@check("producer.dlpack-device", "__dlpack_device__() returns (device_type, device_id), "
       "device_type a DLPack device enum value")
def _(target):
    _, x = _producer(target)
    device = x.__dlpack_device__()
    if not (isinstance(device, tuple) and len(device) == 2
            and all(isinstance(int(v), int) for v in device)):
        raise Fail(f"returned {device!r}")
    if int(device[0]) not in set(DeviceType):
        raise Fail(f"device type {int(device[0])} is not a DLPack device type")
    return f"{tuple(int(v) for v in device)}"


@check("producer.legacy-capsule", "__dlpack__() without max_version returns a capsule named "
       "'dltensor' (DLPack 0.x); since 2025 a BufferError is allowed instead")
def _(target):
    _, x = _producer(target)
    return _legacy_or_refusal(x, "refuses legacy export with BufferError (allowed)")


def _legacy_or_refusal(x, refused: str, **kwargs) -> str:
    """x.__dlpack__(**kwargs) must give a legacy 'dltensor' capsule or a BufferError."""
    try:
        capsule = _export(x, **kwargs)
    except BufferError as exc:
        return f"{refused}: {exc}"
    if capsules.name(capsule) != "dltensor":
        raise Fail(f"returned {capsules.name(capsule)!r}, expected a legacy 'dltensor' capsule")
    return "legacy capsule 'dltensor'"


@check("producer.versioned-capsule", "__dlpack__(max_version=(1, 3)) returns a capsule named "
       "'dltensor_versioned' of major version 1 (or another version the consumer must verify)")
def _(target):
    _, x = _producer(target)
    capsule = _export(x, max_version=(1, 3))
    found = capsules.name(capsule)
    if found == "dltensor":
        raise Warn("returned a legacy 'dltensor' capsule: allowed, but it cannot carry the "
                   "READ_ONLY and IS_COPIED flags")
    if found != "dltensor_versioned":
        raise Fail(f"capsule named {found!r}")
    version = capsules.describe(capsule)["version"]
    if version[0] != 1:
        raise Fail(f"version {version}: a consumer asking for 1.3 cannot read major {version[0]}")
    return f"version {version[0]}.{version[1]}"


@check("producer.max-version-0x", "__dlpack__(max_version=(0, 8)): a 0.x consumer gets a "
       "legacy 'dltensor' capsule or a BufferError, never a versioned capsule")
def _(target):
    _, x = _producer(target)
    return _legacy_or_refusal(x, "BufferError", max_version=(0, 8))


@check("producer.tensor", "the exported DLTensor describes the array: ndim, shape, dtype, "
       "device, strides (non-NULL since 1.2 when ndim > 0) and the values")
def _(target):
    source, x = _producer(target)
    capsule = _export_best(x)
    info = capsules.describe(capsule)
    if info["ndim"] != 2 or info["shape"] != [3, 4]:
        raise Fail(f"ndim {info['ndim']} shape {info['shape']}, expected 2 and [3, 4]")
    if info["dtype"] != (2, 32, 1):
        raise Fail(f"dtype {info['dtype']} for float32, expected (2, 32, 1)")
    device = tuple(int(v) for v in x.__dlpack_device__())
    if info["device"] != device:
        raise Fail(f"device {info['device']} but __dlpack_device__() says {device}")
    if info["strides"] is None and info["versioned"] and info["version"] >= (1, 2):
        raise Fail(f"NULL strides in a version {info['version']} tensor")
    _same_values(_read(capsule), source, "values read through the capsule")
    return f"strides {info['strides']}"


def _export_best(x):
    try:
        return _export(x, max_version=(1, 3))
    except TypeError:
        return _export(x)


@check("producer.deleter-unconsumed", "a capsule freed without being consumed calls the "
       "tensor's deleter exactly once (the capsule destructor's job)")
def _(target):
    _, x = _producer(target)
    capsule = _export_best(x)
    count = capsules.DeleterCount(capsule)
    del capsule
    gc.collect()
    if count.calls != 1:
        raise Fail(f"deleter called {count.calls} times (the capsule destructor must call the "
                   f"tensor's deleter; otherwise it leaks or frees it behind the ABI's back)")
    return "once"


@check("producer.deleter-consumed", "a consumed capsule is renamed 'used_...' and the deleter "
       "runs exactly once, when the consumer lets go, not before")
def _(target):
    import arrayport
    _, x = _producer(target)
    capsule = _export_best(x)
    count = capsules.DeleterCount(capsule)
    original = capsules.name(capsule)
    view = arrayport.from_dlpack(capsule)
    if capsules.name(capsule) != f"used_{original}":
        raise Fail(f"after import the capsule is named {capsules.name(capsule)!r}")
    if count.calls:
        raise Fail("deleter ran while the consumer still used the tensor")
    del view, capsule
    gc.collect()
    if count.calls != 1:
        raise Fail(f"deleter called {count.calls} times after the consumer let go")
    return "once"


@check("producer.stream-cpu", "on CPU (a device without streams) only stream=None is "
       "accepted: stream=0, 1 or -1 is refused")
def _(target):
    _, x = _producer(target)
    if int(x.__dlpack_device__()[0]) not in (1, 3, 11, 13):
        raise Skip("not a host array")
    accepted = []
    errors = set()
    for stream in (0, 1, -1):
        try:
            _export(x, stream=stream)
            accepted.append(stream)
        except Exception as exc:
            errors.add(type(exc).__name__)
    if accepted:
        raise Fail(f"accepted stream {', '.join(map(str, accepted))} for a CPU array")
    if not errors <= {"ValueError", "BufferError", "TypeError"}:
        raise Warn(f"refused with {', '.join(sorted(errors))}; a bad argument is a ValueError")
    return f"refused ({', '.join(sorted(errors))})"


@check("producer.dl-device", "__dlpack__(dl_device=its own device) exports without a copy; "
       "an unsupported dl_device raises BufferError")
def _(target):
    _, x = _producer(target)
    device = tuple(int(v) for v in x.__dlpack_device__())
    try:
        capsule = _export(x, max_version=(1, 3), dl_device=device)
    except TypeError as exc:
        raise Warn(f"does not take dl_device (2023.12): {exc}")
    plain = capsules.describe(_export_best(x))
    if capsules.describe(capsule)["data"] != plain["data"]:
        raise Fail("dl_device=its own device made a copy")
    try:
        _export(x, max_version=(1, 3), dl_device=(9, 0))  # VPI: nobody exports there
    except BufferError:
        return "own device shared; VPI refused with BufferError"
    except Exception as exc:
        raise Fail(f"dl_device=(9, 0) raised {type(exc).__name__}, not BufferError: {exc}")
    raise Fail("accepted dl_device=(9, 0) (VPI)")


@check("producer.copy", "copy=True always copies and sets IS_COPIED; copy=False never "
       "copies and leaves IS_COPIED clear")
def _(target):
    source, x = _producer(target)
    try:
        copied = _export(x, max_version=(1, 3), copy=True)
    except TypeError as exc:
        raise Warn(f"does not take copy (2023.12): {exc}")
    shared = capsules.describe(_export(x, max_version=(1, 3), copy=False))
    info = capsules.describe(copied)
    if info["data"] + info["byte_offset"] == shared["data"] + shared["byte_offset"]:
        raise Fail("copy=True returned the array's own memory")
    if not info["versioned"]:
        raise Fail("copy=True made a copy in a legacy capsule, which cannot set IS_COPIED")
    if not info["flags"] & capsules.IS_COPIED:
        raise Fail("copy=True: IS_COPIED is not set")
    if shared["flags"] & capsules.IS_COPIED:
        raise Fail("copy=False: IS_COPIED is set")
    _same_values(_read(copied), source, "the copy")
    return "IS_COPIED set on the copy only"


@check("producer.read-only", "a read-only array is exported with READ_ONLY set, and never as "
       "a legacy capsule (which consumers may write through)")
def _(target):
    if target.make_read_only is None:
        raise Skip("no known way to make a read-only array of this library")
    x = target.make_read_only(base_array("float32"))
    if not hasattr(type(x), "__dlpack__"):
        raise Skip(f"{type(x).__name__} has no __dlpack__")
    capsule = _export_best(x)
    info = capsules.describe(capsule)
    if not info["versioned"]:
        raise Fail("asked for a versioned capsule, exported a read-only array as a legacy "
                   "capsule: consumers will write to it")
    if not info["flags"] & capsules.READ_ONLY:
        raise Fail("READ_ONLY is not set")
    try:
        _export(x)
    except BufferError:
        return "READ_ONLY set; legacy export refused"
    raise Warn("READ_ONLY set, but a legacy capsule (no flags) is exported on request")


@check("producer.array-interface", "__array_interface__, when present: version 3, shape, "
       "typestr and data (pointer, read-only) describe the same memory")
def _(target):
    _host_only(target, "the array interface")
    source, x = _sample(target)
    if not hasattr(type(x), "__array_interface__"):
        raise Skip(f"{type(x).__name__} has no __array_interface__")
    interface = x.__array_interface__
    if interface.get("version") != 3:
        raise Fail(f"version {interface.get('version')!r}, expected 3")
    if tuple(interface["shape"]) != source.shape or np.dtype(interface["typestr"]) != source.dtype:
        raise Fail(f"shape {interface['shape']} typestr {interface['typestr']!r}")
    data = interface.get("data")
    if not (isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], bool)):
        raise Fail(f"data {data!r} is not (pointer, read-only flag)")

    class Holder:
        __array_interface__ = interface
    _same_values(np.array(Holder()), source, "values through the array interface")
    return "consistent"


@check("producer.buffer", "the buffer protocol, when offered: format, itemsize and shape "
       "describe the same values")
def _(target):
    _host_only(target, "the buffer protocol")
    source, x = _sample(target)
    try:
        view = memoryview(x)
    except TypeError:
        raise Skip(f"{type(x).__name__} does not export buffers") from None
    if view.itemsize != 4 or tuple(view.shape) != source.shape:
        raise Fail(f"itemsize {view.itemsize} shape {view.shape}")
    _same_values(np.array(view), source, "values through the buffer")
    return f"format {view.format!r}"


def _arrow_capsules(x):
    """The producer's Arrow export: (schema capsule, array capsule), or a Skip."""
    if hasattr(type(x), "__arrow_c_array__"):
        pair = x.__arrow_c_array__()
    elif hasattr(type(x), "__arrow_c_stream__"):
        return None
    else:
        raise Skip(f"{type(x).__name__} has no __arrow_c_array__ or __arrow_c_stream__")
    if not (isinstance(pair, tuple) and len(pair) == 2
            and all(capsules.is_capsule(c) for c in pair)):
        raise Fail(f"__arrow_c_array__() returned {type(pair).__name__}, not a pair of "
                   f"PyCapsules")
    names = tuple(capsules.name(c) for c in pair)
    if names != ("arrow_schema", "arrow_array"):
        raise Fail(f"capsules named {names}, expected ('arrow_schema', 'arrow_array')")
    return pair


@check("producer.arrow", "__arrow_c_array__, when offered, returns capsules named "
       "'arrow_schema' and 'arrow_array' (or __arrow_c_stream__ an 'arrow_array_stream') "
       "holding the array's values; an Arrow array holds its data once, released once")
def _(target):
    import arrayport
    source, x = _sample(target)
    pair = _arrow_capsules(x)
    if pair is None:
        stream = x.__arrow_c_stream__()
        if not capsules.is_capsule(stream) or capsules.name(stream) != "arrow_array_stream":
            raise Fail(f"__arrow_c_stream__() returned {stream!r}")
        del stream
        _same_values(arrayport.to_numpy(arrayport.view(x), copy=True), source,
                     "values read through the stream")
        return "a stream of the values"
    view = arrayport.View.from_arrow(pair)
    _same_values(arrayport.to_numpy(view, copy=True), source, "values read through Arrow")
    if not view.readonly:
        raise Fail("arrayport read Arrow memory as writable")
    return f"{view.dtype.name}{list(view.shape)}, zero-copy"


@check("consumer.arrow", "the library's Arrow consumer (its arrow route) reads an array "
       "offered only through __arrow_c_array__ with the right values, and releases it "
       "exactly once when its array dies")
def _(target):
    import arrayport
    from arrayport import _core
    if target.from_arrow is None:
        raise Skip("arrayport knows no Arrow consumer of this library")
    source = base_array("float32")
    exported = _core.live_counts()["exported"]
    offered = arrow_only(arrayport.view(source), ("__arrow_c_schema__", "__arrow_c_array__"))
    result = target.from_arrow(offered)
    _same_values(to_host_numpy(result), source, "values")
    try:
        shared = element0_address(result) == source.__array_interface__["data"][0]
    except Exception:
        shared = False
    del result
    gc.collect()
    left = _core.live_counts()["exported"] - exported
    if left:
        raise Fail(f"{left} exported Arrow array(s) not released after the consumer let go")
    return ("shared" if shared else "copied") + ", released once"


@check("producer.cuda-array-interface", "__cuda_array_interface__ is offered only for CUDA "
       "memory; there: version 3, the data pointer DLPack gives, a stream of None or a "
       "handle (0 is disallowed), the values")
def _(target):
    import arrayport
    source, x = _sample(target)
    if not hasattr(type(x), "__cuda_array_interface__"):
        raise Skip("not offered")
    device = int(x.__dlpack_device__()[0]) if hasattr(type(x), "__dlpack_device__") else None
    present = hasattr(x, "__cuda_array_interface__")
    if device == 1 and present:
        raise Fail("a CPU array offers __cuda_array_interface__")
    if not present:
        return "absent on host memory"
    interface = x.__cuda_array_interface__
    if interface.get("version") != 3:
        raise Warn(f"version {interface.get('version')!r}; 3 is current (streams)")
    stream = interface.get("stream")
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)
                               or stream < 1):
        raise Fail(f"stream {stream!r}: must be None or a stream handle (1, 2 or larger)")
    if hasattr(type(x), "__dlpack__"):
        info = capsules.describe(_export_best(x))
        if interface["data"][0] != info["data"] + info["byte_offset"]:
            raise Fail("the data pointer differs from the one DLPack exports")
    view = arrayport.View.from_cuda_array_interface(x).copy(device="cpu")
    _same_values(arrayport.to_numpy(view), source, "values read through the interface")
    return f"version 3, stream {stream!r}"


@check("producer.stream-cuda", "on CUDA memory __dlpack__ takes stream=None, -1, 1 "
       "(legacy default), 2 (per-thread default) or a handle, and refuses 0 (ambiguous)")
def _(target):
    _, x = _producer(target)
    if int(x.__dlpack_device__()[0]) not in (2, 13):
        raise Skip("not a CUDA array")
    refused = []
    for stream in (None, -1, 1, 2):
        try:
            _export(x, max_version=(1, 3), stream=stream)
        except Exception as exc:
            refused.append(f"{stream}: {type(exc).__name__}")
    if refused:
        raise Fail(f"refused valid streams ({'; '.join(refused)})")
    try:
        _export(x, max_version=(1, 3), stream=0)
    except (ValueError, BufferError, TypeError) as exc:
        return f"0 refused with {type(exc).__name__}"
    except Exception as exc:
        raise Warn(f"0 refused with {type(exc).__name__}; a bad argument is a ValueError")
    raise Fail("accepted stream=0, which the spec disallows on CUDA")


def _dtype_check(dtype: str):
    def run(target):
        import arrayport
        try:
            source, x = _sample(target, dtype)
        except Exception as exc:
            raise Skip(f"cannot make {dtype}: {type(exc).__name__}") from None
        if not hasattr(type(x), "__dlpack__"):
            if hasattr(x, "__cuda_array_interface__"):
                return _interface_dtype_check(x, source, dtype)
            return _arrow_dtype_check(x, source, dtype)
        made = getattr(x, "dtype", None) or getattr(x, "type", None)
        if hasattr(made, "to_pandas_dtype"):  # a pyarrow type: compare its NumPy dtype
            made = np.dtype(made.to_pandas_dtype())
        if made is not None and str(made).split(".")[-1] not in (dtype, str(numpy_dtype(dtype))):
            raise Skip(f"the factory made {made} from {dtype}")
        try:
            capsule = _export_best(x)
        except BufferError as exc:
            raise Skip(f"refused with BufferError (allowed): {exc}") from None
        except Exception as exc:
            raise Fail(f"export failed with {type(exc).__name__}, not BufferError: {exc}")
        expected = arrayport.DType(dtype)
        found = capsules.describe(capsule)["dtype"]
        wanted = (int(expected.code), expected.bits, expected.lanes)
        if found != wanted:
            raise Fail(f"DLPack dtype {found}, expected {wanted}")
        _same_values(_read(capsule), source, f"{dtype} values")
        return f"{found}"
    return run


def _interface_dtype_check(x, source, dtype: str) -> str:
    """The dtype check of an array that speaks only the CUDA Array Interface (numba-cuda):
    its typestr, read by arrayport, is ``dtype`` and the memory holds the values (read
    through a device → host copy)."""
    import arrayport
    try:
        view = arrayport.View.from_cuda_array_interface(x)
    except BufferError as exc:
        raise Fail(f"arrayport cannot read its interface: {exc}") from None
    if view.dtype != arrayport.DType(dtype):
        raise Skip(f"the factory made {view.dtype.name} from {dtype}")
    _same_values(to_host_numpy(view), source, f"{dtype} values")
    return f"{dtype} through the CUDA Array Interface"


def _arrow_dtype_check(x, source, dtype: str) -> str:
    """The dtype check of an array that speaks only Arrow: its Arrow export, read by
    arrayport, holds ``dtype`` and the values (a type Arrow holds without a strided form,
    bit-packed booleans say, is the allowed refusal)."""
    import arrayport
    if not any(hasattr(type(x), name) for name in ARROW_METHODS[:3]):
        raise Skip(f"{type(x).__name__} has no __dlpack__ and no Arrow export")
    try:
        view = arrayport.View.from_arrow(x)
    except BufferError as exc:
        raise Skip(f"its Arrow form has no strided layout (allowed): {exc}") from None
    if view.dtype != arrayport.DType(dtype):
        # An Arrow array's schema is its type: another one is the factory's conversion
        # (nanoarrow makes NumPy bools uint8), as the DLPack branch skips it too.
        raise Skip(f"the factory made {view.dtype.name} from {dtype}")
    _same_values(arrayport.to_numpy(view, copy=True), source, f"{dtype} values")
    return f"{dtype} through Arrow"


for _dtype in available_dtypes():
    check(f"producer.dtype.{_dtype}", f"a {_dtype} array exports as its DLPack type code, bits "
          f"and lanes (an Arrow-only array: as its Arrow type), with its values (or refuses "
          f"with BufferError)")(_dtype_check(_dtype))


# --- the library as a consumer ----------------------------------------------------------------

class _Probe:
    """A producer under the checker's control: exports ``array`` through arrayport, in
    memory of ``device`` (the target's home: ``_home``), in the form the consumer asks for
    (versioned for max_version >= 1, else legacy, or legacy only when ``legacy_only``), on
    the stream it names; lets the check ``prepare`` the capsule, and records the request.
    ``address`` is where element 0 lives."""

    def __init__(self, array: np.ndarray, prepare=lambda capsule: None, legacy_only=False,
                 device=(1, 0)):
        self.prepare, self.legacy_only, self.device = prepare, legacy_only, tuple(device)
        self.view = placed_view(array, self.device)
        self.address = self.view.ptr
        self.calls: list[dict] = []
        self.capsule = None

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append({"stream": stream, "max_version": max_version,
                           "dl_device": dl_device, "copy": copy})
        on_host = DeviceType(self.device[0]).is_host_accessible
        ordered = {} if on_host else {"stream": stream}
        if max_version is not None and tuple(max_version) >= (1, 0):
            self.capsule = self.view.__dlpack__(max_version=(1, 3), **ordered)
        else:
            self.capsule = self.view.__dlpack__(**ordered)
        self.prepare(self.capsule)
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def _consumer(target):
    if target.from_dlpack is None:
        raise Skip("the module has no from_dlpack")
    return target.from_dlpack


@check("consumer.max-version", "from_dlpack passes max_version=(1, x) to __dlpack__, and "
       "stream=None for a CPU array")
def _(target):
    consume = _consumer(target)
    probe = _Probe(base_array("float32"), device=_home(target))
    consume(probe)
    asked = probe.calls[-1]
    if not _on_device(target) and asked["stream"] is not None:
        raise Fail(f"passed stream={asked['stream']!r} for a CPU array")
    if _on_device(target) and asked["stream"] == 0:
        raise Fail("passed stream=0 for a device array (disallowed: ambiguous)")
    if asked["max_version"] is None:
        raise Warn("does not pass max_version: only legacy capsules, no READ_ONLY flag")
    if tuple(asked["max_version"])[0] != 1:
        raise Fail(f"max_version={asked['max_version']!r}")
    return f"max_version={tuple(asked['max_version'])}"


@check("consumer.capsule", "the consumer renames the capsule 'used_...', reads the right "
       "values, and calls the deleter exactly once when its array dies")
def _(target):
    consume = _consumer(target)
    source = base_array("float32")
    counts = []
    probe = _Probe(source, prepare=lambda capsule: counts.append(capsules.DeleterCount(capsule)),
                   device=_home(target))
    result = consume(probe)
    original = "dltensor_versioned" if capsules.name(probe.capsule).endswith("versioned") \
        else "dltensor"
    if capsules.name(probe.capsule) != f"used_{original}":
        raise Fail(f"capsule left named {capsules.name(probe.capsule)!r}")
    _same_values(to_host_numpy(result), source, "values")
    copied = counts[-1].calls == 1
    del result
    gc.collect()
    if counts[-1].calls != 1:
        raise Fail(f"deleter called {counts[-1].calls} times after the array died")
    return f"{original}: " + ("copied at once" if copied else "shared, deleter once")


@check("consumer.legacy-fallback", "a producer whose __dlpack__ rejects max_version "
       "(TypeError) is asked again without it, and its 'dltensor' capsule renamed 'used_dltensor'")
def _(target):
    consume = _consumer(target)
    source = base_array("float32")
    probe = _Probe(source, legacy_only=True, device=_home(target))
    result = consume(probe)
    if probe.capsule is None:
        raise Fail("never asked for the capsule again without max_version")
    if capsules.name(probe.capsule) != "used_dltensor":
        raise Fail(f"capsule left named {capsules.name(probe.capsule)!r}")
    _same_values(to_host_numpy(result), source, "values")
    return "retried without max_version"


@check("consumer.read-only", "a READ_ONLY tensor is not handed to the user as writable "
       "memory (ignoring the flag is allowed by the standard, but lets the user write)")
def _(target):
    consume = _consumer(target)
    frozen = base_array("float32")
    frozen.flags.writeable = False
    probe = _Probe(frozen, device=_home(target))
    try:
        result = consume(probe)
    except BufferError as exc:
        return f"refused: {exc}"
    return read_only_verdict(result, probe.address, "READ_ONLY",
                             legacy=capsules.name(probe.capsule) == "used_dltensor")


@check("consumer.foreign-major", "a tensor of another major version (2.0) is refused without "
       "reading it, and its deleter still runs exactly once")
def _(target):
    consume = _consumer(target)
    counts = []

    def prepare(capsule):
        if capsules.name(capsule) != "dltensor_versioned":
            raise Skip("the consumer asks for legacy capsules only")
        capsules.set_major_version(capsule, 2)
        counts.append(capsules.DeleterCount(capsule))
    probe = _Probe(base_array("float32"), prepare=prepare, device=_home(target))
    try:
        consume(probe)
    except Skip:
        raise
    except Exception as exc:
        outcome = f"refused with {type(exc).__name__}"
    else:
        raise Fail("accepted a DLPack 2.0 tensor")
    if not counts:
        raise Skip(f"{outcome} before asking for a capsule: the check did not reach it")
    probe.capsule = None
    gc.collect()
    if counts[-1].calls != 1:
        raise Fail(f"{outcome}; deleter called {counts[-1].calls} times")
    return outcome + ", deleter once"


@check("consumer.negative-strides", "a tensor with negative strides is imported correctly or "
       "refused cleanly, never a crash")
def _(target):
    consume = _consumer(target)
    flipped = base_array("float32")[::-1]
    try:
        result = consume(_Probe(flipped, device=_home(target)))
    except Exception as exc:
        return f"refused with {type(exc).__name__}"
    _same_values(to_host_numpy(result), flipped, "values")
    return "imported"


from . import check_interface  # noqa: E402,F401  (the CUDA Array Interface consumer checks)


# --- the library's unusual arrays (arrayport.cli.unusual) ----------------------------------

UNUSUAL_CLAUSE = ("an array whose memory DLPack cannot describe as it is (lazy conjugation "
                  "or negation, no strided storage, nulls, deletion…) is exported with the "
                  "values the library itself reports, or refused with BufferError — never "
                  "exported with other values")


def _unusual_check(label: str) -> str:
    """The library's own __dlpack__ on one unusual kind, read back through a capsule (no
    arrayport import rules in between: the producer's export is what is judged)."""
    from .unusual import kind as find_kind
    kind = find_kind(label)
    try:
        x = kind.make()
    except LookupError as why:
        raise Skip(str(why)) from None
    if not hasattr(type(x), "__dlpack__"):
        raise Skip(f"{type(x).__name__} has no __dlpack__")
    try:
        capsule = _export_best(x)
    except BufferError as refusal:
        return f"refused: {refusal}"
    except Fail:
        raise
    except Exception as exc:
        raise Warn(f"refused with {type(exc).__name__} instead of BufferError: "
                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if kind.reference is None:
        raise Fail("exported an array that has no faithful strided form (its export holds "
                   "memory that is not the array's values)")
    try:
        got = _read(capsule)
    except BufferError as exc:
        raise Fail(f"exported a capsule arrayport cannot read: {exc}") from None
    expected = kind.reference(x)
    if got.shape != expected.shape or got.dtype != expected.dtype or \
            got.tobytes() != np.ascontiguousarray(expected).tobytes():
        shown = (f"{got.tolist()} where the library reports {expected.tolist()}"
                 if expected.size <= 8 else "values other than the library reports")
        raise Fail(f"exported {shown}")
    return "exports the values the library reports"


# --- running ----------------------------------------------------------------------------------

def run_case(case: dict, modules: dict) -> dict:
    if "kind" in case:
        clause, function = UNUSUAL_CLAUSE, (lambda target: _unusual_check(case["kind"]))
    else:
        clause, function = CHECKS[case["check"]]
    try:
        target = resolve(case["target"])
    except Exception as exc:
        return {"status": "fail", "reason": f"target: {type(exc).__name__}: {exc}"}
    try:
        reason = function(target)
        return {"status": "pass", "reason": reason or ""}
    except Skip as exc:
        return {"status": "skip", "reason": str(exc)}
    except Warn as exc:
        return {"status": "warn", "reason": str(exc)}
    except Fail as exc:
        return {"status": "fail", "reason": str(exc)}
    except Exception as exc:
        return {"status": "fail", "reason": f"raised {type(exc).__name__}: {exc}"}


def run(target: str, *, case_timeout: float = isolation.CASE_TIMEOUT_S) -> dict:
    module_name = target.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    if not module_name or found is None:
        raise TargetError(f"no module named {module_name!r}")
    from .unusual import kinds_of
    cases = [{"check": check_id, "target": target} for check_id in CHECKS]
    if ":" not in target:  # a module: its unusual arrays too, where arrayport knows them
        cases += [{"check": f"unusual.{kind.name}", "target": target, "kind": kind.label}
                  for kind in kinds_of(module_name)
                  if all(importlib.util.find_spec(m) is not None for m in kind.needs)]
    results: list[dict] = [{} for _ in cases]

    def on_result(index, result):
        results[index] = result

    broken = isolation.run_isolated(RUNNER, [module_name], cases, on_result=on_result,
                                    case_timeout=case_timeout)
    rows = []
    for case, result in zip(cases, results):
        status = result.get("status", "fail")
        reason = result.get("reason") or result.get("detail", "")
        if status == "crashed":
            status, reason = "fail", f"crashed: {reason}"
        clause = UNUSUAL_CLAUSE if "kind" in case else CHECKS[case["check"]][0]
        rows.append({"id": case["check"], "clause": clause, "status": status,
                     "reason": reason})
    summary = {status: sum(row["status"] == status for row in rows)
               for status in ("pass", "fail", "warn", "skip")}
    if broken:
        summary["fail"] += 1
        rows.insert(0, {"id": "target.import", "clause": "the module imports",
                        "status": "fail", "reason": broken[module_name]})
    return {"target": target, "results": rows, "summary": summary}


def render_text(report: dict) -> str:
    out = [f"arrayport check {report['target']}", ""]
    for row in report["results"]:
        out.append(f"{row['status'].upper():<5} {row['id']:<34} {row['reason']}")
    failed = [row for row in report["results"] if row["status"] in ("fail", "warn")]
    if failed:
        out += ["", "What the failing and warning checks hold the library to:"]
        out += [f"  {row['id']}: {row['clause']}" for row in failed]
    s = report["summary"]
    out += ["", f"{s['pass']} passed, {s['fail']} failed, {s['warn']} warnings, "
                f"{s['skip']} skipped"]
    return "\n".join(out) + "\n"
