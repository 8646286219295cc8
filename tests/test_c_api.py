"""The C side, from an out-of-tree C extension (tests/helpers/capi_consumer.c) built against
the installed headers only: the DLPack 1.3 C exchange API that View carries (producer),
PyTorch's (consumed), and arrayport's own C API (arrayport/capi.h) — with exact refcounts,
live counters and deleter counts."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import arrayport as ap
from producer import compiler
from optional import needs, optional_module

torch = optional_module("torch")


# A View whose type's exchange table the allocator tests use (made before any test's
# counter snapshot).
LIKE = ap.view(np.zeros(1))


def element_address(array):
    return array.__array_interface__["data"][0]


# ---- View's exchange API table ---------------------------------------------------------------

def test_view_type_carries_a_complete_version_1_3_table(capi_consumer):
    view = ap.view(np.zeros(2))
    assert capi_consumer.exchange_version(view) == (1, 3, 1, 1, 1, 1, 1)
    assert ap._core.exchange_api_version(ap.View) == (1, 3)
    # On the type, so consumers can cache it per type.
    assert "__dlpack_c_exchange_api__" in ap.View.__dict__


@pytest.mark.parametrize("readonly", [False, True])
def test_exchange_export_shares_memory_keeps_the_view_alive_and_deletes_once(
        capi_consumer, live, readonly):
    source = np.arange(6.0).reshape(2, 3)[:, ::2]
    source.flags.writeable = not readonly
    view = ap.view(source)
    before = sys.getrefcount(view)
    held = capi_consumer.exchange_hold(view)
    assert sys.getrefcount(view) == before + 1
    assert live.delta() == {"exported": 1}  # a View of an ndarray holds no managed tensor
    description = capi_consumer.exchange_import(view)
    assert description == {
        "data": element_address(source), "shape": (2, 2), "strides": (3, 2),
        "dtype": (2, 64, 1), "device": (1, 0), "flags": 1 if readonly else 0,
    }
    del held
    assert sys.getrefcount(view) == before
    assert live.delta() == {}


def test_views_table_exports_numpy_arrays_and_anything_view_accepts(capi_consumer, live):
    array = np.arange(6, dtype=np.int16).reshape(2, 3)[:, ::-1]
    array.flags.writeable = False
    before = sys.getrefcount(array)
    description = capi_consumer.exchange_import_with(LIKE, array)
    assert description["data"] == ap.view(array).ptr
    assert description["strides"] == (3, -1) and description["flags"] == 1
    assert capi_consumer.exchange_import_with(LIKE, b"abc")["shape"] == (3,)
    with pytest.raises(TypeError, match="offers no array protocol"):
        capi_consumer.exchange_import_with(LIKE, object())
    assert sys.getrefcount(array) == before
    assert live.delta() == {}


def test_exchange_dltensor_is_non_owning(capi_consumer, live):
    view = ap.view(np.arange(4, dtype=np.uint8)[1:])
    before = sys.getrefcount(view)
    assert capi_consumer.exchange_dltensor(view)["data"] == view.ptr
    assert sys.getrefcount(view) == before
    assert live.delta() == {}  # nothing held: the View reads the ndarray it keeps alive


def test_exchange_functions_refuse_bad_input_with_clear_errors(capi_consumer, live):
    with pytest.raises(TypeError, match="dltensor_from_py_object_no_sync expects an "
                                        "arrayport.View, got ndarray"):
        capi_consumer.exchange_dltensor_with(LIKE, np.zeros(2))
    with pytest.raises(ValueError, match="managed_tensor_to_py_object_no_sync got a NULL"):
        capi_consumer.exchange_to_py_null(LIKE)
    with pytest.raises(ValueError, match="view_from_managed got a NULL tensor"):
        capi_consumer.capi_view_from_null()
    assert live.delta() == {}


@needs('torch')
def test_exchange_to_py_object_wraps_another_libraries_tensor_as_a_view(capi_consumer, live):
    tensor = torch.arange(5, dtype=torch.float32)
    before = sys.getrefcount(tensor)
    view = capi_consumer.exchange_move(tensor, LIKE)
    assert type(view) is ap.View and view.owner is None
    assert sys.getrefcount(tensor) == before + 1  # PyTorch's managed tensor holds it
    view_array = np.from_dlpack(view)
    tensor[0] = 42
    assert view_array[0] == 42
    del view, view_array
    assert sys.getrefcount(tensor) == before
    assert live.delta() == {}


@needs('torch')
def test_exchange_moves_views_to_torch_zero_copy(capi_consumer, live):
    source = np.arange(4.0)
    tensor = capi_consumer.exchange_move(ap.view(source), torch.zeros(1))
    assert isinstance(tensor, torch.Tensor) and tensor.data_ptr() == element_address(source)
    tensor[1] = -1
    assert source[1] == -1
    assert live.delta() == {"exported": 1}
    del tensor
    assert live.delta() == {}


def test_exchange_allocator_makes_host_tensors_that_views_own(capi_consumer, live):
    like = LIKE
    view = capi_consumer.exchange_allocate(like, (2, 3), (1, 16, 1), 1)
    assert (view.dtype.name, view.shape, view.strides) == ("uint16", (2, 3), (6, 2))
    assert view.ptr % 64 == 0
    assert np.from_dlpack(view).view(np.uint8).ravel().tolist() == list(range(12))
    assert live.delta() == {"allocated": 1, "imported": 1}  # the View owns it
    del view
    assert live.delta() == {}
    # Zero elements, zero dimensions and packed sub-byte types allocate too.
    assert capi_consumer.exchange_allocate(like, (0, 5), (2, 32, 1), 1).size == 0
    assert capi_consumer.exchange_allocate(like, (), (2, 64, 1), 1).shape == ()
    assert capi_consumer.exchange_allocate(like, (3,), (17, 4, 1), 1).nbytes == 2
    assert live.delta() == {}


@pytest.mark.parametrize("shape, dtype, device, message", [
    ((2,), (2, 32, 1), 2, "BufferError: arrayport allocator: only host"),
    ((-1,), (2, 32, 1), 1, "ValueError: .*negative"),
    ((2,), (2, 12, 1), 1, "ValueError: .*not a DLPack type"),
    ((2**62, 2**62), (2, 32, 1), 1, "MemoryError: .*too many elements"),
    ((2**61,), (2, 64, 1), 1, "MemoryError: .*too large"),
])
def test_exchange_allocator_reports_errors_through_set_error(
        capi_consumer, live, shape, dtype, device, message):
    with pytest.raises(RuntimeError, match=message):
        capi_consumer.exchange_allocate(LIKE, shape, dtype, device)
    assert live.delta() == {}


def test_exchange_current_work_stream_is_null(capi_consumer):
    assert capi_consumer.exchange_current_stream(LIKE, 1, 0) == 0
    assert capi_consumer.exchange_current_stream(LIKE, 2, 0) == 0


# ---- consuming PyTorch's exchange API from C ---------------------------------------------------

@needs('torch')
def test_torch_table_is_found_and_import_holds_exactly_one_reference(capi_consumer):
    tensor = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    before = sys.getrefcount(tensor)
    held = capi_consumer.exchange_hold(tensor)
    assert sys.getrefcount(tensor) == before + 1
    description = capi_consumer.exchange_import(tensor)
    assert description["data"] == tensor.data_ptr()
    assert description["shape"] == (2, 3) and description["strides"] == (3, 1)
    del held
    assert sys.getrefcount(tensor) == before


# ---- arrayport's own C API ---------------------------------------------------------------------

def test_c_api_capsule_is_versioned_and_names_the_view_type(capi_consumer):
    assert capi_consumer.capi_version() == (1, 0, ap.View)
    assert type(ap._C_API).__name__ == "PyCapsule"


@needs('torch')
@pytest.mark.parametrize("make", [
    lambda: np.arange(6.0).reshape(2, 3).T,
    lambda: torch.arange(6.0).reshape(2, 3)[:, 1:],
    lambda: ap.view(np.arange(6.0)[::-2]),
    lambda: memoryview(bytearray(b"abcdef")),
], ids=["numpy", "torch", "view", "buffer"])
def test_c_api_to_managed_shares_memory_with_anything_view_accepts(capi_consumer, live, make):
    source = make()
    expected = ap.view(source)
    description = capi_consumer.capi_import(source)
    assert description["data"] == expected.ptr
    assert description["shape"] == expected.shape
    assert description["strides"] == expected.element_strides
    del expected, description, source
    assert live.delta() == {}


def test_c_api_to_managed_carries_read_only_and_holds_its_source(capi_consumer, live):
    source = np.arange(3.0)
    source.flags.writeable = False
    assert capi_consumer.capi_import(source)["flags"] == 1
    before = sys.getrefcount(source)
    held = capi_consumer.capi_hold(source)
    assert sys.getrefcount(source) > before
    del held
    assert sys.getrefcount(source) == before
    assert live.delta() == {}


def test_c_api_validates_the_stream_like_view(capi_consumer):
    with pytest.raises(ValueError, match="stream must be None for host memory"):
        capi_consumer.capi_import(bytearray(4), 1)
    with pytest.raises(ValueError, match="stream must be None"):
        capi_consumer.capi_view(np.zeros(2), 7)
    assert capi_consumer.capi_view(np.zeros(2), None).shape == (2,)


def test_c_api_rewrap_makes_a_view_owning_the_export(capi_consumer, live):
    source = np.arange(4.0)
    view = capi_consumer.capi_rewrap(source)
    assert type(view) is ap.View and view.ptr == element_address(source)
    # arrayport's export of a View of the ndarray, held by the new View.
    assert live.delta() == {"exported": 1, "imported": 1}
    del view
    assert live.delta() == {}


def test_c_api_view_dltensor_reports_flags_and_refuses_non_views(capi_consumer):
    source = np.arange(4.0)
    source.flags.writeable = False
    view = ap.view(source)
    description = capi_consumer.capi_dltensor(view)
    assert description["flags"] == 1 and description["data"] == view.ptr
    with pytest.raises(TypeError, match="expects an arrayport.View"):
        capi_consumer.capi_dltensor(source)


@needs('torch')
def test_views_made_in_c_call_the_c_deleter_exactly_once(capi_consumer, live):
    calls = capi_consumer.deleter_calls()
    view = capi_consumer.make_view(4, False)
    array = np.from_dlpack(view)
    assert array.tolist() == [0.0, 1.0, 2.0, 3.0]
    array[0] = 9
    assert np.from_dlpack(view)[0] == 9
    tensor = ap.to_torch(view)
    del view, array
    assert capi_consumer.deleter_calls() == calls  # the tensor still holds the memory
    del tensor
    assert capi_consumer.deleter_calls() == calls + 1
    readonly = capi_consumer.make_view(2, True)
    assert readonly.readonly
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(readonly)[0] = 1
    del readonly
    assert capi_consumer.deleter_calls() == calls + 2
    assert live.delta() == {}


def test_a_foreign_major_version_from_c_is_refused_and_deleted_once(capi_consumer, live):
    calls = capi_consumer.deleter_calls()
    with pytest.raises(BufferError, match="DLPack version 2"):
        capi_consumer.make_view(3, False, 2)
    assert capi_consumer.deleter_calls() == calls + 1
    assert live.delta() == {}


# ---- Cython users -------------------------------------------------------------------------------

CYTHON_USER = """
from arrayport.capi cimport ArrayportCAPI, arrayport_import_capi
from arrayport._dlpack_abi cimport APDLManagedTensorVersioned, APDLTensor

