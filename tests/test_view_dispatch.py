"""arrayport.view: the documented protocol order, the per-type cache, refusals handing over
to the next protocol, streams, and the DLPack C exchange API consumer."""


import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from lifetime_checks import assert_view_keeps_source_alive
from producer import spec
from optional import needs, optional_module

ml_dtypes = optional_module("ml_dtypes")
torch = optional_module("torch")


class ArrayOnly:
    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


class InterfaceAndArray(ArrayOnly):
    @property
    def __array_interface__(self):
        return self.array.__array_interface__


class RecordingProducer:
    """Offers DLPack (recording the arguments it gets) and every other protocol too."""

    def __init__(self, array):
        self.array, self.calls = array, []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.array.__dlpack__(**{k: v for k, v in kwargs.items() if k != "stream"})

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    @property
    def __array_interface__(self):
        return self.array.__array_interface__

    def __array__(self, dtype=None, copy=None):
        return self.array


@needs('torch')
@pytest.mark.parametrize("make,protocol", [
    (lambda: np.arange(3.0), "dlpack"),
    (lambda: torch.arange(3.0), "dlpack"),
    (lambda: b"abc", "buffer"),
    (lambda: bytearray(3), "buffer"),
    (lambda: memoryview(b"abc"), "buffer"),
    (lambda: InterfaceAndArray(np.arange(3.0)), "array_interface"),
    (lambda: ArrayOnly(np.arange(3.0)), "array"),
    (lambda: RecordingProducer(np.arange(3.0)), "dlpack"),
])
def test_the_best_protocol_is_chosen_and_recorded(make, protocol):
    assert ap.view(make()).protocol == protocol


def test_a_view_is_returned_as_is_and_a_capsule_is_consumed(producer, live):
    view = ap.view(np.arange(3))
    assert ap.view(view) is view
    from_capsule = ap.view(producer.capsule(spec()))
    assert from_capsule.protocol == "dlpack" and from_capsule.shape == (2, 3)
    with pytest.raises(ValueError, match="capsule was already produced"):
        ap.view(producer.capsule(spec()), stream=1)
    del view, from_capsule
    assert live.delta().get("imported", 0) == 0


def test_the_plan_is_cached_per_type():
    class Fresh(ArrayOnly):
        pass

    assert _core.protocol_plan(Fresh) is None
    ap.view(Fresh(np.zeros(2)))
    assert _core.protocol_plan(Fresh) == ("cuda_array_interface", "array_interface", "array")
    # ndarrays normally take the NumPy fast path, which needs no plan: a byte-swapped one
    # goes through the plan (and is refused), so the test does not depend on test order.
    with pytest.raises(BufferError):
        ap.view(np.arange(3, dtype=">i4"))
    assert _core.protocol_plan(np.ndarray)[0] == "dlpack"
    # bytes, bytearray and memoryview go straight to their buffer (no plan); a subclass
    # of bytes takes the plan: its instances may carry interface attributes of their own.
    class Bytes(bytes):
        pass

    ap.view(Bytes(b"ab"))
    assert _core.protocol_plan(Bytes) == ("cuda_array_interface", "buffer", "array_interface")


def test_instance_attributes_are_found():
    source = np.arange(4.0)
    holder = type("Holder", (), {})()
    holder.__array_interface__ = source.__array_interface__
    holder.keep = source
    assert ap.view(holder).protocol == "array_interface"


@needs('ml_dtypes')
def test_a_refusal_hands_over_to_the_next_protocol():
    # NumPy's __dlpack__ refuses bfloat16; the array interface path still gives a View.
    source = np.zeros(3, ml_dtypes.bfloat16)
    view = ap.view(source)
    assert view.dtype == "bfloat16" and view.protocol == "array_interface"
    assert view.ptr == source.__array_interface__["data"][0]


def test_when_every_protocol_refuses_the_first_refusal_is_raised():
    class Refuses:
        def __dlpack__(self, **kwargs):
            raise BufferError("first refusal")

        @property
        def __array_interface__(self):
            return {"version": 3, "shape": (2,), "typestr": "|O8", "data": (8, False)}

    # The producer's own refusal, in arrayport's words: "dlpack: <type> refused to export: …".
    with pytest.raises(BufferError, match="^dlpack: .*Refuses refused to export: first refusal$"):
        ap.view(Refuses())


def test_type_and_value_errors_are_not_swallowed():
    class Malformed:
        __array_interface__ = {"version": 3, "shape": 2, "typestr": "<f8", "data": (8, False)}

        def __array__(self, dtype=None, copy=None):
            return np.zeros(2)

    with pytest.raises(TypeError, match="shape must be a tuple"):
        ap.view(Malformed())


def test_no_protocol_is_a_type_error():
    with pytest.raises(TypeError, match=r"^view: builtins.int offers no array protocol"):
        ap.view(3)
    with pytest.raises(TypeError, match="offers no array protocol"):
        ap.view(object())


@needs('torch')
def test_view_never_copies():
    sources = [np.arange(6.0).reshape(2, 3).T, bytearray(b"abc"),
               InterfaceAndArray(np.arange(3.0)), torch.arange(4)]
    for source in sources:
        view = ap.view(source)
        assert not view.is_copy
    torch_source = torch.arange(4)
    assert ap.view(torch_source).ptr == torch_source.data_ptr()


def test_stream_goes_to_the_dlpack_producer():
    source = RecordingProducer(np.arange(3.0))
    source.__dlpack_device__ = lambda: (2, 0)  # claims CUDA, where streams apply
    ap.view(source)
    ap.view(source, stream=5)
    assert source.calls == [{"max_version": (1, 3)}, {"stream": 5, "max_version": (1, 3)}]


