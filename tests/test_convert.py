"""ap.to_numpy, ap.to_torch and ap.to(x, target): zero-copy where the target can hold the
data, a copy only when asked or unavoidable, and every known trap of the targets routed
around (PyTorch's abort on negative strides, writable-only tensors, NumPy's missing
bfloat16/float8, JAX's silent narrowing and alignment copies)."""

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import arrayport as ap
from arrayport._core import view_from_pointer
from optional import needs, optional_module

torch = optional_module("torch")


def address(array):
    return array.__array_interface__["data"][0]


def readonly(array):
    array = array.copy()
    array.flags.writeable = False
    return array


def view_on(device, dtype="float32", shape=(4,)):
    """A View claiming memory on ``device`` (backed by a host array that is never read)."""
    backing = np.zeros(64, np.uint8)
    return view_from_pointer(address(backing), shape, None, dtype, readonly=False,
                             owner=backing, device=device, protocol="test")


# ---- to_numpy --------------------------------------------------------------------------------

@needs('torch')
def test_to_numpy_returns_an_ndarray_itself_and_shares_everything_else(live):
    array = np.arange(6.0)
    assert ap.to_numpy(array) is array
    tensor = torch.arange(6, dtype=torch.int16)
    shared = ap.to_numpy(tensor)
    tensor[0] = 99
    assert shared[0] == 99 and address(shared) == tensor.data_ptr()
    assert ap.to_numpy(bytearray(b"xyz")).tolist() == [120, 121, 122]
    assert ap.to_numpy(ap.view(array[::-2])).tolist() == [5.0, 3.0, 1.0]
    del shared, tensor
    assert live.delta() == {}


def test_to_numpy_keeps_read_only_and_copies_only_when_asked():
    source = readonly(np.arange(4.0))
    shared = ap.to_numpy(memoryview(source))
    assert not shared.flags.writeable and address(shared) == address(source)
    copied = ap.to_numpy(source, copy=True)
    assert copied.flags.writeable and address(copied) != address(source)
    np.testing.assert_array_equal(copied, source)
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        ap.to_numpy(source, copy="yes")


@needs('ml_dtypes', 'torch')
def test_to_numpy_maps_bfloat16_and_float8_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tensor = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    array = ap.to_numpy(tensor)
    assert array.dtype == ml_dtypes.bfloat16 and address(array) == tensor.data_ptr()
    assert array.astype(np.float32).tolist() == [1.5, -2.0]
    fp8 = ap.to_numpy(torch.tensor([0.5, 4.0]).to(torch.float8_e4m3fn))
    assert fp8.dtype == ml_dtypes.float8_e4m3fn and fp8.astype(float).tolist() == [0.5, 4.0]


def test_to_numpy_shares_pinned_host_memory_and_refuses_device_memory():
    pinned = view_on((3, 0))
    assert address(ap.to_numpy(pinned)) == pinned.ptr
    with pytest.raises(BufferError, match="to_numpy: the data is on cuda:0; NumPy reads host"):
        ap.to_numpy(view_on((2, 0)))


# ---- to_torch --------------------------------------------------------------------------------

@needs('torch')
def test_to_torch_shares_memory_both_ways(live):
    array = np.arange(6.0).reshape(2, 3)[:, 1:]
    before = sys.getrefcount(array)
    tensor = ap.to_torch(array)
    assert sys.getrefcount(array) == before + 1  # NumPy's managed tensor, now PyTorch's
    assert tensor.data_ptr() == address(array) and tensor.stride() == (3, 1)
    tensor[0, 0] = -7
    assert array[0, 0] == -7
    array[1, 1] = 11
    assert tensor[1, 1] == 11
    del tensor
    assert sys.getrefcount(array) == before
    assert live.delta() == {}


@needs('torch')
def test_to_torch_returns_a_tensor_itself():
    tensor = torch.ones(3)
    assert ap.to_torch(tensor) is tensor
    assert ap.to_torch(tensor, copy=True) is not tensor


@needs('torch')
@pytest.mark.parametrize("dtype", [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
])
def test_to_torch_every_numpy_dtype_round_trips(dtype):
    array = (np.arange(5) % 2).astype(dtype)
    tensor = ap.to_torch(array)
    assert tensor.data_ptr() == address(array)
    np.testing.assert_array_equal(tensor.numpy(), array)


