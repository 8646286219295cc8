"""arrayport's own Views as a library of the matrix and of arrayport check, on the host.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

from arrayport.libraries.samples import numpy_layout


def _make_arrayport(base, layout):
    import arrayport
    return arrayport.view(numpy_layout(base, layout))


def _arrayport_routes():
    from arrayport import View
    return {"dlpack": View.from_dlpack, "array_interface": View.from_array_interface,
            "buffer": View.from_buffer, "__array__": View.from_array, "arrow": _view}


def _view(x):
    import arrayport
    return arrayport.view(x)


# ---- what arrayport.libraries reads -----------------------------------------------------------

make = _make_arrayport
routes = _arrayport_routes
via_arrayport = _view


def _check_read_only(a):
    import arrayport
    frozen = a.copy()
    frozen.flags.writeable = False
    return arrayport.view(frozen)


def _check_make(a):
    import arrayport
    return arrayport.view(a.copy())


def _check_from_dlpack(x):
    import arrayport
    return arrayport.from_dlpack(x)


CHECK = (_check_make, _check_from_dlpack, _check_read_only)


def writable(x):
    return not x.readonly
