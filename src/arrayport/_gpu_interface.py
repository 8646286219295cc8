"""The one interface of a GPU vendor's driver (``gpu.driver_for`` returns one): what the copy
and stream layers ask of it. Both drivers, ``_cuda_driver.driver`` and ``_hip_driver.driver``
(``_gpu_driver.VendorDriver`` instances), provide it; tests/test_architecture.py holds them
to it. Kept out of
gpu.py so that ``import arrayport`` does not import ``typing``."""

from __future__ import annotations

from typing import Any, Protocol


class GpuDriver(Protocol):
    """What the copy and stream layers ask of a GPU vendor's driver — the one interface
    both drivers (``_cuda_driver.driver``, ``_hip_driver.driver``) provide.
    Ordinals are the vendor's device numbers; streams and pointers are integer handles;
    every call raises the vendor's ``DriverUnavailable`` when there is no usable driver."""

    def device_count(self) -> int: ...
    def current_device(self) -> int: ...
    def on_device(self, ordinal: int) -> Any: ...  # a context manager
    def locate_pointer(self, ptr: int) -> tuple[int, int]: ...  # (DLPack type, device id)
    def make_stream_wait(self, ordinal: int, consumer: int, producer: int,
                         producer_ordinal: int | None = None) -> None: ...
    def synchronize(self, ordinal: int, stream: int) -> None: ...
    def allocate_device(self, ordinal: int, nbytes: int, managed: bool = False) -> Any: ...
    def allocate_pinned(self, nbytes: int) -> Any: ...
    def copy_async(self, ordinal: int, dst: int, src: int, nbytes: int, stream: int) -> None: ...
    def copy_2d_async(self, ordinal: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                      width: int, height: int, stream: int) -> None: ...
    def copy_peer_async(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int,
                        nbytes: int, stream: int) -> None: ...
