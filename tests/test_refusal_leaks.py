"""Every refusal this release added leaves nothing behind: no imported managed tensor (the
producer's deleter ran), no Py_buffer lease (released), no host buffer, no export — counted
exactly by arrayport's live counters — with the error type and message the contract says."""

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module

torch = optional_module("torch")


class Holder:
    def __init__(self, interface):
        self.__array_interface__ = interface


@pytest.mark.parametrize("data, offset, message", [
    (np.arange(10)[::-1], 0, "refused to export its buffer"),              # not contiguous
    (np.array([object(), object()], dtype=object), 0, "not plain numbers"),  # object memory
    (bytearray(8), 2**63 - 1, "lies beyond the end"),                        # wrapping offset
    (bytearray(8), 4, "the array reaches bytes"),                            # reaches past the end
])
def test_array_interface_buffer_refusals_release_the_buffer(live, data, offset, message):
    holder = Holder({"version": 3, "shape": (2,), "typestr": "<u8", "data": data,
                     "offset": offset})
    with pytest.raises(BufferError, match=f"^array_interface: .*{message}"):
        ap.View.from_array_interface(holder)
    del holder
    assert live.delta() == {}


def test_masked_arrays_refused_by_every_constructor_leak_nothing(live):
    masked = np.ma.masked_array(np.arange(3.0), mask=[False, True, False])
    for construct in (ap.view, ap.from_dlpack, ap.View.from_buffer,
                      ap.View.from_array_interface, ap.to_numpy):
        with pytest.raises(TypeError, match="masked array has masked"):
            construct(masked)
    del masked
    assert live.delta() == {}


def test_huge_broadcast_refusal_leaks_nothing(live):
    memory = np.zeros(1)
    holder = Holder({"version": 3, "shape": (2**62,), "strides": (0,), "typestr": "<f8",
                     "data": (memory.ctypes.data, True)})
    with pytest.raises(BufferError, match="more bytes than fit in int64"):
        ap.View.from_array_interface(holder)
    assert live.delta() == {}


@needs("torch")
@pytest.mark.parametrize("make, bit", [
    (lambda: torch.conj(torch.tensor([1 + 1j, 2 - 2j])), "conjugate"),        # after export
    (lambda: torch._neg_view(torch.tensor([1.0, 2.0])), "negative"),         # before export
])
def test_lazy_torch_refusals_run_the_deleter_and_resolutions_free_their_copy(live, make, bit):
    tensor = make()
    for route in (ap.view, lambda t: ap.from_dlpack(t, copy=False),
                  lambda t: ap._core.dlpack_view(t, copy=False, exchange_api=False)):
        with pytest.raises(ap.NeedsCopy, match=f"^dlpack: the PyTorch tensor has its {bit} bit"):
            route(tensor)
    assert live.delta() == {}  # the conjugate case imported a tensor: its deleter ran
    resolved = ap.from_dlpack(tensor)
    assert resolved.is_copy and live.delta() == {"imported": 1}
    del resolved
    assert live.delta() == {}


@needs("torch")
@pytest.mark.filterwarnings("ignore")
def test_torch_export_failures_leak_nothing(live):
    for tensor in (torch.zeros(3).to_sparse(), torch.zeros(3, device="meta"),
                   torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.quint8)):
        with pytest.raises(BufferError, match="^dlpack: torch.Tensor could not export") as error:
            ap.view(tensor)
        assert error.value.__cause__ is not None
    assert live.delta() == {}


@needs("jax")
def test_deleted_jax_array_refusal_leaks_nothing(live):
    import jax.numpy as jnp
    array = jnp.arange(3.0)
    array.delete()
    with pytest.raises(BufferError, match="Array has been deleted"):
        ap.from_dlpack(array)
    assert live.delta() == {}
