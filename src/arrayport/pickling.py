"""Views through pickle — the transport every process engine already speaks.

Protocol 5 (PEP 574): a host View's bytes travel as one ``pickle.PickleBuffer``, so an engine
that keeps buffers out of band (``multiprocessing`` with shared memory, Dask, Ray, a
``buffer_callback`` of your own) moves them without a copy, and the unpickled View is a
zero-copy View over the buffer it receives. Protocols 2–4 carry the bytes in band.

Decisions (docs/processes.md):
- What travels is the View's byte span: C- and F-contiguous Views as they are (strides
  kept), any other layout as its compact bytes — one copy, at pickling, in C order — so it
  arrives C-contiguous. 0-d and size-0 Views work; every DLPack type does (the type is sent
  as DLPack's code, bits, lanes and padding).
- Read-only survives. A writable View arrives writable when the buffer it arrives in is
  writable (NumPy's rule): in band, and out of band through a writable buffer.
- Memory the host can read (CPU, pinned CUDA/ROCm host memory) is sent after the GPU work
  pending on it; it arrives as CPU memory. Device memory is refused — a silent device→host
  copy is never made — unless ``device_pickling("host")`` says to copy it to the host (it
  then arrives as a CPU View), or ``device_pickling("share")`` says to send a CUDA IPC
  handle (``view.share()``, gpu.ipc: the pickle then opens only on this machine, while
  this process lives, and arrives as a View of the same device memory).
- ``multiprocessing`` (its ForkingPickler: queues, pipes, pools; spawn and forkserver) sends
  a CUDA device View by its handle whatever the policy, as ``torch.multiprocessing`` does:
  a process engine's messages never leave the machine (``reduce_for_processes``).
"""

from __future__ import annotations

import contextlib

from arrayport import _core
from arrayport.dtypes import DType

__all__ = ["device_pickling", "set_device_pickling", "reduce_view"]

_DEVICE_POLICIES = ("refuse", "host", "share")
_device_policy = "refuse"


def set_device_pickling(policy: str) -> str:
    """Choose what pickling a View of device memory does, process-wide.

    Parameters
    ----------
    policy : {"refuse", "host", "share"}
        ``"refuse"`` (the default): a ``BufferError`` naming the way out; ``"host"``: copy
        the data to host memory, which is sent; ``"share"``: send a CUDA IPC handle of the
        device memory (``view.share()``), which opens only on this machine.

    Returns
    -------
    str
        The previous policy.

    Raises
    ------
    ValueError
        An unknown policy.
    """
    global _device_policy
    if policy not in _DEVICE_POLICIES:
        raise ValueError(f"device_pickling: policy must be 'refuse', 'host' or 'share', got "
                         f"{policy!r}")
    previous, _device_policy = _device_policy, policy
    return previous


@contextlib.contextmanager
def device_pickling(policy: str):
    """``set_device_pickling(policy)`` for the ``with`` block.

    Parameters
    ----------
    policy : {"refuse", "host", "share"}

    Returns
    -------
    contextlib.AbstractContextManager
        Restores the previous policy on exit.
    """
    previous = set_device_pickling(policy)
    try:
        yield
    finally:
        set_device_pickling(previous)


def byte_span(view):
    """What travels: (a 1-D uint8 View of the bytes, item, shape, byte strides or None for
    C order, read-only) — the View's own bytes when it is contiguous, else a compact copy.
    Shared by pickling and the engines' serializers (arrayport.engines)."""
    view = _host_readable(view)
    if not (view.is_c_contiguous or view.is_f_contiguous):
        view = view.host_copy()                 # compact bytes, C order: the one copy
    dtype = view.dtype
    item = (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    strides = None if view.is_c_contiguous else view.strides
    span = _core.view_from_pointer(view.ptr, (view.nbytes,), None, "uint8",
                                   readonly=view.readonly, owner=view, protocol="pickle")
    return span, item, view.shape, strides, view.readonly


def reduce_view(view, protocol):
    """``View.__reduce_ex__``: (rebuild, (bytes, type, shape, byte strides, read-only)); a
    device View under ``device_pickling("share")``: (open, (its CUDA IPC handle,))."""
    if _device_policy == "share" and not view.device.type.is_host_accessible:
        return reduce_shared(view, again=True)
    span, item, shape, strides, readonly = byte_span(view)
    if protocol >= 5:
        from pickle import PickleBuffer   # not at import: ``import arrayport`` stays light
        payload = PickleBuffer(span)
    else:
        # bytes, writable or not: a bytearray pickles as bytes plus a copy each way (what
        # multiprocessing's protocol-4 pickles paid: 2× NumPy's time); a writable View is
        # rebuilt over one copy of them (_rebuild_from_bytes)
        return (_rebuild_from_bytes, (bytes(memoryview(span)), item, shape, strides,
                                      readonly))
    return (_rebuild, (payload, item, shape, strides, readonly))


def reduce_shared(view, again: bool):
    """A device View as its CUDA IPC handle: unpickled by ``View.from_shared`` — the same
    device memory, on this machine. ``again``: the pickle may be loaded more than once (a
    file, an engine's store or retry), so the export lingers after its last holder
    (``gpu.ipc.LINGER_SECONDS``); else it ends when the one receiver lets go."""
    from arrayport.gpu import ipc
    from arrayport.shared import from_shared
    return (from_shared, (ipc.share_device(view, None, ipc.LINGER_SECONDS if again else 0.0),))


def reduce_for_processes(view):
    """multiprocessing's reducer for Views (``ForkingPickler``, registered by
    arrayport.engines): a CUDA device View by its handle, anything else as pickle sends it
    (protocol 4, multiprocessing's)."""
    if not view.device.type.is_host_accessible:
        return reduce_shared(view, again=False)   # one message, one receiver
    return reduce_view(view, 4)


def _host_readable(view):
    """``view`` when the host may read it (after its pending GPU work), else the policy."""
    if view.device.type.is_host_accessible:
        _core.host_wait_for_pending(view)
        return view
    if _device_policy == "host":
        return view.copy(device="cpu")
    raise BufferError(f"pickle: this View is in {view.device} memory, and pickling it would "
                      f"copy it to the host; pickle view.copy(device='cpu'), allow the copy "
                      f"with `with arrayport.device_pickling('host'):`, or send a handle of "
                      f"the device memory to a process of this machine with "
                      f"`arrayport.device_pickling('share')`")


def rebuild(payload, item, shape, strides, readonly, protocol="pickle"):
    """The unpickled View: zero-copy over ``payload`` (the received buffer), validated
    against its length (a tampered or truncated pickle is a BufferError, never a read
    outside it)."""
    if not (isinstance(item, tuple) and len(item) == 4 and isinstance(shape, tuple)
            and all(type(field) in (int, bool) for field in item)):
        raise BufferError(f"{protocol}: not an arrayport View's description (malformed type "
                          f"or shape)")
    try:
        DType(item[0], item[1], item[2], padded=bool(item[3]))
    except (ValueError, TypeError, OverflowError) as error:
        raise BufferError(f"{protocol}: the View's type is not a DLPack type: {error}") from None
    return _core.view_over_buffer(payload, item, shape, strides, bool(readonly), protocol)


def _rebuild_from_bytes(payload, item, shape, strides, readonly):
    """The unpickled View of an in-band pickle below protocol 5: over the received bytes
    when read-only, else over one writable copy of them."""
    if not readonly and type(payload) is bytes:
        payload = bytearray(payload)
    return rebuild(payload, item, shape, strides, readonly)


_rebuild = rebuild   # the name pickles refer to (arrayport.pickling._rebuild): keep it
