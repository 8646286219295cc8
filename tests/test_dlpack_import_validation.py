"""DLPack import from hand-built capsules: every malformed case gets the right exception,
a message naming dlpack and the problem, and the producer's deleter runs exactly once."""

import gc

import pytest

import arrayport as ap
from arrayport.cli import capsules
from producer import spec

MALFORMED = {
    "ndim negative": (dict(ndim=-1), "ndim -1"),
    "ndim too large": (dict(shape=(1,) * 65), "ndim 65"),
    "shape NULL": (dict(null_shape=1), "shape is NULL"),
    "shape negative": (dict(shape=(2, -3)), "shape[1] is negative"),
    "strides NULL in 1.2+": (dict(null_strides=1, version=(1, 2)), "strides is NULL"),
    "lanes zero": (dict(dtype=(2, 32, 0)), "lanes must be >= 1"),
    "float6 needs 6 bits": (dict(dtype=(15, 8, 1)), "needs bits 6"),
    "float4 needs 4 bits": (dict(dtype=(17, 8, 1)), "needs bits 4"),
    "bool needs 8 bits": (dict(dtype=(6, 16, 1)), "needs bits 8"),
    "float bits": (dict(dtype=(2, 24, 1)), "needs bits 16 or 32 or 64"),
    "unknown dtype code": (dict(dtype=(99, 8, 1)), "unknown dtype code 99"),
    "byte_offset too large": (dict(byte_offset=2**63), "byte_offset"),
    "data NULL with elements": (dict(null_data=1), "data is NULL for a tensor with 6 elements"),
    "unassigned device type": (dict(device=(5, 0)), "device type 5"),
    "unknown device type": (dict(device=(99, 0)), "device type 99"),
    "negative device id": (dict(device=(2, -1)), "device id -1"),
    "unknown flags": (dict(flags=1 << 7), "unknown flag bits 0x80"),
    "strides overflow": (dict(shape=(3, 3), strides=(2**62, 1)), "outside the address space"),
    "size overflow": (dict(shape=(2**32, 2**32), strides=(1, 1)), "more elements than fit"),
    "packed sub-byte not contiguous": (
        dict(shape=(4,), strides=(2,), dtype=(17, 4, 1)), "must be C-contiguous"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_capsule_is_refused_and_freed_once(producer, live, case):
    fields, message = MALFORMED[case]
    capsule = producer.capsule(spec(**fields))
    with pytest.raises(BufferError, match="^dlpack: ") as error:
        ap.from_dlpack(capsule)
    assert message in str(error.value)
    # A failed import leaves the capsule unconsumed: its own destructor frees it.
    assert live.delta() == {}
    del capsule, error
    assert live.delta() == {"producer_deleter_calls": 1}


@pytest.mark.parametrize("version", [(2, 0), (0, 9)])
def test_foreign_major_version_calls_deleter_and_touches_nothing(producer, live, version):
    capsule = producer.capsule(spec(version=version, ndim=-5))  # the rest is unreadable
    with pytest.raises(BufferError, match=rf"dlpack: capsule has DLPack version "
                                          rf"{version[0]}\.{version[1]}"):
        ap.from_dlpack(capsule)
    assert live.delta() == {"producer_deleter_calls": 1}
    del capsule
    assert live.delta() == {"producer_deleter_calls": 1}  # not a second time


def test_newer_minor_version_with_known_content_is_accepted(producer, live):
    view = ap.from_dlpack(producer.capsule(spec(version=(1, 9))))
    assert view.shape == (2, 3)
    del view
    assert live.delta() == {"producer_deleter_calls": 1}


@pytest.mark.parametrize("versioned,version", [(False, (0, 0)), (True, (1, 1))])
def test_null_strides_mean_c_contiguous_for_old_producers(producer, versioned, version):
    view = ap.from_dlpack(producer.capsule(
        spec(shape=(2, 3, 4), null_strides=1, versioned=versioned, version=version)))
    assert view.element_strides == (12, 4, 1)
    assert view.strides == (48, 16, 4)
    assert view.is_c_contiguous


def test_zero_dim_with_null_shape_is_accepted(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(), null_shape=1)))
    assert (view.ndim, view.shape, view.size, view.nbytes) == (0, (), 1, 4)


def test_size_zero_with_null_data_is_accepted(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(0, 3), null_data=1)))
    assert (view.shape, view.size, view.ptr, view.nbytes) == ((0, 3), 0, 0, 0)
    assert view.is_c_contiguous and view.is_f_contiguous


