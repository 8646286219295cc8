"""View.__dlpack__ / __dlpack_device__ exactly as the array API standard specifies."""

import numpy as np
import pytest

import arrayport as ap
from producer import spec

READ_ONLY, IS_COPIED, PADDED = 1, 2, 4


@pytest.fixture
def cpu_view():
    return ap.from_dlpack(np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:])


def device_view(producer, device):
    return ap.from_dlpack(producer.capsule(spec(device=device)))


@pytest.mark.parametrize("max_version,versioned", [
    (None, False), ((0, 8), False), ((1, 0), True), ((1, 3), True), ((1, 99), True),
    ((2, 0), True),
])
def test_max_version_picks_the_capsule_kind(producer, cpu_view, max_version, versioned):
    capsule = cpu_view.__dlpack__(max_version=max_version)
    info = producer.inspect(capsule)
    assert info.versioned == versioned
    assert ("dltensor_versioned" in repr(capsule)) == versioned
    if versioned:
        assert (info.major, info.minor) == (1, 3)
        assert info.flags == 0


def test_export_describes_the_view_in_one_allocation(producer, cpu_view):
    info = producer.inspect(cpu_view.__dlpack__(max_version=(1, 3)))
    assert (info.device_type, info.device_id, info.ndim) == (1, 0, 2)
    assert (info.code, info.bits, info.lanes) == (0, 32, 1)
    assert list(info.shape[:2]) == [3, 3] and list(info.strides[:2]) == [4, 1]
    assert not info.null_strides
    assert info.data + info.byte_offset == cpu_view.ptr
    # shape and strides live right behind the managed struct (80 bytes), one block.
    assert info.shape_address == info.block + 80


@pytest.mark.parametrize("bad", [(1,), [1, 0], (1, "0"), (True, 0), "1.0"])
def test_bad_max_version_is_a_type_error(cpu_view, bad):
    with pytest.raises(TypeError, match="dlpack: max_version"):
        cpu_view.__dlpack__(max_version=bad)