@needs('ml_dtypes', 'torch')
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_to_torch_ml_dtypes_arrays_become_the_same_torch_type(dtype):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([1.0, 2.0], dtype=getattr(ml_dtypes, dtype))
    tensor = ap.to_torch(array)
    assert tensor.dtype == getattr(torch, dtype) and tensor.data_ptr() == address(array)
    assert tensor.float().tolist() == [1.0, 2.0]


@needs('torch')
@pytest.mark.parametrize("dtype", ["float8_e3m4", "float4_e2m1fn", "float32x4",
                                   "opaque_handle64"])
def test_to_torch_refuses_types_pytorch_lacks(dtype):
    # TypeNotHeld: a TypeError (and a BufferError); float4 here is packed, and says so.
    with pytest.raises(TypeError, match=f"to_torch: PyTorch has no type for (packed )?{dtype}"):
        ap.to_torch(view_on((1, 0), dtype, (2,)))


@needs('torch')
def test_to_torch_copies_negative_strides_and_refuses_with_copy_false(live):
    array = np.arange(6.0).reshape(2, 3)[::-1, ::-1]
    tensor = ap.to_torch(array)
    assert tensor.tolist() == array.tolist()
    assert tensor.data_ptr() != address(array)
    with pytest.raises(BufferError, match="negative strides .* but copy=False"):
        ap.to_torch(array, copy=False)
    # Negative strides on a dimension of one element move nowhere: shared.
    single = np.arange(3.0)[None, :][::-1]
    assert ap.to_torch(single, copy=False).data_ptr() == address(single)
    del tensor
    assert live.delta() == {}


NEGATIVE_STRIDES = """
import numpy as np, arrayport as ap
array = np.arange(6.0)[::-1]
{call}
print(tensor.tolist())
"""


@needs("torch")
def test_negative_strides_abort_pytorch_directly_but_not_through_arrayport():
    # The trap is real: PyTorch kills the process (a C++ exception nobody catches)...
    direct = subprocess.run(
        [sys.executable, "-c", NEGATIVE_STRIDES.format(
            call="import torch; tensor = torch.from_dlpack(array)")],
        capture_output=True, text=True, timeout=120)
    assert direct.returncode != 0 and "Storage size calculation overflowed" in direct.stderr
    # ...and arrayport survives it, with the right values.
    routed = subprocess.run(
        [sys.executable, "-c", NEGATIVE_STRIDES.format(call="tensor = ap.to_torch(array)")],
        capture_output=True, text=True, timeout=120)
    assert routed.returncode == 0, routed.stderr
    assert routed.stdout.strip() == "[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]"


@needs('torch')
def test_to_torch_read_only_default_policy_is_a_copy():
    source = readonly(np.arange(3.0))
    tensor = ap.to_torch(source)
    tensor[0] = 100
    assert source[0] == 0 and tensor.data_ptr() != address(source)
    with pytest.raises(BufferError, match="read-only .* readonly='share'.* but copy=False"):
        ap.to_torch(source, copy=False)


