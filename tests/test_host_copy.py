"""The host strided-copy kernel against NumPy, on arbitrary strided layouts — on every
vector path this CPU runs (each forced in turn: portable C, SSE2, SSSE3, AVX2, AVX-512 on
x86-64; NEON on ARM64), so a path that gives a different bit anywhere fails here, not on a
user's machine."""

import contextlib
import os

import numpy as np
import pytest

import arrayport as ap
from arrayport import _core
from optional import hypothesis_api

# Without hypothesis, its property tests skip and the rest of the module runs.
given, settings, st, _ = hypothesis_api()

PATHS = _core.copy_kernel()["paths"]


@contextlib.contextmanager
def forced(path, threads=1):
    """The kernel on ``path``; with ``threads`` > 1 every copy is split across them (the
    ranges cut at block edges, the last one short)."""
    previous = _core.force_copy_path(path)
    previous_threads = _core.set_copy_threads(threads, 1 if threads > 1 else 8 << 20)
    try:
        yield
    finally:
        _core.force_copy_path(previous)
        _core.set_copy_threads(*previous_threads)


THREADS = [1, 3]


@st.composite
def strided_arrays(draw):
    dtype = draw(st.sampled_from(["uint8", "int16", "float32", "float64", "complex128"]))
    ndim = draw(st.integers(0, 5))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    padded_shape = [extent * 2 + 1 for extent in shape]
    base = np.arange(int(np.prod(padded_shape))).astype(dtype).reshape(padded_shape)
    slices = tuple(slice(draw(st.integers(0, 1)), None, draw(st.sampled_from([1, 2, -1, -2])))
                   for _ in shape)
    view = base[slices] if slices else base  # base[()] would be a scalar
    if ndim > 1 and draw(st.booleans()):
        view = view.transpose(draw(st.permutations(range(ndim))))
    return view


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", THREADS)
@settings(max_examples=200, deadline=None)
@given(array=strided_arrays())
def test_host_copy_matches_numpy(path, threads, array):
    with forced(path, threads):
        copy = ap.from_dlpack(array).host_copy()
    assert copy.is_c_contiguous and copy.is_copy and not copy.readonly
    result = ap.to_numpy(copy)
    assert result.shape == array.shape and result.dtype == array.dtype
    np.testing.assert_array_equal(result, array)
    assert result.tobytes() == np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("shape", [(1000, 3), (3, 1000), (7, 1, 9, 1, 11)])
def test_large_transposed_copies(shape):
    array = np.random.default_rng(0).standard_normal(shape).T[::-1]
    np.testing.assert_array_equal(ap.to_numpy(ap.from_dlpack(array, copy=True)), array)


# The kernel's vector paths work in blocks of one cache line by one cache line (64 x 64
# bytes, 32 x 32 two-byte, 16 x 16 four-byte or 8 x 8 eight-byte elements), prefetch four
# blocks ahead and stream results larger than one core's L2; these layouts
# cross every block edge, leftover row and column.
BLOCK_LAYOUTS = [
    ((16, 16), (1, 0)), ((17, 33), (1, 0)), ((64, 80), (1, 0)), ((100, 3), (1, 0)),
    ((3, 100), (1, 0)), ((5, 37, 19), (2, 0, 1)), ((19, 37, 5), (1, 2, 0)),
    ((8, 24, 40), (0, 2, 1)), ((33, 2, 47), (2, 1, 0)), ((4, 5, 6, 7), (3, 1, 0, 2)),
    # Long destination rows are walked in bands of 8 blocks (partial last band), short
    # ones down the columns of blocks.
    ((1100, 300), (1, 0)), ((1000, 300), (1, 0)), ((3, 70, 600), (2, 0, 1)),
    ((130, 4200), (1, 0)), ((65, 97), (1, 0)), ((200, 33, 70), (2, 0, 1)),
]


def assert_copied_exactly(layout):
    """``layout``'s host copy holds NumPy's C-order bytes of it, bit for bit; returned."""
    copy = ap.view(layout).host_copy()
    assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(layout).tobytes()
    return copy


def random_bits(shape, dtype):
    """Random bit patterns (NaN payloads and signalling NaNs included) of ``dtype``."""
    raw = np.random.default_rng(1).integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize,
                                            dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "int32", "float64",
                                   "uint64", "complex128"])
