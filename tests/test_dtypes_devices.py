"""arrayport.DType and arrayport.Device."""

import pickle

import numpy as np
import pytest

import arrayport as ap
from arrayport import DType, DTypeCode, Device, DeviceType
from optional import needs, optional_module

ml_dtypes = optional_module("ml_dtypes")

ALL_NAMES = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "float32", "float64", "bfloat16", "complex32", "complex64", "complex128", "bool",
    "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
    "float4_e2m1fn", "opaque_handle64",
]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_dlpack_type_has_a_name_that_round_trips(name):
    dtype = DType(name)
    assert dtype.name == name == str(dtype) and dtype == name
    assert DType(dtype.code, dtype.bits) is dtype
    assert pickle.loads(pickle.dumps(dtype)) is dtype
    assert hash(dtype) == hash(name)


def test_codes_bits_and_itemsizes():
    assert (DType("complex64").code, DType("complex64").bits) == (DTypeCode.COMPLEX, 64)
    assert DType("bool").bits == 8 and DType("bool").itemsize == 1
    assert DType("bfloat16").code == DTypeCode.BFLOAT and DType("bfloat16").itemsize == 2
    assert DType("float32x4").lanes == 4 and DType("float32x4").itemsize == 16
    assert DType("float6_e2m3fn").itemsize is None
    assert DType("float6_e2m3fn", padded=True).itemsize == 1
    assert DType("float4_e2m1fnx2").itemsize == 1 and DType("float4_e2m1fnx2").storage_bits == 8
    assert DType("float4_e2m1fn") != DType("float4_e2m1fn", padded=True)
    assert len(DTypeCode) == 19      # 0 to 17, and bcomplex (18) added after the 1.3 tag


@pytest.mark.parametrize("numpy_type", [np.bool_, np.int8, np.uint64, np.float16, np.float64,
                                        np.complex128])
def test_equality_with_numpy(numpy_type):
    dtype = DType(numpy_type)
    assert dtype == numpy_type and dtype == np.dtype(numpy_type)
    assert dtype.to_numpy() == np.dtype(numpy_type)


@needs('ml_dtypes')
@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e3m4",
                                  "float8_e8m0fnu", "float6_e2m3fn", "float4_e2m1fn"])
def test_ml_dtypes_map_by_name(name):
    numpy_dtype = np.dtype(getattr(ml_dtypes, name))
    dtype = DType(numpy_dtype)
    assert dtype.name == name and dtype == numpy_dtype
    assert dtype.padded == (dtype.bits < 8)
    assert dtype.to_numpy() == numpy_dtype


def test_unambiguous_only():
    assert DType("float32") != "float64" and DType("float32") != np.float64
    assert DType("float16") != DType("bfloat16")
    assert (DType("int32") == object()) is False
    with pytest.raises(ValueError, match="DType: unknown dtype name 'float'"):
        DType("float")
    with pytest.raises(ValueError, match="not in native byte order"):
        DType(np.dtype(">f4"))
    with pytest.raises(TypeError, match="no DLPack equivalent"):
        DType(np.dtype([("a", "i4")]))
    with pytest.raises(ValueError, match="needs bits 4"):
        DType(DTypeCode.FLOAT4_E2M1FN, 8)
    with pytest.raises(TypeError, match="NumPy has no dtype for packed float4_e2m1fn"):
        DType("float4_e2m1fn").to_numpy()
    with pytest.raises(AttributeError):
        DType("int8").bits = 16


def test_device_types_are_all_nineteen():
    assert len(DeviceType) == 19       # DLPack 1.3's sixteen, and 19-21 added after its tag
    assert {int(t) for t in DeviceType} == set(range(1, 22)) - {5, 6}
    assert (DeviceType.TPU, DeviceType.TPU_HOST, DeviceType.ASCEND) == (19, 20, 21)


@pytest.mark.parametrize("text,expected,canonical", [
    ("cpu", (1, 0), "cpu"), ("cpu:0", (1, 0), "cpu"), ("cuda", (2, 0), "cuda:0"),
    ("CUDA:3", (2, 3), "cuda:3"), ("cuda_host", (3, 0), "cuda_host"),
    ("rocm:1", (10, 1), "rocm:1"), ("cuda_managed", (13, 0), "cuda_managed"),
    ("opencl:2", (4, 2), "opencl:2"), ("trn:1", (18, 1), "trn:1"), ("tpu:1", (19, 1), "tpu:1"),
    ("tpu_host", (20, 0), "tpu_host"), ("ascend:2", (21, 2), "ascend:2"),
])
def test_device_strings(text, expected, canonical):
    device = Device(text)
    assert device == expected and str(device) == canonical
    assert Device(expected) == device == Device(*expected)
    assert (device.type, device.id) == expected and isinstance(device.type, DeviceType)
    assert pickle.loads(pickle.dumps(device)) == device


