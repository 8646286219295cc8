"""arrayport's device kernels as files (issue 41): the PTX shipped is what its CUDA source
gives, the host's mirror of each parameter struct is the PTX's, and the strided copy's plan
reduces layouts as its kernel expects. No GPU and no simulator needed: the kernels' runs
are tests/test_gpu_kernels.py (pytest -m gpu) and tests/test_cudasim_kernels.py."""

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrayport import _core
from arrayport.gpu.kernels import ptx_image, strided_copy

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "src" / "arrayport" / "gpu" / "kernels"


def test_the_committed_ptx_is_what_the_source_gives():
    # In a process of its own: NVRTC changes the process's locale while it compiles (the
    # test process's later file reads would decode as ASCII).
    checked = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_ptx.py"),
                              "--check"], capture_output=True, text=True, timeout=300)
    if checked.returncode == 2:   # NVRTC not installed, or not the pinned release
        pytest.skip(checked.stderr.strip() + " (the [test] extra pins it on x86-64 Linux)")
    assert checked.returncode == 0, checked.stderr


def ptxas() -> Path | None:
    """NVIDIA's PTX assembler from the ``nvidia-cuda-nvcc-cu12`` wheel, or None."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root) / "cuda_nvcc" / "bin" / "ptxas"
        if candidate.is_file():
            return candidate
    return None


# Pascal (the PTX's own target), Volta, Ampere, Ada, Hopper: what the driver's JIT meets
GENERATIONS = ["sm_60", "sm_70", "sm_80", "sm_89", "sm_90"]


@pytest.mark.skipif(ptxas() is None, reason="NVIDIA's ptxas is not installed "
                                            "(the nvidia-cuda-nvcc-cu12 wheel, in [test])")
@pytest.mark.parametrize("arch", GENERATIONS)
def test_the_ptx_assembles_for_each_gpu_generation_within_a_full_occupancy_budget(arch,
                                                                                  tmp_path):
    # The driver JIT-compiles the shipped PTX on a user's GPU; NVIDIA's assembler does the
    # same here. Each kernel: no stack frame and no spills (local memory, slow), and at most
    # 32 registers a thread, so that blocks of 256 threads fill an SM (65,536 registers for
    # 2,048 threads): a kernel that grew past that would run at a fraction of its occupancy.
    for source in sorted(KERNELS.glob("*.cu")):
        done = subprocess.run([str(ptxas()), f"-arch={arch}", "-O3", "-v",
                               str(source.with_suffix(".ptx")), "-o", str(tmp_path / "k.cubin")],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        report = re.findall(r"Function properties for (\w+)\n\s*(\d+) bytes stack frame, "
                            r"(\d+) bytes spill stores, (\d+) bytes spill loads\n.*?Used "
                            r"(\d+) registers", done.stderr, re.S)
        kernels = {name for name in re.findall(r"\.entry (\w+)", ptx_image(source.stem).decode())}
        assert {row[0] for row in report} == kernels, done.stderr
        for name, stack, spill_stores, spill_loads, registers in report:
            assert (int(stack), int(spill_stores), int(spill_loads)) == (0, 0, 0), name
            assert int(registers) <= 32, (name, registers)


def test_every_kernel_source_has_its_ptx_and_reads_no_newer_isa_than_cuda_12_0():
    sources = sorted(KERNELS.glob("*.cu"))
    assert sources
    for source in sources:
        ptx = ptx_image(source.stem).decode()
        assert ".version 8.0" in ptx and ".target sm_60" in ptx, source.name


@pytest.mark.parametrize("kernel, struct", [("arrayport_strided_copy", strided_copy.Params),
                                            ("arrayport_transpose_tiles",
                                             strided_copy.TileParams)])
def test_the_host_parameter_structs_are_the_ptxs(kernel, struct):
    ptx = ptx_image("strided_copy").decode()
    declared = re.search(rf"{kernel}_param_0\[(\d+)\]", ptx)
    assert int(declared.group(1)) == ctypes.sizeof(struct)


def test_the_kernels_limits_are_the_hosts():
    ptx = ptx_image("strided_copy").decode()
    tile = re.search(r"\.shared \.align 16 \.b8 \w*tile\w*\[(\d+)\]", ptx)
    assert int(tile.group(1)) == 16 * strided_copy.TILE * (strided_copy.TILE + 1) <= 48 << 10
    source = (KERNELS / "strided_copy_params.h").read_text(encoding="utf-8")
    assert re.search(r"#define AP_STRIDED_COPY_MAX_DIMS (\d+)", source).group(1) == \
        str(strided_copy.MAX_DIMS) == str(_core.MAX_NDIM)


def reduced(params):
    dims = [(params.extents[i], params.strides[i]) for i in range(params.ndim)]
    return params.unit, params.count, dims


@pytest.mark.parametrize("array, src, unit, dims", [
    # a transpose of float32: 4-byte units, innermost first
    (np.zeros((3, 5), np.float32).T, 0, 4, [(3, 20), (5, 4)]),
    # every other complex128 (rows merge: one stride runs through them); 16-byte units,
    # and a misaligned address drops to the unit that divides it, split innermost
    (np.zeros((4, 6), np.complex128)[:, ::2], 0, 16, [(12, 32)]),
    (np.zeros((4, 6), np.complex128)[:, ::2], 8, 8, [(2, 8), (12, 32)]),
    # negative and zero strides pass through; extent-1 dimensions go
    (np.zeros((4, 1, 6), np.int16)[::-1, :, ::-3], 0, 2, [(8, -6)]),
    (np.zeros((4, 1, 6), np.int16)[::-1, :, 1::3], 0, 2, [(2, 6), (4, -12)]),
    (np.broadcast_to(np.zeros(3, np.uint8), (5, 3)), 0, 1, [(3, 1), (5, 0)]),
    # a row slice: a row is one contiguous run, cut into the widest units that divide it
    # (16 bytes for four float64), its alignment, and the other strides
    (np.zeros((6, 8), np.float64)[:, :4], 0, 16, [(2, 16), (6, 64)]),
    (np.zeros((6, 8), np.float64)[:, :4], 8, 8, [(4, 8), (6, 64)]),
    (np.zeros((6, 8), np.float32)[:, :3], 0, 4, [(3, 4), (6, 32)]),
    (np.zeros((6, 64), np.uint8)[:, 16:48], 16, 16, [(2, 16), (6, 64)]),
    # a row slice of reversed rows: the run is a row still, the rows' stride negative
    (np.zeros((6, 8), np.float32)[::-1, :4], 0, 16, [(6, -32)]),
])
def test_the_plan_reduces_layouts_as_the_kernel_expects(array, src, unit, dims):
    params = strided_copy.plan(array.shape, array.strides, array.itemsize, src, 256)
    assert reduced(params) == (unit, array.size * array.itemsize // unit, dims)


EXTENTS = sorted({1, 2, 3, 5, 7, 10, 641, 1000, 4096, 6700417, (1 << 31) - 1, 1 << 31,
                  (1 << 31) + 1, (1 << 32) - 2, (1 << 32) - 1}
                 | {int(e) for e in np.random.default_rng(3).integers(2, 1 << 32, 200)})


@pytest.mark.parametrize("extent", EXTENTS)
def test_a_divisor_divides_every_32_bit_index(extent):
    # The kernel's ap_divide, q = (((n * magic) >> 32) + n) >> shift, against Python's //:
    # at the edges of every quotient near 0, near the top of 32 bits, and at random.
    magic, shift = strided_copy.divisor(extent)
    assert 0 < magic < 1 << 32 and 0 <= shift <= 32
    top = (1 << 32) - 1
    edges = [0, 1, extent - 1, extent, extent + 1, top, top - 1, top - top % extent,
             top - top % extent - 1]
    for q in (1, 2, 3, top // extent - 1, top // extent):
        edges += [q * extent - 1, q * extent, q * extent + 1]
    rng = np.random.default_rng(extent % 1000)
    n = np.concatenate([np.array([e for e in edges if 0 <= e <= top], np.uint64),
                        rng.integers(0, top, 4096, dtype=np.uint64, endpoint=True)])
    high = (n * np.uint64(magic)) >> np.uint64(32)
    np.testing.assert_array_equal((high + n) >> np.uint64(shift), n // np.uint64(extent))


# The kernel's own ap_divide, compiled as C from strided_copy.cu (the simulator's build of
# it): the copies on the simulator divide by small extents only, so large ones (shifts up
# to 32, the 64-bit sum) are checked here, against Python's //.
_DIVIDE_HARNESS = r"""
#include <stddef.h>
#include "strided_copy.cu"
__thread ap_dim3 threadIdx, blockIdx, blockDim, gridDim;
void *cudasim_device_bytes(ap_u64 address, size_t size) { return 0; }
void cudasim_register_kernel(const char *name, size_t size, void (*run)(const void *)) {}
void divide_all(const ap_u32 *n, size_t count, ap_u32 magic, ap_u32 shift, ap_u32 *out) {
    for (size_t i = 0; i < count; i++)
        out[i] = ap_divide(n[i], magic, shift);
}
"""


@pytest.fixture(scope="module")
def kernel_divide(tmp_path_factory):
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the kernel's C form")
    folder = tmp_path_factory.mktemp("divide")
    (folder / "harness.c").write_text(_DIVIDE_HARNESS)
    built = subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wno-unused-parameter",
                            f"-I{KERNELS}", str(folder / "harness.c"), "-o",
                            str(folder / "divide.so")], capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    library = ctypes.CDLL(str(folder / "divide.so"))
    u32_array = np.ctypeslib.ndpointer(np.uint32, flags="C_CONTIGUOUS")
    library.divide_all.argtypes = [u32_array, ctypes.c_size_t, ctypes.c_uint32,
                                   ctypes.c_uint32, u32_array]
    return library.divide_all


@pytest.mark.parametrize("extent", [3, 641, 6700417, (1 << 31) - 1, 1 << 31, (1 << 31) + 1,
                                    (1 << 32) - 2, (1 << 32) - 1, *EXTENTS[-200::20]])
def test_the_kernels_own_division_is_exact_for_large_extents(kernel_divide, extent):
    top = (1 << 32) - 1
    rng = np.random.default_rng(extent % 997)
    last = top // extent   # the last 50 multiples of extent below 2**32, and their neighbours
    multiples = np.arange(max(0, last - 49), last + 1, dtype=np.uint64) * np.uint64(extent)
    edges = np.concatenate([multiples, multiples - np.uint64(1),
                            np.array([0, 1, extent - 1, top, top - 1], np.uint64)])
    n = np.concatenate([edges[edges <= top], rng.integers(0, top, 1 << 14, np.uint64,
                                                          endpoint=True)]).astype(np.uint32)
    quotients = np.empty_like(n)
    kernel_divide(n, n.size, *strided_copy.divisor(extent), quotients)
    np.testing.assert_array_equal(quotients, n // np.uint32(extent))


@pytest.mark.parametrize("extent", [0, 1 << 32])
def test_a_divisor_outside_32_bits_is_refused(extent):
    with pytest.raises(ValueError, match="32-bit divisor"):
        strided_copy.divisor(extent)


def test_indices_past_32_bits_divide_in_64():
    # A broadcast source: 2**33 one-byte units, nothing of it allocated
    narrow = strided_copy.plan((1 << 11, 1 << 22), (0, 0), 1, 0, 0)
    assert narrow.count == 1 << 33 and not narrow.narrow and narrow.magic[0] == 0
    small = strided_copy.plan((3, 5), (10, 1), 1, 0, 0)
    assert small.narrow and [small.magic[i] for i in range(2)] == [
        strided_copy.divisor(5)[0], strided_copy.divisor(3)[0]]


def test_the_plan_leaves_empty_and_too_deep_layouts_alone():
    assert strided_copy.plan((3, 0), (8, 8), 8, 0, 0) is None
    deep = np.zeros((2,) * 32, np.uint8)[(slice(None, None, -1),) * 32]
    assert strided_copy.plan(deep.shape, deep.strides, 1, 0, 0) is not None
    # 65 dimensions, no two of which merge (an outer stride never twice the inner one)
    too_deep_shape, too_deep_strides = (2,) * 65, tuple(100 + i for i in range(65, 0, -1))
    assert strided_copy.plan(too_deep_shape, too_deep_strides, 1, 0, 0) is None


@pytest.mark.parametrize("array, tiled", [
    (np.zeros((40, 30), np.float32).T, True),                     # a transpose
    (np.zeros((3, 40, 37), np.int8).transpose(0, 2, 1), True),      # planes of a batch
    (np.zeros((40, 5), np.float32).T, False),                     # a short axis
    (np.zeros((40, 30), np.float32)[:, ::2], False),               # rows already contiguous
    (np.zeros((40, 30), np.float32).T[::2], False),                # no contiguous axis
    (np.zeros((40, 30), np.complex128).T, True),                   # 16-byte units
])
def test_the_tiled_kernel_takes_transposes_and_leaves_the_rest(array, tiled):
    unit, dims = strided_copy.reduce(array.shape, array.strides, array.itemsize, 0, 0)
    tiles = strided_copy.plan_tiles(unit, dims, 0, 0)
    assert (tiles is not None) == tiled
    if tiles is not None:   # every unit once: the tiles' rows x columns x batch
        assert tiles.rows * tiles.cols * tiles.batch * unit == array.nbytes
