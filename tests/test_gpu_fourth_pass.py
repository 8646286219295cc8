"""The fourth hostile pass (issue 51) on the CUDA driver simulator: the paths that pick a
device, each on the second device, where a device-0 assumption survived a mutation audit
(a copy to the host run on device 0 whatever the source's; the exchange table asked for
device 0's current stream whatever the tensor's). The host-side cases are in
tests/test_hostile_fourth_pass.py."""

import gc

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import contents  # noqa: E402
from exchange_producer import ExchangeTensor  # noqa: E402
from on_simulator import needs_two_devices, nothing_leaks, slow_streams  # noqa: E402,F401
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
