"""The second hostile pass (issue 31), one test per case found: derived Views whose byte
count wrapped (heap overflow), integer-likes that wrote outside a C array, empty writable
arrays that became read-only, and packed float4/float6 that could not leave arrayport.
(The shared-memory cases, a read-only share that could be written and a truncation that
killed readers, are in tests/test_shared_memory.py.)

Crash cases run in a child process (tests/helpers/isolated.py): before the fixes they died
of SIGSEGV or SIGABRT; now each must exit normally with exactly the answers below.
"""

import pickle

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from isolated import refusals, run_isolated
from optional import needs, optional_module

ml_dtypes = optional_module("ml_dtypes")


# ---- case 1: derived Views take their byte count from the one checked place -------------------

_HUGE_BROADCAST = """
    import pickle
    x = np.broadcast_to(np.zeros(1, np.uint8), (2**61,))
    v = ap.view(x)
"""


def test_slices_of_a_huge_broadcast_count_their_bytes_exactly():
    # Before: v[:].nbytes was 0 and v[1:].nbytes -1 (the product computed in bits wrapped).
    output = run_isolated(_HUGE_BROADCAST, """
        print(v.nbytes, v[:].nbytes, v[1:].nbytes, v[::2].nbytes, v[None, 5:].nbytes,
              v[::-1].nbytes, v.reshape(2**30, 2**31).T.nbytes, v.view_as("uint8").nbytes)
    """)
    assert output.split() == [str(n) for n in (
        2**61, 2**61, 2**61 - 1, 2**60, 2**61 - 5, 2**61, 2**61, 2**61)]


@pytest.mark.parametrize("call", [
    "v[:].copy()", "v[1:].copy()", "v[1:].host_copy()", "ap.to_numpy(v[1:], copy=True)",
    "pickle.dumps(v[1:], protocol=4)",
    "pickle.dumps(v[1:], protocol=5, buffer_callback=lambda b: None)",
    "v[1:].share()", "bytes(memoryview(v[1:]))",
])
def test_copies_of_a_huge_derived_broadcast_are_refused_not_overflowed(call):
    # Before: v[:].copy() wrote 2**61 bytes into a 0-byte buffer (SIGSEGV), host_copy,
    # pickle and share() likewise; to_numpy(copy=True) aborted. Now each asks for the real
    # byte count, which no machine has: a MemoryError naming it, and the process lives.
    output = run_isolated(_HUGE_BROADCAST, f"""
        attempt(lambda: {call})
        print("alive", v[1:].nbytes)
    """)
    lines = output.splitlines()
    assert lines[0].startswith("refused MemoryError"), output
    if not call.startswith("bytes("):       # Python's own bytes() says nothing more
        assert str(2**61 if "v[:]" in call else 2**61 - 1) in lines[0] or "cannot map" in lines[0], output
    assert lines[-1] == f"alive {2**61 - 1}"


@needs("torch")
def test_a_huge_torch_expand_sliced_and_copied_is_refused_cleanly():
    output = run_isolated("""
        import torch
        v = ap.view(torch.zeros(1, dtype=torch.uint8).expand(2**61))
        print(v[:].nbytes, v[1:].nbytes)
        attempt(lambda: v[1:].copy())
        attempt(lambda: ap.to_torch(v[1:]))
    """)
    lines = output.splitlines()
    assert lines[0] == f"{2**61} {2**61 - 1}"
    assert all(line.startswith(("refused MemoryError", "returned")) for line in lines[1:]), output


def test_a_step_past_the_extent_keeps_the_stride_without_overflow():
    # A slice step of 2**62 over a stride of 8 elements: one element is taken, so the
    # product (which would overflow int64) is never formed.
    v = ap.view(np.arange(64.0).reshape(8, 8))[:, ::2**62]
    assert v.shape == (8, 1) and v.element_strides == (8, 1)
    np.testing.assert_array_equal(np.asarray(v), np.arange(64.0).reshape(8, 8)[:, ::2**62])


# ---- case 2: user values become plain ints before they are checked ---------------------------

_INTEGER_LIKES = """
    class Liar:
        '''Says yes to every bound, then gives another number.'''
        def __init__(self, value):
            self.value = value
        def __index__(self):
            return self.value
        __le__ = __ge__ = lambda self, other: True
        __lt__ = __gt__ = lambda self, other: False
        def __repr__(self):
            return f"Liar({self.value})"

    class Drifter:
        '''An honest first answer, then a different one on every later read.'''
        def __init__(self, first, later):
            self.answers = [first]
            self.later = later
        def __index__(self):
            return self.answers.pop() if self.answers else self.later
        def __repr__(self):
            return "Drifter"
"""