@pytest.mark.parametrize("shape,axes", BLOCK_LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", THREADS)
def test_block_kernel_copies_every_bit(dtype, shape, axes, path, threads):
    array = random_bits(shape, dtype).transpose(axes)
    with forced(path, threads):
        for layout in (array, array[::-1], array[..., ::-1],
                       array[1::2] if shape[0] > 2 else array):
            copy = assert_copied_exactly(layout)
            assert copy.is_c_contiguous and copy.is_copy


# Images and channels-last tensors: planes of 3 or 4 (or a few) rows or columns, which the
# kernel (de)interleaves pixel by pixel (16 at a time with SSSE3 for bytes). Pixel counts
# that are not multiples of 16, a channel subset of RGBA (not packed), batches.
CHANNEL_LAYOUTS = [
    ((37, 53, 3), (2, 0, 1)), ((37, 53, 4), (2, 0, 1)), ((3, 37, 53), (1, 2, 0)),
    ((4, 37, 53), (1, 2, 0)), ((2, 17, 19, 3), (0, 3, 1, 2)), ((2, 3, 17, 19), (0, 2, 3, 1)),
    ((64, 64, 2), (2, 0, 1)), ((5, 64, 64), (1, 2, 0)), ((100, 7), (1, 0)), ((7, 100), (1, 0)),
]


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("shape,axes", CHANNEL_LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", THREADS)
def test_channel_permutations_copy_every_bit(dtype, shape, axes, path, threads):
    array = random_bits(shape, dtype).transpose(axes)
    with forced(path, threads):
        for layout in (array, array[..., ::-1], array[::-1]):
            assert_copied_exactly(layout)


@pytest.mark.parametrize("path", PATHS)
def test_a_channel_subset_of_rgba_is_copied_exactly(path):
    rgba = random_bits((31, 45, 4), np.uint8)
    with forced(path):
        for layout in (rgba[..., :3].transpose(2, 0, 1), rgba[..., 1:].transpose(2, 0, 1),
                       np.ascontiguousarray(rgba.transpose(2, 0, 1))[:3].transpose(1, 2, 0)):
            assert_copied_exactly(layout)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64"])
@pytest.mark.parametrize("path", PATHS)
def test_unaligned_source_is_copied_exactly(dtype, path):
    itemsize = np.dtype(dtype).itemsize
    rows, cols = 150, 70
    raw = bytearray(random_bits((1 + rows * cols * itemsize,), np.uint8).tobytes())
    array = np.frombuffer(raw, dtype, offset=1, count=rows * cols).reshape(rows, cols).T
    assert array.ctypes.data % 2 == 1
    with forced(path):
        for layout in (array, random_bits((rows * cols * 3 + 1,), np.uint8)[1:].reshape(
                rows, cols, 3).transpose(2, 0, 1)):
            assert_copied_exactly(layout)


def test_threaded_copies_run_every_share_once():
    """A copy split across threads writes every element exactly once: a shape whose cut
    dimension leaves a short last range, checked against NumPy, in a threaded run and with
    the threads' count capped below the ranges."""
    array = random_bits((1000, 333), np.float32).T
    for threads in (2, 3, 16):
        with forced(PATHS[-1], threads):
            assert_copied_exactly(array)


def test_the_thread_variables_are_read_at_start_up():
    import os
    import subprocess
    import sys
    environment = dict(os.environ, ARRAYPORT_NUM_THREADS="1",
                       ARRAYPORT_COPY_THREAD_BYTES="12345",
                       ARRAYPORT_COPY_STREAMING_BYTES="3000000",
                       ARRAYPORT_HUGE_PAGE_BYTES="8388608")
    shown = subprocess.run([sys.executable, "-c", "from arrayport import _core; "
                            "k = _core.copy_kernel(); print(k['threads'], k['thread_bytes'], "
                            "k['streaming_bytes'], k['huge_page_bytes'])"],
                           capture_output=True, text=True, env=environment, timeout=120)
    assert shown.stdout.split() == ["1", "12345", "3000000", "8388608"], shown.stderr


def test_a_setting_that_is_not_a_whole_number_is_ignored():
    """"4M", "1e6", "-1", "0x400000", "": not a number of bytes — each variable keeps its
    default (a 4-byte huge-page size would have aligned every allocation to 2 MiB)."""
    import subprocess
    import sys
    names = ("ARRAYPORT_HUGE_PAGE_BYTES", "ARRAYPORT_COPY_STREAMING_BYTES",
             "ARRAYPORT_COPY_THREAD_BYTES", "ARRAYPORT_NUM_THREADS")
    program = ("from arrayport import _core; k = _core.copy_kernel(); "
               "print(k['huge_page_bytes'], k['streaming_bytes'], k['thread_bytes'], "
               "k['threads'])")
    clean = {k: v for k, v in os.environ.items() if k not in names}
    defaults = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              env=clean, timeout=120).stdout.split()
    assert defaults[0] == str(4 << 20)
    for garbage in ("4M", "1e6", "-1", "0x400000", " 7", "99999999999999999999999"):
        shown = subprocess.run([sys.executable, "-c", program], capture_output=True,
                               text=True, env=dict(clean, **{n: garbage for n in names}),
                               timeout=120)
        assert shown.stdout.split() == defaults, (garbage, shown.stderr)
    with pytest.raises(TypeError, match="an int"):
        _core.set_copy_streaming(1.5)


def test_results_from_the_huge_page_size_on_are_aligned_for_huge_pages():
    """A result of 4 MiB and more starts on a 2 MiB boundary (offered transparent huge
    pages); ARRAYPORT_HUGE_PAGE_BYTES moves that size (read at start-up)."""
    import subprocess
    import sys
    program = ("import numpy as np, arrayport as ap; "
               "a = np.ones((1024, 1280), np.float32).T; "   # 5 MiB, transposed
               "print(ap.view(a).copy().ptr % (2 << 20) == 0)")
    for setting, aligned in ((None, "True"), ("8388608", "False")):
        environment = {k: v for k, v in os.environ.items() if k != "ARRAYPORT_HUGE_PAGE_BYTES"}
        if setting:
            environment["ARRAYPORT_HUGE_PAGE_BYTES"] = setting
        shown = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                               env=environment, timeout=120)
        assert shown.stdout.split() == [aligned], (setting, shown.stderr)