@needs('torch')
def test_device_from_dlpack_device_tuple_and_framework_objects():
    torch = pytest.importorskip("torch")
    assert Device(ap.from_dlpack(np.ones(1)).__dlpack_device__()) == Device("cpu")
    assert Device(torch.device("cpu")) == (1, 0)


@pytest.mark.parametrize("bad,error", [
    ("tensor_unit", ValueError), ("cuda:x", ValueError), ((5, 0), ValueError), ((2, -1), ValueError),
    ((2,), TypeError), ((2.0, 0), TypeError), (("cuda", 0), TypeError),
])
def test_bad_devices(bad, error):
    with pytest.raises(error, match="Device: "):
        Device(bad)


def test_device_equals_its_name():
    from arrayport import Device

    assert Device(2, 1) == "cuda:1" and Device("cpu") == "cpu"
    assert Device(2, 1) != "cuda:0" and Device(2, 1) != "not a device"
    assert hash(Device(2, 1)) == hash((2, 1))


def test_devices_key_sets_and_dicts_with_tuples_not_names():
    """The decision in docs/architecture.md: Device hashes as its tuple, so Devices and
    (type, id) tuples find each other in sets and dicts; names are a comparison only."""
    from arrayport import Device

    devices = {Device("cuda:1"), Device("cpu")}
    assert Device(2, 1) in devices and (2, 1) in devices and (1, 0) in devices
    assert {(2, 1): "gpu one"}[Device("CUDA:1")] == "gpu one"
    assert len({Device("cuda:1"), Device("gpu:1"), (2, 1), Device(2, 1)}) == 1
    assert Device("cuda:1") in {Device(name) for name in ("cuda:1", "cpu")}


def test_device_ids_beyond_int32_are_refused():
    # Found by the fuzzer: an id DLPack's int32_t cannot hold reached NumPy as OverflowError.
    with pytest.raises(ValueError, match="device id must be in 0..2\\*\\*31-1"):
        ap.Device((2, 2**31))
    with pytest.raises(ValueError, match="device id"):
        ap.from_dlpack(np.zeros(2), device=(2, 2**63 - 1))
    assert ap.Device((2, 2**31 - 1)).id == 2**31 - 1


# ---- device-kind facts: DeviceType states them; the core's C tables are held to it ----------

def test_device_kind_facts_are_stated_on_devicetype():
    from arrayport.devices import DeviceType as T
    assert {t for t in T if t.is_host_accessible} == {T.CPU, T.CUDA_HOST, T.ROCM_HOST,
                                                       T.TPU_HOST}
    assert {t for t in T if t.is_gpu_memory} == {T.CUDA, T.CUDA_MANAGED, T.ROCM}
    assert {t.vendor for t in T} == {"cuda", "rocm", None}
    assert T.CUDA_MANAGED.vendor == "cuda" and T.ROCM_HOST.vendor == "rocm"


@pytest.mark.parametrize("device_type", [*ap.DeviceType, 0, 5, 6, 22, 2**31 - 1, -1])
def test_the_cores_device_tables_say_what_devicetype_says(device_type):
    from arrayport import _core
    known = device_type in set(ap.DeviceType)
    kind = ap.DeviceType(device_type) if known else None
    expected = ((kind.is_host_accessible, kind.is_gpu_memory,
                 kind.is_gpu_memory and kind.vendor == "cuda") if known
                else (False, False, False))
    assert _core.device_type_facts(int(device_type)) == expected
    # None's stream: the legacy default stream on CUDA kinds, the null stream on ROCm's
    # (DLPack's rule; the core's _NONE_STREAM is its one statement)
    vendor = kind.vendor if known else None
    assert _core.none_stream_of(int(device_type)) == {"cuda": 1, "rocm": 0, None: None}[vendor]


def test_the_gpu_layer_asks_devicetype():
    from arrayport import gpu
    assert gpu.is_device_memory(ap.DeviceType.ROCM) and not gpu.is_device_memory(3)
    assert not gpu.is_device_memory(99)


# ---- type facts: arrayport.dtypes states them; the core's C table is held to it --------------

def test_the_cores_type_table_takes_exactly_the_types_dtypes_names():
    # Every code a byte can hold, every width, lanes 0, 1 and 2: a new code added to one
    # statement (or a float8 code not next to the others) and not to the other fails here.
    from arrayport import _core
    from arrayport.dtypes import dtype_problem
    differing = [(code, bits, lanes) for code in range(256) for bits in range(256)
                 for lanes in (0, 1, 2)
                 if _core.dtype_is_valid(code, bits, lanes)
                 != (dtype_problem(code, bits, lanes) is None)]
    assert differing == []


def test_the_cores_device_type_names_are_devicetypes():
    from arrayport import _core
    assert {t for t in range(-2, 64) if _core.device_type_is_known(t)} == {
        int(t) for t in ap.DeviceType}
