"""Scalars of device Views, and ``to_numpy(copy=True)`` of device data (issue 44): the value
comes back through a device-to-host copy the user asked for (``float``, ``int``… of one
element ask by their nature); without ``copy=True`` ``to_numpy`` still refuses, saying how."""

import numpy as np
import pytest

import arrayport as ap

pytestmark = pytest.mark.gpu

from on_simulator import require_cuda_driver  # noqa: E402

require_cuda_driver()

from driver_log import device_array  # noqa: E402
from on_simulator import nothing_leaks  # noqa: E402,F401


def test_the_one_value_of_a_device_view(nothing_leaks):
    view = device_array(np.array(2.5))
    assert float(view) == 2.5 and int(view) == 2 and complex(view) == 2.5 and bool(view)
    del view


def test_to_numpy_copies_device_data_only_when_asked(nothing_leaks):
    values = np.arange(12.0).reshape(3, 4)
    view = device_array(values.T)
    with pytest.raises(BufferError, match="pass copy=True"):
        ap.to_numpy(view)
    host = ap.to_numpy(view, copy=True)
    np.testing.assert_array_equal(host, values.T)
    assert host.flags.writeable and host.flags.c_contiguous
    del view
