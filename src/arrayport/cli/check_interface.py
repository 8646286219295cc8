"""``arrayport check``: the library as a consumer of the CUDA Array Interface (v3) — for a
library whose record in ``arrayport.libraries`` has a ``cuda_array_interface`` route (the
matrix's: numba-cuda's ``as_cuda_array``, CuPy's ``asarray``, …) and whose arrays live in
CUDA memory. The offered interfaces describe device memory arrayport made (a copy of the
checker's sample), so the checks run on a GPU and on the CUDA driver simulator alike.

Registered into the checks' table (``arrayport.cli.check_registry``) when
``arrayport.cli.check`` imports it; the producer side of the interface is
``producer.cuda-array-interface`` there.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np

from arrayport.devices import DeviceType
from arrayport.libraries.results import element0_address, to_host_numpy
from arrayport.libraries.samples import base_array

from .check_registry import (Skip, Warn, _home, _same_values, check, placed_view,
                             read_only_verdict)

# What a consumer may raise to refuse an interface it does not take (numba raises
# NotImplementedError for masks): a refusal, not a crash.
_REFUSALS = (BufferError, ValueError, TypeError, NotImplementedError)


class _Interface:
    """An object offering ``view``'s CUDA Array Interface (``changes`` applied), holding
    the View — and so its device memory — alive as long as it lives."""

    def __init__(self, view, **changes):
        self.view = view
        self.interface = {**view.__cuda_array_interface__, **changes}

    @property
    def __cuda_array_interface__(self):
        return self.interface


def _consumer(target):
    """The target's interface consumer, where its arrays live in CUDA memory."""
    if target.from_interface is None:
        raise Skip("arrayport knows no CUDA Array Interface consumer of this library")
    if DeviceType(_home(target)[0]) not in (DeviceType.CUDA, DeviceType.CUDA_MANAGED):
        raise Skip("its arrays are not in CUDA memory, which the interface describes")
    return target.from_interface


def _offered(target, array: np.ndarray, **changes) -> _Interface:
    return _Interface(placed_view(array, _home(target)), **changes)


@check("consumer.interface", "the CUDA Array Interface consumer reads the producer's memory "
       "with the right values; keeping the producer alive is the user's duty (the interface "
       "has no owner slot), a consumer that keeps it spares the user that hazard")
def _(target):
    consume = _consumer(target)
    source = base_array("float32")
    offered = _offered(target, source)
    address, alive = offered.view.ptr, weakref.ref(offered)
    result = consume(offered)
    _same_values(to_host_numpy(result), source, "values")
    shared = element0_address(result) == address
    del offered
    gc.collect()
    if not shared:
        return "copied"
    if alive() is None:
        raise Warn("shares the memory but lets the producer go: the user must keep it alive "
                   "(allowed: the interface has no owner slot)")
    return "shared, the producer kept alive"


@check("consumer.interface-read-only", "data=(pointer, True) — read-only memory — is not "
       "handed to the user as a writable alias (the flag is the interface's only guard)")
def _(target):
    consume = _consumer(target)
    offered = _offered(target, base_array("float32"))
    offered.interface["data"] = (offered.interface["data"][0], True)
    try:
        result = consume(offered)
    except _REFUSALS as exc:
        return f"refused with {type(exc).__name__}"
    return read_only_verdict(result, offered.view.ptr, "the interface's read-only flag")


@check("consumer.interface-strides", "strides the interface gives (transposed, negative) "
       "are followed, or the array refused cleanly — never other values")
def _(target):
    consume = _consumer(target)
    base = base_array("float32")
    outcomes = []
    for name, layout in (("transposed", base.T), ("negative", base[::-1])):
        try:
            result = consume(_offered(target, layout))
        except _REFUSALS as exc:
            outcomes.append(f"{name} refused ({type(exc).__name__})")
            continue
        _same_values(to_host_numpy(result), layout, f"{name} values")
        outcomes.append(f"{name} read")
    return ", ".join(outcomes)


@check("consumer.interface-mask", "a mask (an interface of the same shape whose false "
       "elements are not valid) is honoured or refused; read as if every element were valid, "
       "the user is handed values the producer marked invalid")
def _(target):
    consume = _consumer(target)
    valid = base_array("float32") > 6
    mask = placed_view(valid, _home(target))
    offered = _offered(target, base_array("float32"), mask=mask.__cuda_array_interface__)
    offered.mask_view = mask   # alive as long as the interface that names it
    try:
        result = consume(offered)
    except _REFUSALS as exc:
        return f"refused with {type(exc).__name__}"
    if getattr(result, "mask", None) is not None:
        return "honoured"
    raise Warn("accepted a masked interface as if every element were valid")
