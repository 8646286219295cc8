"""``View.copy(device=None, stream=None)``: a C-contiguous, writable copy (IS_COPIED) of a
View, on its own device or another, in every direction arrayport has a driver for.

Where the bytes go:
- host → host: arrayport's own strided kernel (``_csrc/strided_copy.h``), in C;
- host → device: a strided source is first packed by that kernel, then one host-to-device
  transfer — from pageable memory, when large, chunk by chunk through the pinned ring
  (``gpu.staging``); to pinned host memory (``cuda_host``/``rocm_host``) the same way;
- device → device on one GPU: one transfer when the source is contiguous, else one launch of
  arrayport's strided-copy kernel (``gpu.kernels.strided_copy``) where the driver can load
  it (CUDA), else 2-D transfers as below;
- device → host: one transfer when the source is contiguous, else packed on the device by
  that kernel into new device memory and sent as one transfer (CUDA); where the kernel
  cannot run, 2-D transfers (``cuMemcpy2DAsync``: rows of contiguous bytes, a pitch apart)
  planned by ``plan_runs``;
- device → another device: packed on the source device if strided, then a peer transfer.

Before arrayport's kernel reads a source, the driver is asked whether the device can read
it (the core's ``kernel_source_refusal``): a producer's wrong label — host memory called
``cuda:0`` — is a BufferError, not a kernel fault that kills the context.

Streams (CUDA, ROCm): the transfers are enqueued on ``stream`` — a stream of the
destination device for copies to a device, of the source device otherwise; None means the
default stream (CUDA's legacy stream 1, ROCm's 0). Every stream rule is the core's
(``_core_streams.pxi``), asked here at each step: the copy first waits, on the GPU, for
work pending on the source (an event), and the streams that may write the source then
wait for the copy, so the producer cannot overwrite or free what is being read; a copy
that lands in host memory is complete when ``copy`` returns.
"""

from __future__ import annotations

from arrayport import _core, gpu
from arrayport.devices import Device, DeviceType
from arrayport.gpu import staging
from arrayport.gpu.kernels import strided_copy

__all__ = ["copy_view", "plan_runs"]

_CPU = Device("cpu")


def copy_view(view, device=None, stream=None, who="copy"):
    """The copy (see the module). ``who`` starts error messages."""
    source = view.device
    target = source if device is None else Device(device)
    source_type, target_type = source.type, target.type

    def cannot() -> str:   # the start of every refusal (made only for one)
        return f"{who}: cannot copy {source} memory to {target}"

    driver = gpu.driver_for(source_type) or gpu.driver_for(target_type)
    if driver is None:
        _core.check_stream(stream, DeviceType.CPU)
        if target_type is not DeviceType.CPU or not source_type.is_host_accessible:
            end = target_type if source_type.is_host_accessible else source_type
            raise BufferError(f"{cannot()}: arrayport has no driver for {end.label} devices")
        return view.host_copy()
    for end in ((source_type,) if target == source else (source_type, target_type)):
        if end is DeviceType.CPU:
            continue
        end_driver = gpu.driver_for(end)
        if end_driver is None:
            raise BufferError(f"{cannot()}: arrayport has no driver for {end.label} devices")
        if end_driver is not driver:
            raise BufferError(f"{cannot()}: arrayport cannot copy between "
                              f"{source_type.label} and {target_type.label} devices")
    ends = _Ends(source, target)
    # The end whose stream the copy runs on: device memory first (the destination's when
    # both are), else the pinned end (a CPU <-> pinned copy: no stream, the default one).
    if ends.target_on_device or not ends.source_on_device:
        gpu_type = target_type if target_type is not DeviceType.CPU else source_type
    else:
        gpu_type = source_type
    stream = _core.check_stream(stream, gpu_type)
    try:
        if target_type is DeviceType.CPU and not ends.source_on_device:
            # Pinned host memory to the CPU: a host copy (which waits for pending GPU work).
            return view.host_copy()
        return _driver_copy(view, ends, driver, _core.copy_work_stream(stream, gpu_type))
    except BufferError as error:  # the driver's own errors, with what was being done
        raise type(error)(f"{cannot()}: {error}") from None  # CudaUnavailable stays itself


