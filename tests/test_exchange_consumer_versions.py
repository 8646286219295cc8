"""The consumer side of the C exchange API against hand-built tables (ctypes): the table is
read from the type, its major version is checked, prev_api is walked to a major version
arrayport reads, and a type with no readable table falls back to __dlpack__."""

import ctypes

import numpy as np
import pytest

import arrayport as ap
from arrayport._core import exchange_api_version

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Table(ctypes.Structure):
    """DLPackExchangeAPI: header {version {major, minor}, prev_api}, five functions."""
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("prev_api", ctypes.c_void_p),
                ("allocator", ctypes.c_void_p), ("from_py_object", ctypes.c_void_p),
                ("to_py_object", ctypes.c_void_p), ("dltensor", ctypes.c_void_p),
                ("current_stream", ctypes.c_void_p)]


VIEW_TABLE = Table.from_address(
    _get_pointer(ap.View.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))


def table(major, minor, prev=None):
    """A copy of View's functions under another version (kept alive by the caller)."""
    made = Table.from_buffer_copy(VIEW_TABLE)
    made.major, made.minor = major, minor
    made.prev_api = None if prev is None else ctypes.addressof(prev)
    return made


def producer_type(name, top):
    """A type wrapping an ndarray, with __dlpack__ and a table capsule over ``top``."""
    def __init__(self, array):
        self.array, self.dunder_calls = array, 0

    def __dlpack__(self, **kwargs):
        self.dunder_calls += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)

    capsule = _new_capsule(ctypes.addressof(top), b"dlpack_exchange_api", None)
    return type(name, (), {"__init__": __init__, "__dlpack__": __dlpack__,
                           "__dlpack_device__": __dlpack_device__,
                           "__dlpack_c_exchange_api__": capsule, "table": top})


V1 = table(1, 2)
CHAINED = producer_type("Chained", table(2, 0, prev=V1))
FUTURE_ONLY = producer_type("FutureOnly", table(2, 0))
BORROWED = producer_type("Borrowed", table(1, 3))


def test_prev_api_is_walked_to_a_major_version_arrayport_reads():
    assert exchange_api_version(CHAINED) == (1, 2)


def test_a_table_of_an_unknown_major_version_only_is_not_used():
    assert exchange_api_version(FUTURE_ONLY) is None
    source = FUTURE_ONLY(np.arange(3.0))
    assert ap.view(source).shape == (3,)
    assert source.dunder_calls == 1  # fell back to __dlpack__


@pytest.mark.parametrize("kind", [CHAINED, BORROWED])
def test_a_type_borrowing_views_table_is_read_without_recursing(kind, live):
    # View's table on a foreign type: its from_py_object views the object through
    # __dlpack__ (going through the table again would recurse forever).
    array = np.arange(4.0)
    source = kind(array)
    view = ap.view(source)
    assert view.ptr == array.__array_interface__["data"][0]
    assert source.dunder_calls == 1
    np.from_dlpack(view)[0] = 9
    assert array[0] == 9
    del view
    assert live.delta() == {}


def test_the_table_is_looked_up_on_the_type_not_the_instance():
    source = FUTURE_ONLY(np.arange(2.0))
    source.__dlpack_c_exchange_api__ = BORROWED.__dlpack_c_exchange_api__  # ignored
    ap.view(source)
    assert source.dunder_calls == 1
