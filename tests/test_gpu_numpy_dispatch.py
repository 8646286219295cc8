"""NumPy functions on CUDA Views run on CuPy (`pytest -m gpu`): results are Views on the
same device, out= writes in place, host/device mixes are refused. Skipped, with the
reason, without CuPy and a CUDA device."""

import numpy as np
import pytest

import arrayport as ap

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")
try:
    cupy.cuda.runtime.getDeviceCount()
except Exception as error:  # no driver, no device
    pytest.skip(f"no CUDA device for CuPy: {error}", allow_module_level=True)

DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.uint64, np.float16,
          np.float32, np.float64, np.complex64, np.complex128]
UFUNCS = [np.exp, np.negative, np.sqrt, np.sin, np.absolute, np.isnan, np.add, np.multiply,
          np.maximum, np.equal, np.logical_and, np.floor_divide]


def device_view(dtype, shift=0):
    values = (cupy.arange(6).reshape(3, 2).T % 5) + 1 + shift
    return ap.view(values.astype(dtype))


def host(result):
    return cupy.asnumpy(cupy.from_dlpack(result))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_ufuncs_on_device_views_run_on_cupy_and_stay_on_the_device(dtype):
    for ufunc in UFUNCS:
        inputs = [device_view(dtype, i) for i in range(ufunc.nin)]
        arrays = [cupy.from_dlpack(v) for v in inputs]
        try:
            expected = ufunc(*arrays)
        except Exception as error:
            with pytest.raises(type(error)):
                ufunc(*inputs)
            continue
        result = ufunc(*inputs)
        assert type(result) is ap.View and result.device.type == ap.DeviceType.CUDA
        np.testing.assert_array_equal(host(result), cupy.asnumpy(expected), ufunc.__name__)


def test_array_functions_on_device_views_run_on_cupy():
    view = device_view(np.float32)
    mean = np.mean(view, axis=0)
    assert type(mean) is ap.View and mean.device.type == ap.DeviceType.CUDA
    np.testing.assert_allclose(host(mean), cupy.asnumpy(cupy.from_dlpack(view)).mean(axis=0))
    joined = np.concatenate([view, view])
    assert joined.shape == (4, 3) and joined.device == view.device
    assert float(np.linalg.norm(view)) == pytest.approx(
        float(cupy.linalg.norm(cupy.from_dlpack(view))))


def test_device_out_views_are_written_in_place():
    target = cupy.zeros((2, 3), dtype=cupy.float32)
    out = ap.view(target)
    assert np.add(device_view(np.float32), 1, out=out) is out
    assert float(target.sum()) == float((cupy.from_dlpack(device_view(np.float32)) + 1).sum())


def test_host_and_device_operands_are_refused_not_copied():
    with pytest.raises(TypeError):
        np.add(device_view(np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(TypeError):
        np.add(ap.view(np.ones((2, 3), np.float32)), device_view(np.float32))