def test_a_stream_for_cpu_data_is_refused_before_the_producer_is_asked():
    # Producers answer in their own dialects (NumPy: RuntimeError); the spec's is ValueError.
    source = RecordingProducer(np.arange(3.0))
    with pytest.raises(ValueError, match="stream must be None for cpu memory, got 5"):
        ap.view(source, stream=5)
    with pytest.raises(ValueError, match="stream must be None for cpu memory"):
        ap.view(np.zeros(2), stream=1)
    assert source.calls == []


def test_a_producer_refusing_the_stream_is_reported():
    class Refusing:
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            if stream is not None:
                raise BufferError(f"cannot honour stream {stream}")
            return np.zeros(2).__dlpack__(max_version=max_version)

        def __dlpack_device__(self):
            return (2, 0)

    assert ap.view(Refusing()).shape == (2,)
    with pytest.raises(BufferError, match="^dlpack: .*Refusing refused to export: cannot honour "
                                          "stream 5$"):
        ap.view(Refusing(), stream=5)


def test_stream_must_be_none_for_host_only_protocols():
    with pytest.raises(ValueError, match="^buffer: stream must be None for host memory"):
        ap.view(bytearray(4), stream=1)
    with pytest.raises(ValueError, match="^array_interface: stream must be None"):
        ap.view(InterfaceAndArray(np.zeros(2)), stream=1)
    with pytest.raises(ValueError, match="^array: stream must be None"):
        ap.view(ArrayOnly(np.zeros(2)), stream=2)


@pytest.mark.parametrize("make_source,make_view", [
    (lambda: InterfaceAndArray(np.arange(3.0)), ap.view),
    (lambda: RecordingProducer(np.arange(3.0)), ap.view),
    # __array__: the View keeps the returned array alive, not the object that made it.
    (lambda: np.arange(3.0), lambda array: ap.View.from_array(ArrayOnly(array))),
])
def test_view_keeps_the_source_alive_for_each_protocol(make_source, make_view):
    assert_view_keeps_source_alive(make_source, make_view)


# ---- DLPack C exchange API (consumer) ------------------------------------------------------

@needs('torch')
def test_pytorch_is_read_through_its_exchange_api(live):
    assert _core.exchange_api_version(torch.Tensor) == (1, 3)
    assert _core.exchange_api_version(np.ndarray) is None
    source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    calls_before = source.__dlpack__  # a Tensor's __dlpack__ must not be needed at all
    view = ap.view(source)
    assert view.protocol == "dlpack" and view.owner is source and view.ptr == source.data_ptr()
    assert live.delta() == {"imported": 1}
    np.asarray(view)[0, 0] = 42
    assert source[0, 0] == 42
    del view, calls_before
    assert live.delta() == {}


@needs('torch')
def test_the_exchange_api_is_not_called_through_dunder_dlpack(monkeypatch):
    def forbidden(self, **kwargs):
        raise AssertionError("__dlpack__ was called")

    monkeypatch.setattr(torch.Tensor, "__dlpack__", forbidden)
    assert ap.from_dlpack(torch.arange(3)).shape == (3,)
    assert ap.view(torch.arange(3)).shape == (3,)


@needs('torch')
def test_subclasses_use_the_inherited_table():
    parameter = torch.nn.Parameter(torch.zeros(3), requires_grad=False)
    assert _core.exchange_api_version(type(parameter)) == (1, 3)
    assert ap.view(parameter).ptr == parameter.data_ptr()


@needs('torch')
def test_the_exchange_api_decides_what_it_exports():
    # PyTorch's __dlpack__ refuses tensors that require grad; its exchange API hands out
    # their data (as .detach() would). arrayport takes what the producer's table gives.
    source = torch.zeros(3, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        source.__dlpack__()
    assert ap.view(source).ptr == source.data_ptr()


def test_a_type_with_a_bogus_table_falls_back_to_dunder_dlpack():
    class Bogus:
        __dlpack_c_exchange_api__ = "not a capsule"

        def __init__(self):
            self.array = np.arange(3)

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    assert _core.exchange_api_version(Bogus) is None
    assert ap.view(Bogus()).shape == (3,)


def test_masked_arrays_are_refused_when_anything_is_masked():
    masked = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    with pytest.raises(TypeError, match="masked array has masked"):
        ap.view(masked)
    clean = np.ma.masked_array(np.arange(4.0), mask=False)
    view = ap.view(clean)
    assert view.ptr == clean.data.__array_interface__["data"][0]
    assert _core.protocol_plan(type(clean))[0] == "mask_check"


def test_memory_a_cuda_array_interface_describes_is_never_read_through_a_host_protocol():
    """hip-python's device arrays offer the CUDA Array Interface and the buffer protocol,
    both over device memory: when the first refuses (here: no CUDA driver, or one that does
    not know the memory), the buffer and __array_interface__ of the same object are not
    asked, and its refusal stands."""
    class DeviceArrayWithABuffer(bytearray):
        @property
        def __cuda_array_interface__(self):
            return {"version": 3, "shape": (len(self),), "typestr": "|u1",
                    "data": (0x7F0000001000, False), "strides": None, "stream": None}

        @property
        def __array_interface__(self):
            return {"version": 3, "shape": (len(self),), "typestr": "|u1",
                    "data": (0x7F0000001000, False)}

    with pytest.raises(BufferError, match=r"^cuda: "):   # no driver, or not its memory
        ap.view(DeviceArrayWithABuffer(b"device"))
    # Without the CUDA Array Interface the same bytes are host memory, read through the buffer;
    # so they are where the interface's property fails rather than answers (no dict: the
    # object said nothing about device memory).
    assert ap.view(bytearray(b"device")).protocol == "buffer"

    class FailingInterface(bytearray):
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("host memory has no CUDA interface")

    assert ap.view(FailingInterface(b"host")).protocol == "buffer"
