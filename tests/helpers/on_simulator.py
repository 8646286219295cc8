"""What the GPU suite's files share (``pytest -m gpu``, issue 32): whether this process
runs on the CUDA driver simulator, its controls, and the fixtures that slow its streams
down and check that nothing is left behind. On a real GPU (ARRAYPORT_GPU=hardware) the
simulator's counts and delays are not there, and the tests that need them skip."""

from __future__ import annotations

import gc
import os

import pytest

import cudasim
from arrayport.gpu import cuda as cuda_driver

def require_cuda_driver() -> None:
    """Skip the calling test module where no CUDA driver (nor the simulator) answers: at the
    top of each GPU suite file, before it imports what needs one."""
    try:
        cuda_driver.driver.library.get()
    except BufferError as error:
        pytest.skip(f"no CUDA driver or simulator: {error}", allow_module_level=True)


def _device_count() -> int:
    try:
        return cuda_driver.driver.device_count()
    except BufferError:
        return 0


SIMULATED = "CUDASIM_LIBRARY" in os.environ
# The simulator has two devices; a machine may have one (ARRAYPORT_GPU=hardware).
needs_two_devices = pytest.mark.skipif(_device_count() < 2,
                                       reason="needs a second GPU (this machine has one)")
simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"]) if SIMULATED else None
needs_simulator = pytest.mark.skipif(not SIMULATED, reason="counts and delays are the "
                                                           "simulator's")


@pytest.fixture
def slow_streams():
    """Asynchronous work takes 30 ms per item, so a missing wait is caught."""
    if simulator is not None:
        simulator.set_delay_us(30000)
    yield
    if simulator is not None:
        simulator.set_delay_us(2000)


@pytest.fixture
def without_kernels(monkeypatch):
    """The CUDA driver as one that cannot load arrayport's kernels (an older driver): copies
    take their DMA paths, which stay tested this way."""
    monkeypatch.setattr(cuda_driver.driver, "has_kernel", lambda *args: False)
    monkeypatch.setattr(cuda_driver.driver, "launch_kernel", lambda *args: False)


@pytest.fixture
def producer_stream():
    """A non-blocking stream of device 0 that a test's producer writes on; drained and
    destroyed after the test."""
    from sim_arrays import Stream
    stream = Stream(0)
    yield stream
    stream.synchronize()
    stream.close()


@pytest.fixture
def nothing_leaks():
    """No allocation, stream or event outlives the test — but the one event per context
    the driver keeps for reuse, sharing's events and streams (gpu.ipc), the pinned ring's chunks, and dead copy results' blocks
    held until their pool's next return (all released at exit: tests/test_gpu_suite.py
    checks that)."""
    from arrayport.gpu import ipc, staging
    before = simulator.live() if simulator else None
    cached = cuda_driver.driver.cached_events()
    sharing = ipc.kept()
    ring = staging.held(cuda_driver.driver)
    held = cuda_driver.driver.memory.held_results()
    yield
    if simulator is not None:
        gc.collect()
        allocations, events, streams = simulator.live()
        kept = cuda_driver.driver.cached_events() - cached
        ring_now = staging.held(cuda_driver.driver)               # the ring's, kept for reuse
        allocations -= ring_now[0] - ring[0]
        allocations -= cuda_driver.driver.memory.held_results() - held  # held for one wait
        kept += ring_now[1] - ring[1]
        kept += ipc.kept()[0] - sharing[0]                # sharing's, kept for reuse
        streams -= ipc.kept()[1] - sharing[1]
        assert (allocations, events - kept, streams) == before, \
            f"device memory, events or streams left behind: {(allocations, events - kept, streams)} " \
            f"(allocations, events, streams), before the test {before}"


@pytest.fixture
def streams(nothing_leaks):
    """(producer, consumer): two non-blocking streams of device 0, drained and destroyed
    after the test, which leaves nothing behind (``nothing_leaks``)."""
    from sim_arrays import Stream
    producer, consumer = Stream(0), Stream(0)
    yield producer, consumer
    gc.collect()
    for stream in (producer, consumer):
        stream.synchronize()
        stream.close()


_HELPERS = os.path.dirname(os.path.abspath(__file__))


def run_on_the_simulator(code: str) -> str:
    """``code`` in a new Python process whose libcuda.so.1 is this process's simulator;
    its output (stdout), the run failing the test when the process does. For what would
    leave this process's driver unusable (a fork, another library's device reset)."""
    import subprocess
    import sys
    import textwrap
    prelude = ("import ctypes, os, sys\n"
               f"sys.path.insert(0, {_HELPERS!r})\n"
               "ctypes.CDLL(os.environ['CUDASIM_LIBRARY'], mode=ctypes.RTLD_GLOBAL)\n")
    run = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def simulator_resets_contexts() -> bool:
    """Whether this process's simulator has ``cuDevicePrimaryCtxReset`` (older builds had
    not)."""
    import ctypes
    return hasattr(ctypes.CDLL(os.environ.get("CUDASIM_LIBRARY", "libcuda.so.1")),
                   "cuDevicePrimaryCtxReset_v2")
