"""The fourth hostile pass (issue 51) on the CUDA driver simulator: the paths that pick a
device, each on the second device, where a device-0 assumption survived a mutation audit
(a copy to the host run on device 0 whatever the source's; the exchange table asked for
device 0's current stream whatever the tensor's); a context reset by another library,
whose kernel modules went with it; a forked child. The host-side cases are in
tests/test_hostile_fourth_pass.py."""

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from exchange_producer import ExchangeTensor  # noqa: E402
from on_simulator import (needs_simulator, needs_two_devices, nothing_leaks,  # noqa: E402,F401
                          slow_streams)
from sim_arrays import DeviceArray, Stream  # noqa: E402

VALUES = np.arange(6 * 8, dtype=np.float32).reshape(6, 8) + 1


@pytest.fixture
def second_device_stream(nothing_leaks):
    stream = Stream(1)
    yield stream
    gc.collect()
    stream.synchronize()
    stream.close()


@needs_two_devices
def test_the_exchange_table_is_asked_for_the_tensor_s_own_device(second_device_stream,
                                                                 slow_streams):
    stream = second_device_stream
    ExchangeTensor.current_stream.clear()
    ExchangeTensor.current_stream[1] = int(stream)    # device 1's current stream: the write
    ExchangeTensor.current_stream[0] = 0              # device 0's: the default stream
    try:
        tensor = ExchangeTensor(DeviceArray(VALUES, device=1, stream=stream, busy=3))
        view = ap.view(tensor)
        assert view.device == ap.Device("cuda:1")
        # Asked for device 0, the View would have no work pending (0: the default stream),
        # and the host copy below would read the memory before the write.
        assert _core.pending_stream(view) == int(stream)
        assert contents(view.copy(device="cpu")) == VALUES.tobytes()
        del view, tensor
    finally:
        ExchangeTensor.current_stream.clear()


@needs_two_devices
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_copy_to_the_host_runs_on_the_source_s_device(second_device_stream, slow_streams,
                                                       layout):
    stream = second_device_stream
    array = DeviceArray(VALUES, device=1, stream=stream, busy=3)
    view = ap.view(array)
    assert view.device == ap.Device("cuda:1")
    source = view if layout == "contiguous" else view.T
    expected = VALUES if layout == "contiguous" else VALUES.T
    host = source.copy(device="cpu")
    assert host.device == ap.Device("cpu")
    assert np.array_equal(ap.to_numpy(host), expected)
    host_on_stream = source.copy(device="cpu", stream=int(stream))    # device 1's stream
    assert np.array_equal(ap.to_numpy(host_on_stream), expected)
    del view, source, host, host_on_stream
    array.free()


# ---- in a process of its own: what would leave this process's driver unusable -----------------

HELPERS = Path(__file__).resolve().parent / "helpers"


def run_on_the_simulator(code):
    """``code`` in a new Python process whose libcuda.so.1 is this process's simulator;
    its output (stdout), the run failing the test when the process does."""
    prelude = ("import ctypes, os, sys\n"
               f"sys.path.insert(0, {str(HELPERS)!r})\n"
               "ctypes.CDLL(os.environ['CUDASIM_LIBRARY'], mode=ctypes.RTLD_GLOBAL)\n")
    run = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def _simulator_resets_contexts():
    import ctypes
    return hasattr(ctypes.CDLL(os.environ.get("CUDASIM_LIBRARY", "libcuda.so.1")),
                   "cuDevicePrimaryCtxReset_v2")


@needs_simulator
@pytest.mark.skipif(not _simulator_resets_contexts(),
                    reason="this simulator has no cuDevicePrimaryCtxReset")
def test_a_context_reset_by_another_library_reloads_the_kernels_and_never_launches_a_dead_one():
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap, cudasim
        from sim_arrays import DeviceArray
        simulator = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])
        values = np.arange(48, dtype=np.float32).reshape(6, 8)

        def copied():   # a strided device copy: arrayport's kernel
            array = DeviceArray(values)
            view = ap.view(array).T.copy()
            out = view.copy(device="cpu")
            result = np.array(ap.to_numpy(out))
            del view, out
            array.free()
            return result

        assert np.array_equal(copied(), values.T)
        loads = simulator.counters()["cuModuleLoadData"]
        library = ctypes.CDLL(os.environ["CUDASIM_LIBRARY"])
        assert library.cuDevicePrimaryCtxReset_v2(0) == 0    # another library resets cuda:0
        assert np.array_equal(copied(), values.T)            # its kernel loaded again
        assert simulator.counters()["cuModuleLoadData"] - loads == 1
        print("ok")
    """)
    assert output.strip().endswith("ok")


@needs_simulator
def test_a_forked_child_that_touches_a_gpu_view_gets_a_clear_error():
    output = run_on_the_simulator("""
        import numpy as np, arrayport as ap
        from sim_arrays import DeviceArray
        array = DeviceArray(np.arange(6, dtype=np.float32))
        view = ap.view(array)
        assert ap.to_numpy(view.copy(device="cpu")).tolist() == list(range(6))
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:                     # the driver's state does not survive a fork
            os.close(reader)
            try:
                view.copy(device="cpu")
                answer = "copied"
            except ap.DriverUnavailable as refusal:
                answer = f"refused: {refusal}"
            answer += " | host: " + str(ap.to_numpy(ap.view(np.arange(3))).tolist())
            os.write(writer, answer.encode())
            os._exit(0)
        os.close(writer)
        answer = os.read(reader, 4096).decode()
        os.waitpid(child, 0)
        print(answer)
        assert ap.to_numpy(view.copy(device="cpu")).tolist() == list(range(6))  # parent: fine
        del view
        array.free()
    """)
    assert ("refused: copy: cannot copy cuda:0 memory to cpu: cuda: this process is a fork "
            "of one that had already used") in output
    assert "spawn" in output and "host: [0, 1, 2]" in output