def test_legacy_capsule_is_writable_and_renamed(producer, live):
    capsule = producer.capsule(spec(versioned=False))
    view = ap.from_dlpack(capsule)
    assert not view.readonly
    assert "used_dltensor" in repr(capsule)
    with pytest.raises(BufferError, match="dlpack: capsule 'used_dltensor' was already consumed"):
        ap.from_dlpack(capsule)
    del view, capsule
    assert live.delta() == {"producer_deleter_calls": 1}


def test_versioned_capsule_is_renamed_and_owned_by_the_view(producer, live):
    capsule = producer.capsule(spec(flags=1))
    view = ap.from_dlpack(capsule)
    assert "used_dltensor_versioned" in repr(capsule)
    assert view.readonly and view.owner is capsule and view.protocol == "dlpack"
    assert live.delta() == {"imported": 1}
    del capsule
    assert live.delta() == {"imported": 1}  # the View keeps the tensor
    del view
    assert live.delta() == {"producer_deleter_calls": 1}


def test_wrong_capsule_name(producer, live):
    capsule = producer.capsule(name=b"not_a_tensor")
    with pytest.raises(BufferError, match="dlpack: capsule named 'not_a_tensor' is not a "
                                          "DLPack capsule"):
        ap.from_dlpack(capsule)


def test_object_without_dlpack_is_a_type_error():
    with pytest.raises(TypeError, match="dlpack: builtins.list has no __dlpack__"):
        ap.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="dlpack"):
        ap.from_dlpack(object())


def test_padded_float4_has_a_byte_per_element(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(4,), dtype=(17, 4, 1), flags=4)))
    assert view.dtype == ap.DType("float4_e2m1fn", padded=True)
    assert (view.itemsize, view.nbytes, view.strides) == (1, 4, (1,))


def test_packed_float4_counts_bits(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(5,), dtype=(17, 4, 1))))
    assert view.dtype == ap.DType("float4_e2m1fn") and not view.dtype.padded
    assert (view.itemsize, view.strides, view.nbytes) == (None, None, 3)
    copy = view.host_copy()
    assert copy.nbytes == 3 and copy.dtype == view.dtype


@pytest.mark.parametrize("device", [(2, 1), (4, 0), (10, 3), (13, 0), (18, 2)])
def test_other_devices_are_carried_faithfully(producer, device, without_cuda):
    # No driver answers (on a machine with a GPU too: the capsules' CUDA pointers are
    # made up), so arrayport cannot read any of these: it carries them, refusing to read.
    view = ap.from_dlpack(producer.capsule(spec(device=device)))
    assert view.device == device
    assert view.__dlpack_device__() == device
    with pytest.raises(BufferError, match=f"dlpack: cannot read {view.device} memory"):
        view.host_copy()
    with pytest.raises(BufferError, match=f"to_numpy: the data is on {view.device}"):
        ap.to_numpy(view)
    with pytest.raises(BufferError, match=str(view.device)):
        ap.from_dlpack(view, copy=True)
    again = ap.from_dlpack(view)  # a neutral carrier: passes it on unchanged
    assert again.device == device and again.ptr == view.ptr


def test_byte_offset_counts_toward_ptr(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(2,), byte_offset=8)))
    assert list(ap.to_numpy(view).view("uint8")) == [8, 9, 10, 11, 12, 13, 14, 15]


@pytest.mark.parametrize("reslice", [False, True])
def test_host_exports_carry_byte_offset_zero(producer, reslice):
    # PaddlePaddle 3.3 and Warp 1.19 ignore byte_offset on import (MLX 0.32's slices set
    # it): on address devices arrayport folds it into data, on import and on slicing.
    view = ap.from_dlpack(producer.capsule(spec(shape=(4,), byte_offset=8)))
    if reslice:
        view = view[1:]
    exported = capsules.describe(view.__dlpack__(max_version=(1, 3)))
    assert exported["byte_offset"] == 0 and exported["data"] == view.ptr
    again = capsules.describe(view.__dlpack__())
    assert again["byte_offset"] == 0 and again["data"] == view.ptr


def test_hand_built_values_are_read_correctly(producer):
    view = ap.from_dlpack(producer.capsule(spec(shape=(2, 2), strides=(1, 2), dtype=(1, 8, 1))))
    assert view.is_f_contiguous and not view.is_c_contiguous
    assert ap.to_numpy(view).tolist() == [[0, 2], [1, 3]]


def test_failed_imports_do_not_leak_views(producer, live):
    for _ in range(50):
        with pytest.raises(BufferError):
            ap.from_dlpack(producer.capsule(spec(shape=(-1,))))
    gc.collect()
    assert live.delta() == {"producer_deleter_calls": 50}
