"""PyTorch: the converter beyond the core's fast path (to_torch), its tensors in the matrix —
host tensors (the torch record) and CUDA tensors (the torch-cuda record: the ``cuda_``
names below) — and its unusual tensors (lazy conjugate and negative bits, grad, sparse,
meta, nested, quantized).

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._torch``."""

from __future__ import annotations

import numpy as np

from arrayport import _core
from arrayport.libraries.toolkit import INDEXING, Kind, NotOffered, call, module


# The sample layouts a tensor can have (no negative strides in PyTorch).
_TORCH_INDEXING = {layout: index for layout, index in INDEXING.items() if layout != "negative"}


def _make_torch(base, layout):
    import arrayport
    if layout not in _TORCH_INDEXING:
        raise NotOffered(f"PyTorch tensors cannot be {layout}")
    # arrayport carries bfloat16/float8/unsigned types NumPy's own bridge refuses.
    tensor = arrayport.to_torch(base, copy=True)
    return _TORCH_INDEXING[layout](tensor)


def _torch_reference(t) -> np.ndarray:
    return t.detach().resolve_conj().resolve_neg().numpy()


def _torch_kinds() -> list[Kind]:
    def torch():
        import torch as module
        return module

    def quiet(make):
        def made():
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return make()
        return made

    def bfloat16_reference(t):
        import ml_dtypes
        return t.detach().view(torch().int16).numpy().view(ml_dtypes.bfloat16)

    def inference():
        with torch().inference_mode():
            return torch().arange(6.0).reshape(2, 3)

    def parameter():
        return torch().nn.Parameter(torch().arange(4.0))

    kinds = [
        ("plain", lambda: torch().arange(6.0).reshape(2, 3), _torch_reference, True),
        ("conj", lambda: torch().conj(torch().tensor([-1 + 1j, -2 + 2j, 3 - 3j])),
         _torch_reference, True),
        ("neg", lambda: torch()._neg_view(torch().tensor([1.0, 2.0, 3.0])),
         _torch_reference, True),
        ("conj-imag", lambda: torch().tensor([1 + 2j, 3 - 4j]).conj().imag,
         _torch_reference, True),
        ("conj-detached", lambda: torch().tensor([1 + 2j, 3 - 4j]).conj().detach(),
         _torch_reference, True),
        ("requires-grad", lambda: torch().arange(4.0, requires_grad=True),
         _torch_reference, False),
        ("parameter", parameter, _torch_reference, False),
        ("expanded", lambda: torch().arange(3.0).reshape(3, 1).expand(3, 4),
         _torch_reference, False),
        ("channels-last", lambda: torch().arange(24.0).reshape(1, 2, 3, 4).to(
            memory_format=torch().channels_last), _torch_reference, True),
        ("transposed", lambda: torch().arange(6.0).reshape(2, 3).T, _torch_reference, True),
        ("inference-mode", inference, _torch_reference, True),
        ("0-d", lambda: torch().tensor(3.5), _torch_reference, True),
        ("size-0", lambda: torch().zeros(0, 3), _torch_reference, True),
        ("bool", lambda: torch().tensor([True, False, True]), _torch_reference, True),
        ("sparse-coo", lambda: torch().eye(3).to_sparse(), None, False),
        ("sparse-csr", quiet(lambda: torch().eye(3).to_sparse_csr()), None, False),
        ("meta", lambda: torch().zeros(3, device="meta"), None, False),
        ("nested", quiet(lambda: torch().nested.nested_tensor(
            [torch().zeros(2), torch().zeros(3)])), None, False),
        ("quantized", quiet(lambda: torch().quantize_per_tensor(
            torch().zeros(3), 0.1, 0, torch().quint8)), None, False),
    ]
    result = [Kind("torch", name, make, reference, writable)
              for name, make, reference, writable in kinds]
    result.append(Kind("torch", "bfloat16", lambda: torch().arange(4.0).to(torch().bfloat16),
                       bfloat16_reference, True, needs=("ml_dtypes",)))
    return result


make = _make_torch
kinds = _torch_kinds


def routes():
    return {"dlpack": call("torch", "from_dlpack")}


CHECK = (lambda a: _core.to_torch(a, copy=True), lambda x: module("torch").from_dlpack(x),
         None)


def address_of(x):
    return x.data_ptr()


# ---- the torch-cuda record: PyTorch's CUDA tensors, exercised where PyTorch was built with
# CUDA and sees a GPU (not on the CUDA driver simulator: PyTorch's CPU build runs there).

def cuda_unavailable():
    torch = module("torch")
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    return None


def cuda_make(base, layout):
    if layout not in _TORCH_INDEXING:
        raise NotOffered(f"PyTorch tensors cannot be {layout}")
    return _TORCH_INDEXING[layout](_core.to_torch(base, copy=True).to("cuda:0"))


def cuda_routes():
    def from_interface(x):
        return module("torch").as_tensor(x, device="cuda")   # reads the CUDA Array Interface
    return {"dlpack": call("torch", "from_dlpack"), "cuda_array_interface": from_interface}


def cuda_via_arrayport(x):
    return _core.to_torch(x)      # a tensor on the device its data is on


def cuda_host_values(x):
    return x.detach().cpu().resolve_conj().resolve_neg().numpy()
