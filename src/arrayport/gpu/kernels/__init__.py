"""The room for arrayport's device kernels: their CUDA sources and the PTX built from them
live beside this file; this module loads them into a context, keeps them there, and hands
out their functions.

Who owns what:
- a kernel's source (``<module>.cu``, in the dialect of ``dialect.h``) and its PTX
  (``<module>.ptx``, written by ``scripts/build_ptx.py``, shipped as package data);
- ``KernelCache`` (here): one ``cuModuleLoadData`` per context and module, functions looked
  up once, everything unloaded when its driver closes (at exit). A context is known by its
  handle and its id (``cuCtxGetId``): one reset by another library and made again has the
  same handle and a new id, so its modules are loaded again and the dead ones' handles are
  never used — not launched, not unloaded. A module that cannot be
  loaded — a driver older than the PTX, a vendor that cannot load PTX (HIP) — is
  remembered as such, with why, and ``function`` answers None: the caller keeps its DMA
  path (the decision is recorded in docs/decisions.md, "Device kernels ship as PTX");
- the launch itself is the driver's (``CudaDriver.launch``), on the stream the caller was
  given by the core's stream owner (``_core.copy_work_stream``), so a kernel is ordered like
  every other piece of arrayport's GPU work;
- what a kernel computes, and its parameter struct on the host side, belong to the
  kernel's own module here (``strided_copy``).
"""

from __future__ import annotations

import functools
import importlib.resources
import threading
import weakref

__all__ = ["KernelCache", "ptx_image"]


@functools.lru_cache(maxsize=None)
def ptx_image(module: str) -> bytes:
    """The PTX of kernel module ``module`` (``strided_copy``), NUL-terminated as
    ``cuModuleLoadData`` reads text."""
    return (importlib.resources.files(__name__) / f"{module}.ptx").read_bytes() + b"\0"


class KernelCache:
    """The kernel modules a CUDA driver has loaded, per context (see the module).

    ``driver`` provides ``on_device``, ``context_id``, ``load_module``, ``module_function``,
    ``unload_module`` and ``publish_kernel`` (told of each function found). Entries are kept per library, as the driver's own caches are
    (tests swap the library for stand-ins)."""

    def __init__(self, driver):
        self._driver = driver
        # {library: {(context, its id): {module: (module handle, {kernel: function}) | why
        # not}}}
        self._modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def function(self, ordinal: int, module: str, kernel: str) -> int | None:
        """The handle of ``kernel`` in ``module``, loaded into device ``ordinal``'s
        context on first use; None where that module cannot be loaded there."""
        driver = self._driver
        with driver.on_device(ordinal) as context, self._lock:
            contexts = self._modules.setdefault(driver.library, {})
            key = self._key(context)
            loaded = contexts.get(key)
            if loaded is None:
                # a context seen before under another id was destroyed: its modules with it
                for dead in [old for old in contexts if old[0] == key[0]]:
                    del contexts[dead]
                loaded = contexts[key] = {}
            entry = loaded.get(module)
            if entry is None:
                try:
                    entry = (driver.load_module(ptx_image(module)), {})
                except BufferError as error:   # an older driver, or no PTX JIT: DMA instead
                    entry = str(error)
                loaded[module] = entry
            if isinstance(entry, str):
                return None
            handle, functions = entry
            if kernel not in functions:
                try:
                    functions[kernel] = driver.module_function(handle, kernel)
                except BufferError:   # not in this module's PTX: no such kernel here
                    functions[kernel] = None
            function = functions[kernel]
            if function is not None:   # the core launches it from C too, in this context
                driver.publish_kernel(ordinal, kernel, key[0], key[1], function)
            return function

    def why_not(self, ordinal: int, module: str) -> str | None:
        """Why ``module`` could not be loaded on device ``ordinal`` (None: it was, or was
        never tried)."""
        with self._driver.on_device(ordinal) as context, self._lock:
            entry = self._modules.get(self._driver.library, {}).get(
                self._key(context), {}).get(module)
        return entry if isinstance(entry, str) else None

    def _key(self, context) -> tuple:
        """(the context's handle, its id): the id tells a context made again from the one
        destroyed, whose handle it may reuse."""
        handle = getattr(context, "value", context)
        return handle, self._driver.context_id(handle)

    def loaded(self) -> int:
        """How many modules are loaded now (all contexts)."""
        with self._lock:
            return sum(not isinstance(entry, str)
                       for modules in self._modules.get(self._driver.library, {}).values()
                       for entry in modules.values())

    def close(self) -> None:
        """Unload every module, each in its own context: at the driver's close (exit), so
        that the driver sees everything released. Never raises."""
        with self._lock:
            contexts = self._modules.pop(self._driver.library, {})
        for (context, context_id), modules in contexts.items():
            for entry in modules.values():
                if isinstance(entry, str):
                    continue
                try:   # only where the context is still the one it was loaded into
                    self._driver.unload_module(context, entry[0], context_id)
                except Exception:   # at exit: the library may be gone; nothing to save
                    pass
