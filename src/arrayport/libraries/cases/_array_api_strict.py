"""array-api-strict: the array API standard's strict reference, in the matrix.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import NotOffered, call


def _make_array_api_strict(base, layout):
    import array_api_strict as xp
    try:
        array = xp.asarray(base)
    except (TypeError, ValueError) as exc:
        raise NotOffered(f"array-api-strict: {exc}") from None
    ops = {"contiguous": lambda a: a, "transposed": lambda a: a.T,
           "sliced": lambda a: a[1:, 1:], "negative": lambda a: xp.flip(a, axis=0),
           "0-d": lambda a: a[1, 2], "size-0": lambda a: a[:0]}
    if layout not in ops:
        raise NotOffered(f"array-api-strict arrays cannot be {layout}")
    return ops[layout](array)


# ---- what arrayport.libraries reads -----------------------------------------------------------

# How a user reaches it through arrayport, as the matrix's arrayport route does.
ARRAYPORT_CALL = 'xp.from_dlpack(ap.view(x))'

make = _make_array_api_strict


def routes():
    return {"dlpack": call("array_api_strict", "from_dlpack"),
            "__array__": call("array_api_strict", "asarray")}


def _view(x):
    import arrayport
    return arrayport.view(x)


via_arrayport = call("array_api_strict", "from_dlpack", _view)


def writable(x):
    return bool(np.asarray(x._array).flags.writeable)


def host_values(x):
    return np.array(x._array)
