"""A stand-in for CuPy on machines without a GPU, so the device half of arrayport's NumPy
dispatch can be tested everywhere: "device" arrays are host memory labelled CUDA device 0.

Like CuPy, it computes only on its own arrays and scalars (anything else: NotImplemented)
and exchanges through DLPack. Every call it serves is logged in ``calls``.
"""

import numpy as np

import arrayport as ap
from arrayport import _core

calls = []


def _cuda_view_of(host):
    """A View of ``host``'s memory labelled as CUDA memory."""
    return _core.view_from_pointer(
        host.__array_interface__["data"][0], host.shape, host.strides, host.dtype,
        readonly=not host.flags.writeable, owner=host, device=(2, 0), protocol="dlpack")


class ndarray:  # noqa: N801 (CuPy's name)
    def __init__(self, host):
        self.host = host

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _cuda_view_of(self.host).__dlpack__(max_version=max_version)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        operands = [_host_operand(x) for x in inputs]
        outs = kwargs.get("out", ())
        if outs:
            kwargs["out"] = tuple(_host_operand(x) for x in outs)
        if any(x is NotImplemented for x in operands + list(kwargs.get("out", ()))):
            return NotImplemented
        calls.append(f"{ufunc.__name__}.{method}")
        result = getattr(ufunc, method)(*operands, **kwargs)
        if outs:  # like CuPy: the out= arrays themselves
            return outs[0] if len(outs) == 1 else outs
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(tp, ndarray) for tp in types):
            return NotImplemented
        calls.append(func.__name__)
        return _wrap(func(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))


def _host_operand(x):
    if isinstance(x, ndarray):
        return x.host
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return x
    return NotImplemented


def _unwrap(obj):
    if isinstance(obj, ndarray):
        return obj.host
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap(item) for item in obj)
    return obj


def _wrap(result):
    if isinstance(result, np.ndarray):
        return ndarray(result)
    if isinstance(result, tuple):
        return tuple(_wrap(item) for item in result)
    return result


def from_dlpack(x):
    view = ap.view(x)
    assert view.device.type == ap.DeviceType.CUDA, "fake CuPy takes CUDA memory only"
    calls.append("from_dlpack")
    return ndarray(_core.numpy_array_of(view))


def cuda_view(host):
    """What a test starts from: a CUDA-labelled View of ``host``."""
    return _cuda_view_of(host)