def test_the_kernel_reports_what_it_chose():
    info = _core.copy_kernel()
    assert info["path"] in info["paths"] and info["paths"][0] == "portable"
    assert info["line"] > 0 and info["band_lines"] >= 16
    assert info["streaming_bytes"] >= 1 << 20
    assert info["huge_page_bytes"] == 4 << 20 or os.environ.get("ARRAYPORT_HUGE_PAGE_BYTES")
    with pytest.raises(ValueError, match="not one this CPU runs"):
        _core.force_copy_path("avx-9000")


def test_results_larger_than_one_core_s_l2_are_streamed():
    """The streaming threshold is one core's L2 (1 MiB at least), never more than half the
    last level — not the last level alone, which a VM reports whole (docs/devices.md)."""
    if os.environ.get("ARRAYPORT_COPY_STREAMING_BYTES"):
        pytest.skip("ARRAYPORT_COPY_STREAMING_BYTES sets the threshold in this process")
    info = _core.copy_kernel()
    expected = max(info["l2"], 1 << 20)
    if info["llc"]:
        expected = min(expected, info["llc"] // 2)
    assert info["streaming_bytes"] == max(expected, 1 << 20)


@pytest.mark.parametrize("shape,axes", BLOCK_LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
def test_a_streamed_copy_is_the_cached_copy(shape, axes, path):
    """The same layouts with every result streamed (a threshold of 1 byte): the same bits as
    through the caches, on every path; a threshold below 1 byte is refused."""
    array = random_bits(shape, "float32").transpose(axes)
    cached = ap.to_numpy(ap.view(array).host_copy()).tobytes()
    previous = _core.set_copy_streaming(1)
    try:
        with forced(path):
            for layout in (array, array[::-1], random_bits(shape, "uint8").transpose(axes)):
                assert_copied_exactly(layout)
            assert ap.to_numpy(ap.view(array).host_copy()).tobytes() == cached
    finally:
        assert _core.set_copy_streaming(previous) == 1
    with pytest.raises(ValueError, match="streaming threshold"):
        _core.set_copy_streaming(0)


@pytest.mark.parametrize("dtype,columns", [("float32", 1100), ("float64", 1030),
                                           ("uint16", 2048), ("uint8", 4100)])
def test_streamed_copies_larger_than_the_caches(dtype, columns):
    """Results larger than the kernel's streaming threshold (one core's L2, within bounds)
    are written with non-temporal stores."""
    threshold = _core.copy_kernel()["streaming_bytes"]
    rows = threshold // (columns * np.dtype(dtype).itemsize) + 3
    array = random_bits((rows, columns), dtype).T
    assert array.nbytes >= threshold
    assert_copied_exactly(array)


def test_the_command_shows_the_kernel_and_the_variable_forces_a_path():
    import os
    import subprocess
    import sys
    environment = dict(os.environ, ARRAYPORT_COPY_PATH="portable")
    plain = subprocess.run([sys.executable, "-m", "arrayport"], capture_output=True,
                           text=True, env=environment, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "copy kernel" not in plain.stdout       # a newcomer's screen: no tuning detail
    shown = subprocess.run([sys.executable, "-m", "arrayport", "info", "--internals"],
                           capture_output=True, text=True, env=environment, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "host copy kernel: portable path" in shown.stdout
    assert "streaming stores from" in shown.stdout