@needs('torch')
def test_to_torch_read_only_share_policy_shares_and_warns():
    source = readonly(np.arange(3.0))
    with pytest.warns(ap.ReadOnlySharedWarning, match="do not write") as record:
        tensor = ap.to_torch(source, readonly="share", copy=False)
    assert record[0].filename == __file__  # the warning points at the caller
    assert tensor.data_ptr() == address(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_torch(np.arange(3.0), readonly="share")  # writable data: no warning
    with pytest.raises(ValueError, match="readonly must be 'copy' or 'share'"):
        ap.to_torch(source, readonly="ignore")


@needs('torch')
def test_to_torch_copy_true_is_fresh_and_writable():
    source = np.arange(4, dtype=np.int32)
    tensor = ap.to_torch(source, copy=True)
    tensor[0] = 5
    assert source[0] == 0


@needs('torch')
def test_to_torch_devices_and_streams(without_cuda):
    # Without a CUDA driver a tensor cannot go to cuda:0 (with one, the GPU suite's
    # tests/test_gpu_devices.py covers it)
    source = np.arange(3.0)
    assert ap.to_torch(source, device="cpu").data_ptr() == address(source)
    assert ap.to_torch(source, device=torch.device("cpu")).data_ptr() == address(source)
    with pytest.raises(BufferError, match="cuda:0"):
        ap.to_torch(source, device="cuda:0")
    with pytest.raises(ValueError, match="stream must be None for cpu memory"):
        ap.to_torch(source, stream=1)
    pinned = view_on((3, 0))
    assert ap.to_torch(pinned, device="cpu").data_ptr() == pinned.ptr


# ---- ap.to -----------------------------------------------------------------------------------

@needs('torch')
def test_to_names_its_targets_and_refuses_unknown_ones():
    assert set(ap.convert.TARGETS) == {"numpy", "torch", "jax", "cupy", "numba", "cuda.core",
                                       "tvm_ffi", "pyarrow", "pyarrow.Tensor", "tensorflow",
                                       "mlx", "paddle", "warp", "polars"}
    assert ap.to(np.arange(2), "torch").tolist() == [0, 1]
    with pytest.raises(ValueError, match="unknown target 'keras'; choose one of numpy"):
        ap.to(np.arange(2), "keras")


def test_to_mlx_imports_mlx_core(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlx.core", None)  # as if not installed
    with pytest.raises(ImportError, match="to: target 'mlx' needs mlx.core"):
        ap.to(np.arange(2), "mlx")


def test_to_a_missing_library_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if not installed
    with pytest.raises(ImportError, match="to: target 'cupy' needs cupy"):
        ap.to(np.arange(2), "cupy")


def test_to_torch_without_pytorch_is_a_clear_import_error():
    code = textwrap.dedent("""
        import sys, numpy as np, arrayport as ap
        sys.modules["torch"] = None  # as if not installed
        try:
            ap.to_torch(np.arange(3))
        except ImportError as error:
            print(error)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.startswith("to_torch: PyTorch cannot be imported"), result.stderr


def test_to_tvm_ffi_shares_memory_and_applies_the_read_only_policy(live):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    array = np.arange(6.0)[::-1]
    tensor = ap.to(array, "tvm_ffi")
    assert isinstance(tensor, tvm_ffi.Tensor) and tensor.data_ptr() == ap.view(array).ptr
    source = readonly(np.arange(3.0))
    assert ap.to(source, "tvm_ffi").data_ptr() != address(source)
    with pytest.warns(ap.ReadOnlySharedWarning):
        assert ap.to(source, "tvm_ffi", readonly="share").data_ptr() == address(source)
    del tensor
    assert live.delta() == {}


def test_to_pyarrow_shares_one_dimensional_contiguous_data():
    pa = pytest.importorskip("pyarrow")
    source = readonly(np.arange(5, dtype=np.int32))  # Arrow arrays are immutable: shared
    array = ap.to(source, "pyarrow")
    assert array.type == pa.int32() and array.to_pylist() == [0, 1, 2, 3, 4]
    assert array.buffers()[1].address == address(source)
    strided = np.arange(6.0)[::-2]
    assert ap.to(strided, "pyarrow").to_pylist() == [5.0, 3.0, 1.0]
    with pytest.raises(BufferError, match="Arrow arrays are contiguous, .* copy=False"):
        ap.to(strided, "pyarrow", copy=False)
    # n-D data: nested fixed-size lists (tests/test_hostile_third_pass.py), 0-d: none
    assert ap.to(np.zeros((2, 2)), "pyarrow").to_pylist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="the data is 0-d"):
        ap.to(np.float64(0), "pyarrow")
    with pytest.raises(TypeError, match="no fixed-width type for complex128"):
        ap.to(np.zeros(2, complex), "pyarrow")


def test_to_pyarrow_tensor_keeps_strides():
    pa = pytest.importorskip("pyarrow")
    source = np.arange(6.0).reshape(2, 3).T
    tensor = ap.to(source, "pyarrow.Tensor")
    assert isinstance(tensor, pa.Tensor) and tensor.shape == (3, 2)
    assert tensor.strides == source.strides
    np.testing.assert_array_equal(tensor.to_numpy(), source)
    flipped = np.arange(4.0)[::-1]
    np.testing.assert_array_equal(ap.to(flipped, "pyarrow.Tensor").to_numpy(), flipped)


@pytest.fixture
def jnp():
    pytest.importorskip("jax")
    import jax.numpy
    return jax.numpy


def test_to_jax_shares_aligned_memory_and_reads_read_only(jnp):
    aligned = ap.view(np.arange(16, dtype=np.float32)).host_copy()  # 64-byte aligned
    array = ap.to(aligned, "jax", copy=False)
    assert array.unsafe_buffer_pointer() == aligned.ptr
    source = readonly(np.arange(4, dtype=np.float32))
    assert ap.to(source, "jax").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_jax_own_importer_refused_read_only_names_the_route_that_works(jnp):
    # JAX's importer asks for a legacy capsule; its user cannot change that, so the refusal
    # must name a call the user can make — and that call must work.
    import jax.dlpack
    view = ap.view(readonly(np.arange(4, dtype=np.float32)))
    with pytest.raises(BufferError, match=r'arrayport\.to\(x, "jax"\)'):
        jax.dlpack.from_dlpack(view)
    assert ap.to(view, "jax").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_to_jax_routes_around_its_traps(jnp):
    with pytest.raises(TypeError, match="JAX would narrow float64 to float32"):
        ap.to(np.arange(3.0), "jax")
    flipped = np.arange(4, dtype=np.float32)[::-1]
    assert ap.to(flipped, "jax").tolist() == [3.0, 2.0, 1.0, 0.0]
    with pytest.raises(BufferError, match="negative or zero strides"):
        ap.to(flipped, "jax", copy=False)
    unaligned = ap.view(np.zeros(20, np.uint8)).host_copy()
    offset = view_from_pointer(unaligned.ptr + 4, (4,), None, "float32", readonly=False,
                               owner=unaligned, protocol="test")
    with pytest.raises(BufferError, match="64-byte aligned .* but copy=False"):
        ap.to(offset, "jax", copy=False)


@needs('torch')
def test_converters_leave_no_counters_behind(live):
    source = np.arange(8.0)
    for _ in range(3):
        ap.to_torch(source)
        ap.to_numpy(torch.ones(2))
        ap.to_torch(readonly(source))
        ap.to_torch(source[::-1])
    assert live.delta() == {}


@needs("torch")
def test_conversion_works_in_a_fresh_interpreter_without_other_imports():
    code = textwrap.dedent("""
        import sys, numpy as np, arrayport as ap
        assert "torch" not in sys.modules and "jax" not in sys.modules
        print(ap.to_torch(np.arange(3)).tolist())
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 1, 2]"


@needs('torch')
def test_to_jax_copies_strides_with_gaps(jnp):
    # JAX's DLPack import takes only transpositions of a contiguous layout: a sliced array
    # raised JaxRuntimeError (UNIMPLEMENTED) out of ap.to(x, "jax").
    data = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    np.testing.assert_array_equal(np.asarray(ap.to(data, "jax")), data)
    with pytest.raises(BufferError, match="permute a contiguous layout"):
        ap.to(data, "jax", copy=False)


def test_jax_arrays_are_viewed_read_only_and_never_handed_out_writable():
    # JAX arrays are immutable but arrive as legacy capsules (no READ_ONLY flag): found by
    # `arrayport matrix`, where ap.to_numpy(jax_array) was a writable alias of JAX's buffer.
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(8, dtype=jnp.float32)
    v = ap.view(x)
    assert v.readonly and v.ptr == x.unsafe_buffer_pointer()
    shared = ap.to_numpy(x)
    assert not shared.flags.writeable
    assert shared.__array_interface__["data"][0] == x.unsafe_buffer_pointer()
    t = ap.to_torch(x)
    assert t.data_ptr() != x.unsafe_buffer_pointer()
    t += 1  # the copy is the user's to write
    assert np.asarray(x)[0] == 0 and isinstance(t, torch.Tensor)


# ---- to(x, "polars"): a Series over the View's Arrow export ------------------------------------

def test_to_polars_shares_c_contiguous_memory_and_copies_the_rest():
    pl = pytest.importorskip("polars")
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    series = ap.to(rows, "polars")
    assert series.dtype == pl.Array(pl.Float32, 4) and series.len() == 3
    assert series.to_numpy(allow_copy=False).ctypes.data == rows.ctypes.data   # zero-copy
    column = ap.to(np.arange(5, dtype=np.int64)[::-1], "polars")        # copied
    assert column.to_list() == [4, 3, 2, 1, 0]
    with pytest.raises(BufferError, match="copy=False"):
        ap.to(rows.T, "polars", copy=False)
    assert ap.to(np.array([True, False]), "polars").to_list() == [True, False]
    with pytest.raises(BufferError, match="copy=False"):
        ap.to(np.array([True, False]), "polars", copy=False)
    with pytest.raises(ValueError, match="at least one dimension"):
        ap.to(np.float32(1.0), "polars")
    # Types Polars has no type for are refused, not held as Python objects (the matrix
    # found bfloat16 arriving as dtype Object).
    with pytest.raises(TypeError, match="Polars has no type for complex64"):
        ap.to(np.zeros(2, np.complex64), "polars")
    ap_bf16 = ap.view(np.zeros(2, np.uint16)).view_as("bfloat16")
    with pytest.raises(TypeError, match="Polars has no type for bfloat16"):
        ap.to(ap_bf16, "polars")
