"""What arrayport tells the process engines about Views. Nothing here runs unless the
engine is imported.

Dask (measured, docs/processes.md): the pickle 5 path is out of band and zero-copy, but a
View through it made a 64 MiB LocalCluster round trip 2.7x slower than the same ndarray,
which Dask moves with its "dask" serializer family; registered for Views the same way, the
round trip matches NumPy's. So arrayport registers a family:
- header: DLPack type, shape, byte strides (None: C order), read-only; one frame: the bytes
  (``pickling.byte_span``: a contiguous View's own bytes, else a compact copy);
- receipt: a zero-copy View over the frame; a writable View whose frame arrives read-only
  is copied once into writable memory (what Dask does for NumPy arrays), read-only stays.
Every process that has both must have the family registered — a receiver without it
cannot read a View sent with it — whatever the import order: ``import arrayport`` registers
at once when ``distributed`` is loaded, and otherwise leaves a one-shot import hook that
registers right after ``distributed.protocol`` is imported (then removes itself).

``dask.sizeof`` (an entry point, loaded by Dask itself): a View weighs its bytes, as an
ndarray does — Dask's memory manager, stealing and spilling decide by it.

CUDA device Views cross by their CUDA IPC handle (``arrayport.gpu.ipc``), never by their
bytes: in Dask's family the header carries the handle's fields and no frame (a worker of
another machine gets the BufferError that names the host route); multiprocessing's
pickler (queues, pipes, pools) is given ``pickling.reduce_for_processes``, and Ray a
serializer of its own (``register_ray``), each registered when its module is imported, as
Dask's family is.
"""

from __future__ import annotations

import sys
import threading

_dask_family_registered = False


def register_dask_sizeof(sizeof) -> None:
    """Dask's ``dask.sizeof`` plugin: a View weighs its bytes."""
    from arrayport import View

    @sizeof.register(View)
    def _sizeof_view(view) -> int:
        return sys.getsizeof(view) + view.nbytes


def register_with_engines() -> None:
    """Register with Dask and with multiprocessing now where they are loaded, else when
    they get imported."""
    for module, register in (("distributed.protocol", register_dask_family),
                             ("multiprocessing.reduction", register_multiprocessing),
                             ("ray", register_ray)):
        if module in sys.modules:
            register()
        elif not any(isinstance(finder, _AfterImport) and finder.name == module
                     for finder in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(module, register))


def register_multiprocessing() -> None:
    """multiprocessing's pickler (queues, pipes, pools) sends CUDA device Views by their
    CUDA IPC handle (``pickling.reduce_for_processes``)."""
    from multiprocessing.reduction import ForkingPickler

    from arrayport import View
    from arrayport.pickling import reduce_for_processes
    ForkingPickler.register(View, reduce_for_processes)


class _AfterImport:
    """A meta-path finder that runs ``callback`` once, right after module ``name`` has been
    imported, and takes itself off ``sys.meta_path``. It finds nothing itself: it asks the
    other finders for the module's spec and wraps the loader."""

    def __init__(self, name, callback):
        self.name, self.callback = name, callback
        self._lock = threading.Lock()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        with self._lock:
            if self not in sys.meta_path:
                return None
            sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


class _ThenCall:
    """A loader that executes the module with ``loader``, then calls ``callback``; every
    other attribute is the original loader's."""

    def __init__(self, loader, callback):
        self._loader, self._callback = loader, callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name):
        return getattr(self._loader, name)


def register_ray() -> None:
    """Ray's serializer for Views (``ray.util.register_serializer``: the reducer goes into
    Ray's pickler, the deserializer travels by reference with each View, so a receiving
    worker needs no registration): a CUDA device View by its handle, any other View as
    pickle protocol 5 sends it (its buffer out of band, as Ray keeps NumPy's)."""
    import ray.util

    from arrayport import View
    ray.util.register_serializer(View, serializer=_ray_payload, deserializer=_from_ray_payload)


def _ray_payload(view):
    from arrayport.pickling import reduce_view
    if view.device.type == 2:   # Ray's store may hand the object out again: it lingers
        from arrayport.gpu import ipc
        return ("cuda-ipc", ipc.share_device(view, None, ipc.LINGER_SECONDS).fields())
    return ("pickle", reduce_view(view, 5))


def _from_ray_payload(payload):
    kind, body = payload
    if kind == "cuda-ipc":
        from arrayport.gpu.ipc import CudaSharedHandle
        from arrayport.shared import from_shared
        return from_shared(CudaSharedHandle.from_fields(body))
    rebuild, arguments = body
    return rebuild(*arguments)


def register_dask_family() -> None:
    """Views as a Dask serializer family of their own (see the module docstring)."""
    global _dask_family_registered
    if _dask_family_registered:
        return
    from distributed.protocol import dask_deserialize, dask_serialize

    from arrayport import View
    from arrayport.pickling import byte_span, rebuild

    @dask_serialize.register(View)
    def _serialize_view(view):
        if view.device.type == 2:    # CUDA device memory: its handle (gpu.ipc), this machine
            from arrayport.gpu import ipc   # (a worker may send it on again: it lingers)
            return {"cuda-ipc": ipc.share_device(view, None, ipc.LINGER_SECONDS).fields()}, []
        span, item, shape, strides, readonly = byte_span(view)
        header = {"item": item, "shape": shape, "strides": strides, "readonly": readonly}
        return header, [memoryview(span)]

    @dask_deserialize.register(View)
    def _deserialize_view(header, frames):
        if "cuda-ipc" in header:
            from arrayport.gpu.ipc import CudaSharedHandle
            from arrayport.shared import from_shared
            return from_shared(CudaSharedHandle.from_fields(header["cuda-ipc"]))
        frame = frames[0] if frames else b""
        if not header["readonly"] and memoryview(frame).readonly:
            frame = bytearray(frame)
        return rebuild(frame, tuple(header["item"]), tuple(header["shape"]),
                       None if header["strides"] is None else tuple(header["strides"]),
                       header["readonly"], "dask")

    _dask_family_registered = True
