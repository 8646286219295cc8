"""arrayport.from_dlpack(x, device=, copy=) and the legacy-producer fallback."""

import numpy as np
import pytest

import arrayport as ap
from producer import spec


class LegacyProducer:
    """A pre-2023 producer: __dlpack__ takes only a stream."""

    def __init__(self, array):
        self.array, self.calls = array, []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class BrokenProducer:
    """A modern producer whose __dlpack__ fails with an unrelated TypeError."""

    calls = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        BrokenProducer.calls += 1
        raise TypeError("unsupported dtype object")

    def __dlpack_device__(self):
        return (1, 0)


def test_legacy_producer_falls_back_after_keyword_rejection():
    source = np.arange(4.0)
    producer = LegacyProducer(source)
    view = ap.from_dlpack(producer)
    assert producer.calls == [None] and view.ptr == source.ctypes.data
    assert view.owner is producer


def test_unrelated_type_error_is_not_swallowed():
    # Not mistaken for a rejected keyword (no legacy retry); reported as the producer's
    # refusal, in arrayport's words with the producer's reason and its error chained.
    BrokenProducer.calls = 0
    with pytest.raises(BufferError, match="BrokenProducer could not export through "
                                          "__dlpack__: TypeError: unsupported dtype object") as e:
        ap.from_dlpack(BrokenProducer())
    assert isinstance(e.value.__cause__, TypeError)
    assert BrokenProducer.calls == 1


def test_copy_true_makes_an_owned_copy(live):
    source = np.arange(12.0).reshape(3, 4)[:, ::2]
    view = ap.from_dlpack(source, copy=True)
    assert view.is_copy and view.is_c_contiguous and view.protocol == "copy"
    assert view.ptr != source.ctypes.data
    np.testing.assert_array_equal(ap.to_numpy(view), source)
    source[0, 0] = 99
    assert ap.to_numpy(view)[0, 0] == 0
    assert live.delta() == {"host_buffers": 1}
    del view
    assert live.delta() == {}


def test_copy_false_and_none_share_memory():
    source = np.arange(4.0)
    for copy in (False, None):
        assert ap.from_dlpack(source, copy=copy).ptr == source.ctypes.data


def test_device_cpu_for_cpu_data_is_zero_copy():
    source = np.arange(4.0)
    view = ap.from_dlpack(source, device="cpu")
    assert view.ptr == source.ctypes.data and view.device == (1, 0)


def test_device_elsewhere_is_asked_of_the_producer_and_its_refusal_reported(without_cuda):
    source = np.arange(4.0)
    with pytest.raises(BufferError, match="from_dlpack: the producer cannot provide its cpu "
                                          "data on cuda:0"):
        ap.from_dlpack(source, device="cuda:0")


def test_device_elsewhere_with_copy_false(producer):
    class OnGpu:
        def __dlpack__(self, **kwargs):
            return producer.capsule(spec(device=(2, 0)))

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match="the data is on cuda:0; device=cpu needs a copy, "
                                          "but copy=False"):
        ap.from_dlpack(OnGpu(), device="cpu", copy=False)


def test_device_move_is_asked_of_the_producer(producer):
    asked = []

    class OnGpu:
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            asked.append((max_version, dl_device, copy))
            return producer.capsule(spec(device=dl_device or (2, 0), flags=2))

        def __dlpack_device__(self):
            return (2, 0)

    view = ap.from_dlpack(OnGpu(), device="cpu")
    assert asked == [((1, 3), (1, 0), None)]
    assert view.device == (1, 0) and view.is_copy


def test_pinned_capsule_relabels_to_cpu(producer):
    capsule = producer.capsule(spec(device=(3, 0)))
    view = ap.from_dlpack(capsule, device="cpu")
    assert view.device == (1, 0) and not view.is_copy


def test_bad_copy_and_device_arguments():
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        ap.from_dlpack(np.ones(2), copy="yes")
    with pytest.raises(ValueError, match="unknown device 'tensor_unit'"):
        ap.from_dlpack(np.ones(2), device="tensor_unit")


def test_view_from_dlpack_constructor():
    source = np.ones(3)
    assert ap.View.from_dlpack(source).ptr == source.ctypes.data
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        ap.View()


def test_old_producer_cannot_be_asked_to_move(producer, live, without_cuda):
    class OldOnGpu:
        def __dlpack__(self, stream=None):
            return producer.capsule(spec(device=(2, 0)))

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match="takes no dl_device/copy.*arrayport's own copy "
                                          "failed too: copy: cannot copy cuda:0 memory to "
                                          "cpu: cuda: the CUDA driver"):
        ap.from_dlpack(OldOnGpu(), device="cpu")
    # arrayport's own attempt imported one capsule, and released it exactly once.
    assert live.delta() == {"producer_deleter_calls": 1}


def test_producer_ignoring_dl_device_is_caught(producer, live, without_cuda):
    class Stubborn:
        def __dlpack__(self, **kwargs):
            return producer.capsule(spec(device=(2, 0)))

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match="asked for cpu, the producer returned cuda:0"):
        ap.from_dlpack(Stubborn(), device="cpu")
    assert live.delta() == {"producer_deleter_calls": 2}  # its capsule, then arrayport's try