@pytest.mark.parametrize("value", [10**8, -5, 1000, 65])
@pytest.mark.parametrize("call", [
    "ap.Spec(ndim={x})",
    "ap.Spec(shape=({x},))",
    "ap.require(np.zeros(3), ndim={x})",
    "ap.accepts(a=ap.Spec(ndim={x}))(lambda a: a)(np.zeros(3))",
])
def test_lying_integer_likes_are_judged_by_their_value(call, value):
    # Before: Liar(10**8) passed `0 <= item <= 64`, then its __index__ wrote entry 10**8
    # of a 65-entry C array (SIGSEGV); at 1000, silently.
    output = run_isolated(_INTEGER_LIKES, f"""
        attempt(lambda: {call.format(x=f"Liar({value})")})
    """)
    if "shape" in call and value >= 0:
        assert output.startswith("returned"), output   # a 1-d shape of that extent is fine
    else:
        assert output.startswith("refused ValueError: Spec: "), output


def test_integer_likes_that_drift_are_read_once():
    output = run_isolated(_INTEGER_LIKES, """
        spec = ap.Spec(ndim=Drifter(2, 10**8))
        print(spec.ndims)
        print(ap.Spec(shape=(Drifter(3, -7),)).shape)
        print(ap.Spec(align=Drifter(64, 3)).align)
        v = ap.view(np.arange(24).reshape(2, 3, 4))
        print(v[Drifter(1, 10**9)].shape, v.permute((Drifter(2, 99), 0, 1)).shape,
              v.reshape((Drifter(6, -1), 4)).shape)
        attempt(lambda: v[Liar(10**8)])
        attempt(lambda: v.permute((Liar(10**8), 0, 1)))
    """)
    lines = output.splitlines()
    assert lines[:4] == ["(2,)", "(3,)", "64", "(3, 4) (4, 2, 3) (6, 4)"], output
    assert lines[4].startswith("refused IndexError: index 100000000 is out of bounds")
    assert lines[5].startswith("refused ValueError: View.permute: axis 100000000 is out")


def test_int_subclasses_with_their_own_comparisons_are_read_as_ints():
    class Huge(int):
        __lt__ = __gt__ = __le__ = __ge__ = __eq__ = __ne__ = lambda self, other: False
        __hash__ = int.__hash__

    with pytest.raises(BufferError, match="dl_device type"):
        ap.view(np.zeros(2)).__dlpack__(max_version=(1, 0), dl_device=(Huge(2**40), 0))
    with pytest.raises(ValueError, match="ndim must be an int"):
        ap.Spec(ndim=Huge(2**40))


# ---- case 5: an array with no elements has no overlap ------------------------------------

@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0,), (3, 0, 5)])
def test_empty_writable_arrays_stay_writable(shape):
    a = np.empty(shape)
    for v in (ap.view(a), ap.from_dlpack(a), ap.View.from_array_interface(a)):
        assert not v.readonly, (v, v.protocol)


def test_empty_zero_stride_layouts_are_not_broadcasts():
    # NumPy >= 2.3 exports empty arrays with zero strides; a producer may too.
    memory = np.zeros(1)

    class Empty:
        __array_interface__ = {"version": 3, "shape": (0, 4), "strides": (0, 0),
                               "typestr": "<f8", "data": (memory.ctypes.data, False)}

    class Broadcast:
        __array_interface__ = {"version": 3, "shape": (1, 4), "strides": (0, 0),
                               "typestr": "<f8", "data": (memory.ctypes.data, False)}

    assert not ap.View.from_array_interface(Empty()).readonly
    assert ap.View.from_array_interface(Broadcast()).readonly    # overlap: still read-only


@needs("jax")
def test_jax_imports_a_view_of_an_empty_writable_array():
    # Before: read-only, then refused as a legacy capsule (JAX's own suite found it).
    import jax
    array = jax.dlpack.from_dlpack(ap.view(np.empty((0, 4), np.float32)))
    assert array.shape == (0, 4)


@needs("torch")
def test_torch_imports_a_view_of_an_empty_writable_array_writably():
    import torch
    t = torch.from_dlpack(ap.view(np.empty((0, 4), np.float32)))
    assert t.shape == (0, 4)


# ---- case 6: packed sub-byte types through every converter -------------------------------------

SUBBYTE = [("float4_e2m1fn", 4), ("float6_e2m3fn", 6), ("float6_e3m2fn", 6)]
VALUES = [0.5, 1.0, -2.0, 6.0, 0.0, 3.0, -1.5, 1.5, 4.0]


