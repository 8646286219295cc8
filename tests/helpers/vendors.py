"""The two GPU vendors as the GPU suite's shared-rule tests see them (issue 54): CUDA on the
CUDA driver simulator, ROCm on the HIP runtime simulator, both loaded by ``pytest -m gpu``
(tests/conftest.py). A ``Vendor`` names what differs — DLPack's device types, what stream
None stands for, the stream values refused, the vendor's own arrays and streams
(sim_arrays.py, hip_arrays.py), its simulator's controls, arrayport's driver for it — so
that one test states a rule once and runs on both.

``Producer`` is a vendor's device array behind DLPack, as a GPU library offers it: its
``__dlpack__`` checks the consumer's stream by the vendor's rules, makes that stream wait
for its pending write (an event, on the GPU), and records what it was asked."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import numpy as np
import pytest

import cudasim
import hip_arrays
import hipsim
import sim_arrays
from arrayport import _core


@dataclass(frozen=True)
class Vendor:
    name: str                    # arrayport's device label: "cuda", "rocm"
    device_type: int             # DLPack's device memory type
    host_type: int               # DLPack's pinned host memory type
    none_stream: int             # the stream DLPack's None stands for
    refused_streams: tuple       # DLPack stream values that are no streams on this vendor
    arrays: object = field(repr=False)          # sim_arrays or hip_arrays
    library_variable: str = field(repr=False)   # where conftest put its simulator
    controls: type = field(repr=False)          # cudasim.Simulator or hipsim.Simulator

    def __str__(self):
        return self.name

    @property
    def simulated(self) -> bool:
        return self.library_variable in os.environ

    @property
    def simulator(self):
        return self.controls(os.environ[self.library_variable]) if self.simulated else None

    @property
    def driver(self):
        from arrayport import gpu
        return gpu.driver_for(self.device_type)

    def device(self, ordinal=0) -> str:
        return f"{self.name}:{ordinal}"

    def stream(self, device=0):
        return self.arrays.Stream(device)

    def array(self, host, **options):
        return self.arrays.DeviceArray(host, **options)

    def make_wait(self, device, consumer, producer):
        self.arrays.make_wait(device, consumer, producer)

    def read_on(self, stream: int, view):
        """A contiguous device ``view``'s values as a consumer working on ``stream`` (a
        DLPack value) reads them: the vendor's own copy, queued there, nothing else
        waited for."""
        assert view.is_c_contiguous
        return self.arrays.read_on(stream, view.device.id, view.ptr, view.shape,
                                   np.dtype(view.dtype.name))

    def available(self) -> str | None:
        """Why this vendor's tests cannot run here (None: they can)."""
        try:
            count = self.driver.device_count()
        except BufferError as error:
            return f"no {self.name} runtime: {error}"
        return None if count else f"no {self.name} device"


CUDA = Vendor("cuda", 2, 3, 1, (0,), sim_arrays, "CUDASIM_LIBRARY", cudasim.Simulator)
ROCM = Vendor("rocm", 10, 11, 0, (1, 2), hip_arrays, "HIPSIM_LIBRARY", hipsim.Simulator)
VENDORS = (CUDA, ROCM)


@pytest.fixture(params=VENDORS, ids=str)
def vendor(request):
    """Each vendor in turn; skipped (saying why) where its runtime is not here."""
    why = request.param.available()
    if why is not None:
        pytest.skip(why)
    return request.param


class Producer:
    """``array`` (the vendor's DeviceArray, its write pending on ``array.stream``) behind
    DLPack. ``asked`` lists the stream each ``__dlpack__`` call was given."""

    def __init__(self, vendor: Vendor, array):
        self.vendor, self.array, self.asked = vendor, array, []

    def __dlpack_device__(self):
        kind = self.vendor.host_type if self.array.kind == "pinned" else self.vendor.device_type
        return (kind, 0 if self.array.kind == "pinned" else self.array.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked.append(stream)
        vendor, array = self.vendor, self.array
        if stream is not None and (stream < -1 or stream in vendor.refused_streams):
            raise ValueError(f"test producer: stream {stream} is no {vendor} stream")
        if array.stream is not None and stream != -1:
            if array.kind == "pinned":
                array.stream.synchronize()   # host memory: its readers may be the CPU
            else:
                vendor.make_wait(array.device,
                                 vendor.none_stream if stream is None else stream,
                                 int(array.stream))
        view = _core.view_from_pointer(array.ptr, array.shape, None, array.dtype,
                                       readonly=False, owner=self,
                                       device=self.__dlpack_device__(), protocol="dlpack")
        # the capsule made by arrayport's export, told to order nothing (done above)
        return view.__dlpack__(stream=None if array.kind == "pinned" else -1,
                               max_version=max_version)


def leaks(vendor: Vendor):
    """What ``vendor``'s simulator has alive now, less what arrayport's driver keeps for
    reuse (its events, its pinned ring, copy results' blocks held until the pool's next
    return): compared before and after a test."""
    from arrayport.gpu import staging
    gc.collect()
    allocations, events, streams = vendor.simulator.live()
    driver = vendor.driver
    ring = staging.held(driver)
    return (allocations - ring[0] - driver.memory.held_results(),
            events - driver.cached_events() - ring[1], streams)
