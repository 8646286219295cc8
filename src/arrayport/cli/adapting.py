"""What the adapters of ``arrayport.libraries`` share for the ``arrayport`` command: the
refusal of a sample a library cannot make (``NotOffered``), a consumer entry point named by
module and function (``call``), the layout classes as indexing (``INDEXING``), and the
unusual-array record (``Kind``) with the helpers its factories use.

Imports nothing of arrayport: adapters import it at their top without pulling the command's
machinery in.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# The layout classes of the 3 x 4 sample (arrayport.cli.samples.LAYOUTS) as indexing of an
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