class _Ends:
    """A copy's two ends and what the copy asks of them, read once: each Device, and
    whether it is a GPU's device memory (``gpu.is_device_memory``)."""

    __slots__ = ("source", "target", "source_on_device", "target_on_device")

    def __init__(self, source, target):
        self.source, self.target = source, target
        self.source_on_device = gpu.is_device_memory(source.type)
        self.target_on_device = gpu.is_device_memory(target.type)


def _driver_copy(view, ends, driver, stream):
    """The copy through ``driver`` between ``ends``, enqueued on ``stream`` (a handle)."""
    source, target = ends.source, ends.target
    source_id, target_type = source.id, target.type
    ordinal = target.id if ends.target_on_device else source_id
    nbytes = view.nbytes
    contiguous = view.is_c_contiguous
    if target_type is DeviceType.CPU:
        memory = _core.HostBuffer(nbytes)
    elif target_type is DeviceType.CUDA_MANAGED:
        memory = driver.allocate_device(source_id if ends.source_on_device else 0, nbytes,
                                        managed=True)
    elif ends.target_on_device:
        memory = driver.allocate_result(ordinal, nbytes, stream)
    else:
        memory = driver.allocate_pinned(nbytes)
    _core.order_copy_after_source(driver, view, ordinal, stream)
    packed = view
    if not contiguous and not ends.source_on_device:
        packed = view.host_copy()  # host sources are packed by our kernel, then sent whole
    elif (not contiguous and not ends.target_on_device
          and strided_copy.available(driver, ordinal)):
        # Device to host: packed on the device by the kernel, then one transfer (2-D DMA
        # would move a transposed matrix one element per row).
        packing = _packed_on_device(view, source, driver, stream)
        packed = view if packing is None else packing
        packing = None   # the staging's one reference is `packed`, let go below
    elif not contiguous and source_id != ordinal:
        # packed on its own device first
        packed = _driver_copy(view, _Ends(source, source), driver, stream)
        _core.order_transfer_after_packing(driver, ordinal, stream, source_id)
    staged = packed is not view and ends.source_on_device and not ends.target_on_device
    try:
        _transfer(packed, memory, ends, driver, ordinal, stream, nbytes)
    finally:
        if staged:   # device-to-host staging goes now, failure or not, while the stream
            packed = None   # exists: its free is enqueued after the transfer that read it
    _core.order_writers_after_copy(driver, view, ordinal, stream)
    lands_on_host = not ends.target_on_device
    stream = _core.finish_copy(driver, ordinal, stream, lands_on_host)
    # Where a transfer may still read the source (and what was packed) after ``copy``
    # returns, the result keeps them alive as long as it lives, and a result on a device
    # longer: its transfers may still be pending when it dies, so its memory's release
    # keeps them until the memory is really freed — after the work that may use it
    # (gpu.held_memory) — counting what they hold allocated (a small View of a large
    # allocation holds all of it). Nothing reads the source later where the copy lands in
    # host memory (complete on return), nor from pageable host memory (the driver has read
    # it when the call returns): there the source's life is its own.
    reads_later = not lands_on_host and (
        source.type is not DeviceType.CPU or not _pageable(driver, packed.ptr))
    if reads_later and hasattr(memory, "keep"):
        memory.keep = (view,) if packed is view else (view, packed)
        memory.keep_bytes = (driver.allocation_bytes(source_id, view.ptr)
                             if ends.source_on_device else 0) or view.nbytes
        if packed is not view:
            memory.keep_bytes += packed.nbytes
    result = _core.view_from_pointer(
        memory.address, view.shape, None, view.dtype, readonly=False,
        owner=_CopyOwner(memory, view if reads_later else None,
                         packed if reads_later else None),
        device=tuple(target), protocol="copy")
    return _core.mark_copied(result, stream)


