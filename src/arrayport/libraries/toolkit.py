"""What the adapters of ``arrayport.libraries`` share for the ``arrayport`` command: the
refusal of a sample a library cannot make (``NotOffered``), a consumer entry point named by
module and function (``call``), the layout classes as indexing (``INDEXING``), and the
unusual-array record (``Kind``) with the helpers its factories use.

Imports nothing of arrayport: adapters import it at their top without pulling the command's
machinery in. It lives with the libraries, not in ``arrayport.cli`` (renovation 3): the
command depends on the libraries, never the other way, and ``arrayport.to`` loads nothing
of the command.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# The layout classes of the 3 x 4 sample (arrayport.libraries.samples.LAYOUTS) as indexing of an
# array of it; "read-only" is each library's own (or missing).
INDEXING = {
    "contiguous": lambda a: a, "transposed": lambda a: a.T, "sliced": lambda a: a[1:, 1:],
    "negative": lambda a: a[::-1], "0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0],
}


def device_sample(base, layout):
    """arrayport's own View of the sample in CUDA device memory, in a layout class (a
    GPU's, or the CUDA driver simulator's)."""
    import arrayport
    on_device = arrayport.view(base).copy(device="cuda:0")
    if layout == "read-only":
        return on_device.as_readonly()
    return INDEXING[layout](on_device)


class NotOffered(Exception):
    """The producer cannot make this dtype or layout class: the cell does not exist."""


def call(module: str, function: str, prepare: Callable[[Any], Any] = lambda x: x):
    """A consumer entry point, ``module.function(prepare(x))``, its module imported at the
    call (only the isolation worker calls it). ``function`` may be a dotted path."""
    def call(x):
        target: Any = importlib.import_module(module)
        for name in function.split("."):
            target = getattr(target, name)
        return target(prepare(x))
    return call


@dataclass(frozen=True)
class Kind:
    library: str                          # the module that makes it
    name: str
    make: Callable[[], Any]
    reference: Callable[[Any], np.ndarray] | None   # None: no faithful strided form
    writable: bool = True                 # may a zero-copy alias be written?
    needs: tuple[str, ...] = ()           # other modules it needs (ml_dtypes…)

    @property
    def label(self) -> str:
        return f"{self.library}:{self.name}"


def module(name):
    return importlib.import_module(name)


def bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """A uint16 array of bfloat16 bit patterns as ml_dtypes bfloat16."""
    import ml_dtypes
    return np.asarray(bits).view(ml_dtypes.bfloat16)


# The layout classes an Arrow column holds: rows of fixed-size lists (the sample's 3 x 4
# as 3 rows of 4), C-contiguous, immutable; "read-only" is what every Arrow array is.
ARROW_LAYOUTS = ("contiguous", "size-0", "read-only")


def arrow_rows(base, layout: str, library: str) -> np.ndarray:
    """The sample as the rows an Arrow producer makes its column of, or ``NotOffered``: an
    Arrow column is C-contiguous rows of fixed-width numbers (booleans are bit-packed, and
    Arrow has no complex or ml_dtypes types)."""
    if layout not in ARROW_LAYOUTS:
        raise NotOffered(f"{library}: an Arrow column holds C-contiguous rows, not {layout}")
    if base.dtype.kind not in "iuf" or base.dtype.type.__module__ != "numpy":
        raise NotOffered(f"{library}: Arrow has no fixed-width number type for {base.dtype}")
    return base[:0] if layout == "size-0" else base


# ---- Arrow's PyCapsule methods alone (the matrix's arrow route, arrayport check's) --------

# The interface's methods; an array, a stream and a device array are the first three.
ARROW_METHODS = ("__arrow_c_array__", "__arrow_c_stream__", "__arrow_c_device_array__",
                 "__arrow_c_device_stream__", "__arrow_c_schema__")


def _delegate(name):
    def method(self, *args, **kwargs):
        return getattr(self._producer, name)(*args, **kwargs)
    method.__name__ = method.__qualname__ = name
    return method


@functools.cache
def _arrow_only_type(methods: tuple[str, ...]) -> type:
    """A class with exactly ``methods`` of the PyCapsule interface (one class per set, so a
    consumer testing the type sees what was offered and nothing else)."""
    return type("_ArrowOnly", (), {
        "__doc__": "Hands a consumer nothing but Arrow PyCapsule methods.",
        "__slots__": ("_producer",), "__module__": __name__,
        **{name: _delegate(name) for name in methods}})


def arrow_only(producer, methods: tuple[str, ...] | None = None):
    """``producer``'s Arrow PyCapsule methods alone (``methods``, default all it has): no
    DLPack, buffer or ``__array__`` to fall back on; the producer lives as long as this."""
    if methods is None:
        methods = tuple(name for name in ARROW_METHODS if hasattr(type(producer), name))
    wrapper = _arrow_only_type(methods)()
    wrapper._producer = producer
    return wrapper