def pack(codes, bits):
    """DLPack's packing in Python ints: element i at bits [i*bits, (i+1)*bits), little
    bit-endian — the model the core's unpacking is held to."""
    number = sum(int(code) << (i * bits) for i, code in enumerate(codes))
    return bytearray(number.to_bytes((len(codes) * bits + 7) // 8, "little"))


def packed_view(name, bits, count=len(VALUES)):
    """A packed View of ``VALUES[:count]`` in ``name``, and the same values as ml_dtypes
    holds them (one per byte)."""
    padded = np.array((VALUES * 8)[:count], dtype=getattr(ml_dtypes, name))
    dtype = ap.DType(name)
    view = _core.view_over_buffer(pack(padded.view(np.uint8), bits),
                                  (int(dtype.code), dtype.bits, 1, False), (count,), None,
                                  True, "test")
    assert view.dtype.padded is False and view.nbytes == (count * bits + 7) // 8
    return view, padded


@needs("ml_dtypes")
@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 9, 64])
@pytest.mark.parametrize("name, bits", SUBBYTE)
def test_packed_types_unpack_into_numpy(name, bits, count):
    # Before: TypeError with the default copy=None, though ml_dtypes has the type.
    view, expected = packed_view(name, bits, count)
    array = ap.to_numpy(view)
    assert array.dtype == expected.dtype and array.shape == (count,)
    assert array.view(np.uint8).tolist() == expected.view(np.uint8).tolist()
    with pytest.raises(BufferError, match=f"packed {name} elements must be unpacked one per "
                                          f"byte for this target, which needs a copy, but "
                                          f"copy=False"):
        ap.to_numpy(view, copy=False)


@needs("ml_dtypes")
def test_unpacked_copy_is_a_padded_copy_and_refuses_whole_bytes():
    view, expected = packed_view("float4_e2m1fn", 4)
    unpacked = _core.unpacked_copy(view)
    assert unpacked.dtype.padded and unpacked.is_copy and not unpacked.readonly
    assert ap.to_numpy(unpacked).view(np.uint8).tobytes() == expected.view(np.uint8).tobytes()
    assert unpacked.nbytes == len(VALUES)
    with pytest.raises(ValueError, match="whole bytes already"):
        _core.unpacked_copy(ap.view(np.zeros(2)))


@needs("ml_dtypes", "jax")
def test_jax_packed_float4_round_trips_through_arrayport():
    import jax.numpy as jnp
    x = jnp.array(VALUES, dtype=jnp.float4_e2m1fn)
    view = ap.view(x)
    assert view.dtype.padded is False          # JAX exports it packed
    expected = np.asarray(x)
    np.testing.assert_array_equal(ap.to_numpy(view).astype(np.float32),
                                  expected.astype(np.float32))
    back = ap.to(view, "jax")                  # JAX's DLPack import cannot: through NumPy
    np.testing.assert_array_equal(np.asarray(back.astype(jnp.float32)),
                                  expected.astype(np.float32))
    padded = ap.to(np.array(VALUES, dtype=ml_dtypes.float4_e2m1fn), "jax")
    assert padded.dtype == jnp.float4_e2m1fn
    with pytest.raises(BufferError, match="JAX's DLPack import cannot take float4_e2m1fn"):
        ap.to(view, "jax", copy=False)


@needs("ml_dtypes", "jax")
def test_jax_refuses_float6_as_a_type_it_cannot_hold():
    view, _ = packed_view("float6_e2m3fn", 6)
    with pytest.raises(BufferError, match="to\\(jax\\): JAX's backend has no type for "
                                          "packed float6_e2m3fn") as refusal:
        ap.to(view, "jax")
    assert isinstance(refusal.value, TypeError)     # TypeNotHeld: both kinds


@needs("ml_dtypes", "torch")
def test_torch_refuses_packed_types_as_buffer_errors_naming_them():
    view, _ = packed_view("float4_e2m1fn", 4)
    with pytest.raises(BufferError, match="to_torch: PyTorch has no type for packed "
                                          "float4_e2m1fn"):
        ap.to_torch(view)


@needs("ml_dtypes", "pyarrow")
def test_pyarrow_refuses_packed_types_as_buffer_errors_naming_them():
    view, _ = packed_view("float4_e2m1fn", 4)
    with pytest.raises(BufferError, match="has no fixed-width type for packed float4_e2m1fn"):
        ap.to(view, "pyarrow")


@needs("ml_dtypes", "tvm_ffi")
def test_tvm_ffi_holds_packed_float4_and_shares_it():
    view, _ = packed_view("float4_e2m1fn", 4)
    with pytest.warns(ap.ReadOnlySharedWarning):   # the test's View is read-only
        tensor = ap.to(view, "tvm_ffi", readonly="share")
    assert tensor.data_ptr() == view.ptr and str(tensor.dtype) == "float4_e2m1fn"


@needs("ml_dtypes")
def test_every_packed_view_pickles_and_unpacks_to_the_same_values():
    view, expected = packed_view("float6_e3m2fn", 6)
    back = pickle.loads(pickle.dumps(view, protocol=5))
    assert ap.to_numpy(back).view(np.uint8).tolist() == expected.view(np.uint8).tolist()