cdef const ArrayportCAPI* api = arrayport_import_capi()

def describe(obj):
    cdef APDLManagedTensorVersioned* m = NULL
    api.to_managed(obj, NULL, &m)
    result = (<size_t>m.dl_tensor.data, m.dl_tensor.ndim, m.flags)
    m.deleter(m)
    return result

def view_of(obj):
    return api.view(obj, NULL)

def version():
    return (api.version.major, api.version.minor)
"""


def test_cython_extension_uses_the_installed_pxd(tmp_path, live):
    if compiler() is None:
        pytest.skip("no C compiler")
    pytest.importorskip("Cython")
    (tmp_path / "cython_user.pyx").write_text(CYTHON_USER)
    (tmp_path / "setup.py").write_text(textwrap.dedent("""
        import arrayport
        from Cython.Build import cythonize
        from setuptools import Extension, setup
        setup(ext_modules=cythonize([Extension("cython_user", ["cython_user.pyx"],
              include_dirs=[arrayport.get_include()])], language_level=3, quiet=True))
    """))
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        import cython_user
    finally:
        sys.path.remove(str(tmp_path))
    source = np.arange(5.0)
    source.flags.writeable = False
    assert cython_user.version() == (1, 0)
    assert cython_user.describe(source) == (element_address(source), 1, 1)
    assert cython_user.view_of(source).ptr == element_address(source)
    with pytest.raises(TypeError, match="offers no array protocol"):
        cython_user.view_of(object())
    assert live.delta() == {}


def test_headers_and_pxd_are_installed():
    include = Path(ap.get_include()) / "arrayport"
    assert (include / "capi.h").is_file() and (include / "dlpack_abi.h").is_file()
    assert (Path(ap.__file__).parent / "capi.pxd").is_file()