def _packed_on_device(view, source, driver, stream):
    """``view`` (strided memory of a GPU) packed into new memory of the same device by the
    strided-copy kernel, on ``stream``: a C-contiguous View of it, for the transfer that
    follows on the same stream; None where the kernel declines (``stream`` belongs to
    another context). Its memory is stream-ordered staging, freed on ``stream`` when the
    View goes — after that transfer, in the stream's order, with no host wait; the caller
    lets it go before it returns, on success or failure, while ``stream`` surely exists."""
    memory = driver.allocate_temporary(source.id, view.nbytes, stream)
    if not strided_copy.launch(driver, source.id, memory.address, view, stream):
        return None   # a stream of another context: the caller's DMA path reads it there
    return _core.view_from_pointer(memory.address, view.shape, None, view.dtype,
                                   readonly=False, owner=memory, device=tuple(source),
                                   protocol="copy")


def _transfer(packed, memory, ends, driver, ordinal, stream, nbytes):
    """The transfers of a copy of ``packed`` (the View, or its packing) into ``memory``."""
    if not nbytes:
        return
    both_on_device = ends.source_on_device and ends.target_on_device
    if packed.is_c_contiguous:
        if both_on_device and ends.source.id != ends.target.id:
            driver.copy_peer_async(ends.target.id, memory.address, ends.source.id, packed.ptr,
                                   nbytes, stream)
        elif (ends.target_on_device and packed.device.type is DeviceType.CPU
              and staging.uses_ring(nbytes) and _pageable(driver, packed.ptr)):
            # large, from pageable memory: chunk by chunk through the pinned ring
            staging.upload(driver, ordinal, memory.address, packed, stream)
        else:
            driver.copy_async(ordinal, memory.address, packed.ptr, nbytes, stream)
    elif not (both_on_device
              and strided_copy.launch(driver, ordinal, memory.address, packed, stream)):
        for src, dst, width, height, pitch in plan_runs(packed.shape, packed.strides,
                                                        packed.itemsize,
                                                        driver.max_pitch(ordinal)):
            if height == 1:   # one row: a plain transfer, no pitch to bound its width
                driver.copy_async(ordinal, memory.address + dst, packed.ptr + src, width,
                                  stream)
            else:
                driver.copy_2d_async(ordinal, memory.address + dst, width, packed.ptr + src,
                                     pitch, width, height, stream)


def _pageable(driver, address: int) -> bool:
    """Whether host memory at ``address`` is pageable: the driver knows no pinned or
    registered memory there (a CPU-labelled tensor may be pinned: sent as it is)."""
    try:
        driver.locate_pointer(address)
    except BufferError:
        return True
    return False


class _CopyOwner:
    """What a copy's View keeps alive: the new memory, and — where an enqueued transfer
    may still read them — the source it was read from and what was packed (else None)."""

    __slots__ = ("memory", "source", "packed", "__weakref__")

    def __init__(self, memory, source, packed):
        self.memory, self.source, self.packed = memory, source, packed


def plan_runs(shape, byte_strides, itemsize, max_pitch=None):
    """The 2-D transfers that copy a strided layout into C order: tuples (source offset,
    destination offset, width, height, source pitch) in bytes — ``height`` rows of
    ``width`` contiguous bytes, ``pitch`` apart in the source, back to back in the
    destination. Contiguous runs are as long as the layout allows; the two innermost
    (merged) dimensions make one transfer, outer dimensions one transfer each. A pitch a
    transfer cannot use (negative, smaller than a row — overlapping or broadcast memory —
    or larger than the device's ``max_pitch``) becomes one transfer per row. The plan is
    the core's (``_csrc/transfer_runs.h``), which its own ROCm copies walk too."""
    return _core.transfer_runs(shape, byte_strides, itemsize, max_pitch)
