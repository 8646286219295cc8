"""PyTorch's CUDA tensors as a library of the matrix (the host tensors are the ``torch``
record's): exercised where PyTorch was built with CUDA and sees a GPU — not on the CUDA
driver simulator, where PyTorch's CPU build runs.

The cases half (the command's and the tests'); the converters are the ``torch`` record's
(``arrayport.to_torch`` keeps a tensor on the device its data is on)."""

from __future__ import annotations

from arrayport.libraries.toolkit import INDEXING, NotOffered, call

# The sample layouts a tensor can have (no negative strides in PyTorch).
_TORCH_INDEXING = {layout: index for layout, index in INDEXING.items() if layout != "negative"}


def unavailable():
    import torch
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    return None


def _make_torch_cuda(base, layout):
    import torch  # noqa: F401

    import arrayport
    if layout not in _TORCH_INDEXING:
        raise NotOffered(f"PyTorch tensors cannot be {layout}")
    tensor = arrayport.to_torch(base, copy=True).to("cuda:0")
    return _TORCH_INDEXING[layout](tensor)


def _torch_cuda_routes():
    def from_interface(x):
        import torch
        return torch.as_tensor(x, device="cuda")   # reads the CUDA Array Interface
    return {"dlpack": call("torch", "from_dlpack"), "cuda_array_interface": from_interface}


make = _make_torch_cuda
routes = _torch_cuda_routes


def via_arrayport(x):
    import arrayport
    return arrayport.to_torch(x)


def address_of(x):
    return x.data_ptr()


def writable(x):
    return True   # tensors have no read-only state


def host_values(x):
    return x.detach().cpu().resolve_conj().resolve_neg().numpy()
