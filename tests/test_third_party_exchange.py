"""Real third-party consumers and producers of DLPack and its C exchange API, both ways:
tvm-ffi (which consumes through View's exchange table) and PyTorch — zero-copy, checked by
writing on one side and reading on the other, with counters back to zero."""

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module

torch = optional_module("torch")


def test_tvm_ffi_consumes_views_through_the_exchange_api(live):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    source = np.arange(6.0).reshape(2, 3)
    source.flags.writeable = False
    view = ap.view(source)
    # tvm-ffi asks __dlpack__ for legacy capsules, which a read-only View refuses; it
    # succeeds only because it found View.__dlpack_c_exchange_api__ first.
    with pytest.raises(BufferError, match="legacy"):
        view.__dlpack__()
    tensor = tvm_ffi.from_dlpack(view)
    assert tensor.data_ptr() == view.ptr and tuple(tensor.shape) == (2, 3)
    assert live.delta() == {"exported": 1}
    del tensor, view
    assert live.delta() == {}


def test_tvm_ffi_tensors_and_views_share_memory_both_ways(live):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    source = np.zeros(4, np.int32)
    tensor = tvm_ffi.from_dlpack(ap.view(source))
    back = ap.view(tensor)
    assert back.ptr == tensor.data_ptr() == source.__array_interface__["data"][0]
    np.from_dlpack(back)[2] = 7
    assert source[2] == 7
    del tensor, back
    assert live.delta() == {}


@needs('torch')
def test_torch_from_dlpack_of_a_view_and_view_of_a_tensor_share_memory(live):
    source = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    view = ap.view(source)  # through PyTorch's exchange API
    assert ap._core.exchange_api_version(torch.Tensor) == (1, 3)
    again = torch.from_dlpack(view)  # through View.__dlpack__
    assert again.data_ptr() == source.data_ptr() and again.stride() == source.stride()
    again[1, 1] = -1
    assert source[1, 1] == -1
    source[0, 0] = 42
    assert np.from_dlpack(view)[0, 0] == 42
    del view, again
    assert live.delta() == {}