def test_read_only_is_flagged_and_refused_as_legacy(producer):
    source = np.ones(3)
    source.flags.writeable = False
    view = ap.from_dlpack(source)
    assert producer.inspect(view.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    with pytest.raises(BufferError, match="dlpack: a read-only View cannot be exported as a "
                                          "legacy"):
        view.__dlpack__()


def test_copy_true_sets_is_copied_and_really_copies(producer, cpu_view):
    capsule = cpu_view.__dlpack__(max_version=(1, 3), copy=True)
    info = producer.inspect(capsule)
    assert info.flags == IS_COPIED and info.data != cpu_view.ptr
    copied = np.from_dlpack(ap.from_dlpack(capsule))
    np.testing.assert_array_equal(copied, np.from_dlpack(cpu_view))
    assert copied.flags.c_contiguous
    copied[0, 0] = -1
    assert np.from_dlpack(cpu_view)[0, 0] != -1


def test_copy_of_read_only_is_writable(producer):
    source = np.ones(3)
    source.flags.writeable = False
    info = producer.inspect(ap.from_dlpack(source).__dlpack__(max_version=(1, 3), copy=True))
    assert info.flags == IS_COPIED


def test_copy_false_and_none_share(producer, cpu_view):
    for copy in (False, None):
        info = producer.inspect(cpu_view.__dlpack__(max_version=(1, 3), copy=copy))
        assert info.data + info.byte_offset == cpu_view.ptr and info.flags == 0


def test_copy_must_be_bool(cpu_view):
    with pytest.raises(TypeError, match="dlpack: copy must be True, False or None"):
        cpu_view.__dlpack__(max_version=(1, 3), copy=1)


@pytest.mark.parametrize("stream", [0, 1, 2, -1, 12345, "x"])
def test_cpu_accepts_only_stream_none(cpu_view, stream):
    with pytest.raises(ValueError, match="dlpack: stream must be None for cpu memory"):
        cpu_view.__dlpack__(stream=stream)
    cpu_view.__dlpack__(stream=None)


@pytest.mark.parametrize("stream,error", [
    (None, None), (-1, None), (1, None), (2, None), (0x7F00DEAD, None),
    (0, "ambiguous on CUDA"), (-2, "must be >= -1"), ("1", "must be an int"),
    (1.0, "must be an int"),
])
def test_cuda_stream_values(producer, stream, error):
    view = device_view(producer, (2, 0))
    if error is None:
        view.__dlpack__(stream=stream, max_version=(1, 3))
    else:
        with pytest.raises((ValueError, TypeError), match=f"dlpack: stream.*{error}"):
            view.__dlpack__(stream=stream, max_version=(1, 3))


@pytest.mark.parametrize("stream,ok", [(None, True), (-1, True), (0, True), (99, True),
                                       (1, False), (2, False)])
def test_rocm_stream_values(producer, stream, ok):
    view = device_view(producer, (10, 0))
    if ok:
        view.__dlpack__(stream=stream, max_version=(1, 3))
    else:
        with pytest.raises(ValueError, match="not supported on ROCm"):
            view.__dlpack__(stream=stream, max_version=(1, 3))


def test_dl_device_same_device_is_zero_copy(producer, cpu_view):
    info = producer.inspect(cpu_view.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert info.data == cpu_view.ptr and info.flags == 0
    enum_device = cpu_view.__dlpack_device__()
    assert producer.inspect(cpu_view.__dlpack__(max_version=(1, 3), dl_device=enum_device))


def test_dl_device_needing_a_copy(cpu_view, without_cuda):
    with pytest.raises(ValueError, match="dlpack: exporting cpu memory to cuda:0 needs a copy, "
                                         "but copy=False"):
        cpu_view.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError, match=r"^dlpack: cannot copy cpu memory to cuda:0: cuda: "
                                          r"the CUDA driver \(.*\) cannot be loaded"):
        cpu_view.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    with pytest.raises(BufferError, match="^dlpack: cannot copy cpu memory to vulkan:0: "
                                          "arrayport has no driver for vulkan devices"):
        cpu_view.__dlpack__(max_version=(1, 3), dl_device=(7, 0))


@pytest.mark.parametrize("dl_device,error,match", [
    ((99, 0), BufferError, "dl_device type 99 is not a DLPack device type"),
    ((1, -1), BufferError, "dl_device id -1"),
    ((1,), TypeError, "dl_device must be a"),
    ("cpu", TypeError, "dl_device must be a"),
    ((1.0, 0), TypeError, "dl_device must hold ints"),
])
def test_bad_dl_device(cpu_view, dl_device, error, match):
    with pytest.raises(error, match=f"dlpack: {match}"):
        cpu_view.__dlpack__(max_version=(1, 3), dl_device=dl_device)


def test_pinned_host_memory_exports_to_cpu_without_copy(producer):
    view = device_view(producer, (3, 0))
    info = producer.inspect(view.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert (info.device_type, info.data + info.byte_offset, info.flags) == (1, view.ptr, 0)
    copied = producer.inspect(view.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=True))
    assert copied.device_type == 1 and copied.flags == IS_COPIED and copied.data != view.ptr


def test_gpu_memory_copy_to_cpu_is_refused_without_driver(producer, without_cuda):
    view = device_view(producer, (2, 1))
    with pytest.raises(BufferError, match="^dlpack: cannot copy cuda:1 memory to cpu: cuda: "
                                          "the CUDA driver"):
        view.__dlpack__(max_version=(1, 3), dl_device=(1, 0))


def test_padded_sub_byte_keeps_its_flag(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(4,), dtype=(17, 4, 1), flags=PADDED)))
    assert producer.inspect(view.__dlpack__(max_version=(1, 3))).flags == PADDED
    with pytest.raises(BufferError, match="padded sub-byte View cannot be exported as a legacy"):
        view.__dlpack__()


def test_dlpack_device_is_an_enum_tuple(cpu_view):
    device = cpu_view.__dlpack_device__()
    assert device == (1, 0) and device[0] is ap.DeviceType.CPU
