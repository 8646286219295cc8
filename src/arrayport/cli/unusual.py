"""Each library's unusual arrays — the kinds a fast path is most likely to get wrong — with
what they hold, told by the library itself.

A kind is one array a library can make (PyTorch's conjugate and negative views, grad,
sparse, meta, nested and quantized tensors; a deleted or sharded JAX array; NumPy's
broadcasts, structured, object and datetime arrays; pyarrow's nulls and chunks…), with its
``reference``: the library's own conversion to NumPy with every lazy bit resolved
(``t.detach().resolve_conj().resolve_neg().numpy()`` and friends), or None when the array
has no faithful strided form at all — its memory is not its values (masked elements,
nulls, lazy storage) — so no exchange may share it. NumPy arrays DLPack cannot describe
(structured, object, datetime, byte-swapped) do have a reference: NumPy holds them, and
arrayport must refuse them, not misread them. ``writable`` says whether writing through a
zero-copy alias is allowed.

Each library's kinds are its adapter's ``kinds()`` (``arrayport.libraries``); this module
finds them by the library's module name.

Used by the differential test (tests/test_unusual_kinds.py: every arrayport route against
the reference), by ``arrayport check`` (the library's own DLPack export against it) and by
``arrayport matrix`` (producer cases). Factories import their library when called.
"""

from __future__ import annotations

from typing import Callable

from arrayport.libraries.toolkit import Kind
from arrayport.libraries import LIBRARIES

__all__ = ["FRAMEWORK_MODULES", "KINDS_BY_LIBRARY", "Kind", "kind", "kinds_of"]


def _kinds_of_record(library) -> Callable[[], list[Kind]]:
    def kinds() -> list[Kind]:
        return library.get("kinds")()
    return kinds


# {module name: factory of its kinds}, for every library whose adapter has kinds.
KINDS_BY_LIBRARY: dict[str, Callable[[], list[Kind]]] = {
    library.module: _kinds_of_record(library) for library in LIBRARIES
    if library.adapter and library.get("kinds") is not None}
# Frameworks that can kill each other in one process: their kinds are tested one framework
# per process (tests/test_frameworks.py), never beside the others.
FRAMEWORK_MODULES = tuple(library.module for library in LIBRARIES if library.isolated)


def kinds_of(library: str) -> list[Kind]:
    """The unusual kinds ``library`` (a module name) can make; [] for one not listed."""
    factory = KINDS_BY_LIBRARY.get(library)
    return factory() if factory is not None else []


def kind(label: str) -> Kind:
    """The kind called ``library:name``."""
    library, _, name = label.partition(":")
    for candidate in kinds_of(library):
        if candidate.name == name:
            return candidate
    raise KeyError(f"no unusual kind {label!r}")
