"""What arrayport raises and warns that users catch — every class a subclass of the built-in
type it already was, so ``except BufferError`` keeps working:

- ``NeedsCopy(BufferError)``: the producer's memory does not hold the array's values as
  they are (PyTorch's lazy conjugation/negation; an ``__array__`` that can only copy);
  ``arrayport.view`` refuses, the converters resolve it into a copy. ``resolve()`` gives an
  object whose memory does hold them.
- ``DriverUnavailable(BufferError)``: no usable GPU driver for a device (the vendor library
  is missing, too old, or sees no device); ``CudaUnavailable`` and ``HipUnavailable`` are
  its two vendors.
- ``RequirementError(ValueError)``: an array does not meet a function's contract
  (``require``, ``@accepts``) and no copy allowed may fix it; ``constraint`` names which
  ("dtype", "shape", …), ``argument`` the parameter (``@accepts``) or None.
- ``TypeNotHeld(TypeError, BufferError)``: the target library has no type for the data's
  element type (a converter's refusal). A ``TypeError`` as it always was, and a
  ``BufferError`` as DLPack calls a type a consumer cannot take.
- ``ReadOnlySharedWarning(UserWarning)``: read-only memory was shared with a library whose
  arrays are always writable (``readonly="share"``).
- ``CopyWarning(UserWarning)``: a conversion copied the data although nobody asked
  (``copy=None``), announced only while copies are watched (``arrayport.warn_on_copies``,
  ``ARRAYPORT_WARN_COPIES=1``; ``arrayport.copy_watch``).

Protocol violations and refusals are plain ``BufferError``s whose message starts with the
protocol (``"dlpack: …"``); wrong argument types ``TypeError``, wrong values ``ValueError``.

This module imports no GPU library: the driver modules define their errors on top of these.
"""

from __future__ import annotations

from arrayport._core import NeedsCopy

__all__ = ["CopyWarning", "CudaUnavailable", "DriverUnavailable", "HipUnavailable", "NeedsCopy",
           "ReadOnlySharedWarning", "RequirementError", "TypeNotHeld"]


class DriverUnavailable(BufferError):
    """No usable GPU driver: the vendor library is missing, too old, or has no device."""


class CudaUnavailable(DriverUnavailable):
    """No usable CUDA driver (``libcuda.so.1``): the library is missing, or it has no device."""


class HipUnavailable(DriverUnavailable):
    """No usable HIP runtime: the library is missing, too old, or it has no device."""


class TypeNotHeld(TypeError, BufferError):
    """The target library has no type for the data's element type (``to_torch`` of
    float6, ``to(x, "mlx")`` of float64 complex…): the message names the library and the
    type. Both a ``TypeError`` and a ``BufferError``."""


class CopyWarning(UserWarning):
    """A conversion copied the data, though ``copy=None`` and nobody asked for a copy: the
    target could not hold the data as it is (the message says why). Only while copies are
    watched (``arrayport.warn_on_copies()``, ``ARRAYPORT_WARN_COPIES=1``); make it an error
    in tests with ``-W error::arrayport.CopyWarning``."""


class ReadOnlySharedWarning(UserWarning):
    """Read-only memory was shared with a library whose arrays are always writable
    (``readonly="share"``): writing through them writes memory its owner said not to."""


class RequirementError(ValueError):
    """An array does not meet a contract (``require``, ``@accepts``), and no copy that is
    allowed can make it: the message says which constraint, what was expected and what the
    array has. ``constraint``: "device", "dtype", "ndim", "shape", "order", "writable" or
    "align"; ``argument``: the parameter's name under ``@accepts``, else None."""

    def __init__(self, message: str, constraint: str, argument: str | None = None):
        super().__init__(message)
        self.constraint = constraint
        self.argument = argument
