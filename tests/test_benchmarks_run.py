"""The benchmark scripts run (tiny counts; no timing is asserted — speed is shown by
running them, see docs/benchmarks.md)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from optional import needs
from producer import compiler

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

# Without a compiler (the wheel test) the exchange benchmark says it skips its C loop.
C_LOOP_ROW = ("C loop: exchange API import+delete" if compiler() is not None
              else "# no C compiler: C loop skipped")

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@pytest.mark.parametrize("script,rows", [
    ("bench_copy.py", ["transposed 4096x4096 float32", ".transpose(2, 0, 1)", ".transpose(1, 2, 0)",
                       "# streaming: from", "transposed 512x512 float32 (1 MiB)",
                       "transposed 1024x2048 float16 (4 MiB)", "# gpu:"]),
    pytest.param("bench_arrow.py", ["View.from_arrow(pa) vs np.from_dlpack",
                                    "pa.array(View) vs pa.array(ndarray)"],
                 marks=needs("pyarrow")),
    ("bench_contracts.py", ["require(np, dtype, ndim) vs by hand", "require(np, spec=) vs by hand",
                            "@accepts two arguments vs undecorated"]),
    ("bench_dlpack.py", ["from_dlpack(numpy array)", "np.from_dlpack(View vs ndarray)"]),
    pytest.param("bench_exchange.py", ["to_torch(np) vs torch.from_dlpack",
                                       "to_numpy(torch) vs np.from_dlpack",
                                       "view(torch 1-D) vs tvm_ffi",
                                       "view(torch reshaped 2-D) vs tvm_ffi",
                                       C_LOOP_ROW],
                 marks=needs("torch")),
    pytest.param("bench_gpu_exchange.py", ["import a CPU tensor", "a CPU View to PyTorch"],
                 marks=needs("torch")),   # a machine without a CUDA GPU: the CPU-side rows
    ("bench_ufunc.py", ["np.add(view, view) n=1e1", "np.add(view, view) n=1e6",
                        "np.mean(view) n=1e3", "dispatch floor vs np.add(a, b)"]),
    ("bench_view.py", ["view(numpy array)", "view(bytes)", "view(__array_interface__ object)",
                       "memoryview(View vs ndarray)", "view.T vs ndarray.T"]),
])
def test_benchmark_prints_every_row_it_can(script, rows):
    # (the copy table's large sizes, to 1 GiB, are a run of their own: 1 and 4 MiB here)
    sizes = ["--large-mib", "1,4"] if script == "bench_copy.py" else []
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--repeat", "1", "--number", "10", *sizes],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for row in rows:
        assert row in result.stdout


def test_the_process_benchmark_prints_its_rows():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_processes.py"), "--repeat", "1", "--mib", "1",
         "--dask-mib", "1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for row in ("pickle 5 out of band, 1 MiB", "share(): handle to a child",
                "share(): the one copy into the segment",
                "share() of an empty_shared View (no copy)",
                "in band to a ProcessPoolExecutor, 1 MiB"):
        assert row in result.stdout
    if importlib.util.find_spec("distributed"):
        assert "Dask LocalCluster round trip, 1 MiB" in result.stdout


def test_the_gpu_process_benchmark_hands_a_device_view_over():
    # on the driver simulator here (no GPU): the script installs it, its child finds it
    import cudasim
    if cudasim.library() is None:
        pytest.skip(cudasim.unavailable())
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_gpu_processes.py"), "--repeat", "2",
         "--mib", "1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for row in ("arrayport pool IPC, a new View each time",
                "arrayport pool IPC, the same View again",
                "arrayport CUDA IPC (cuMemAlloc memory), the same View again",
                "host route (copy to host, share, upload)", "ratio host route / pool IPC"):
        assert row in result.stdout
    if "driver: the CUDA driver simulator" in result.stdout:   # not a driver found installed
        assert "driver calls per handoff: exporter, receiver" in result.stdout
    try:
        import cuda.core  # noqa: F401 — NVIDIA's peer, beside arrayport where installed
    except ImportError:
        assert "(cuda.core is not installed)" in result.stdout
    else:
        for row in ("cuda.core IPC memory resource, a new Buffer each time",
                    "cuda.core IPC memory resource, the same Buffer again",
                    "ratio arrayport / cuda.core"):
            assert row in result.stdout


def check_rocm_rows(table):
    """The ROCm table (HIP simulator): each exchange by arrayport on HIP's floor and through
    its Python driver (the same HIP calls — a copy's fewer: the floor's session makes the
    device current once — and far fewer Python calls on the floor: at most 10 a copy, issue
    52), and hip-python beside where it is installed."""
    import hipsim
    if hipsim.library() is None:
        assert "no ROCm rows" in table or not table
        return
    lines = [line for line in table.splitlines()[2:] if line.strip()]
    rows = {(line[:38].strip(), line[39:59].strip()): line[59:].split() for line in lines}
    for name in ("DLPack export to a consumer stream", "CAI import, consumer stream",
                 "CAI import, no stream", "device copy on a stream", "device → host copy",
                 "strided device copy on a stream"):
        floor, python = rows[name, "arrayport"], rows[name, "arrayport, no floor"]
        copy = "copy" in name
        assert (float(floor[0]) < float(python[0]) if copy else floor[0] == python[0]), \
            (name, floor, python)
        assert float(floor[1]) > 0, (name, floor, python)
        assert float(floor[-1]) < float(python[-1]) / 5, (name, floor, python)
        assert not copy or float(floor[-1]) <= 10, (name, floor)
    assert rows["DLPack export to a consumer stream", "arrayport"][0] == "3"   # HIP calls


def test_the_driver_call_benchmark_counts_each_exchange():
    import cudasim
    if cudasim.library() is None:
        pytest.skip(cudasim.unavailable())
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_driver_calls.py"),
                             "--repeat", "2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    cuda_table, _, rocm_table = result.stdout.partition("\nROCm, on the HIP runtime simulator")
    lines = [line for line in cuda_table.splitlines()[3:]
             if line.strip() and not line.startswith("(")]
    rows = {(line[:38].strip(), line[38:].split()[0]): line[38:].split()[1:] for line in lines}
    check_rocm_rows(rocm_table)
    names = {"CAI import, consumer stream", "CAI import, no stream",
             "DLPack export to a consumer stream",
             "device copy on a stream", "strided device copy on a stream",
             "device → host copy", "host → device copy",
             "exchange-table import", "exchange-table import, consumer stream"}
    import compiled_exchange_producer
    if compiled_exchange_producer.unavailable() is None:   # a table written in C
        names |= {"exchange-table import, C table", "exchange-table import, C table, stream"}
    assert {name for name, _ in rows} == names
    for name in names:
        calls, host_syncs, events, micros, python_calls = map(float, rows[name, "arrayport"][:5])
        # events reused; the host waits only where the copy lands in host memory
        assert (host_syncs > 0) == (name == "device → host copy") and events == 0, \
            (name, rows[name, "arrayport"])
        assert micros > 0 and python_calls > 0, (name, rows[name, "arrayport"])
    assert rows["exchange-table import", "arrayport"][0] == "0"   # issue 42: no driver call
    assert rows["CAI import, no stream", "arrayport"][0] == "1"   # the pointer's attributes
    for (name, library), row in rows.items():   # a peer's row: its ratio beside its time
        if library != "arrayport":
            assert float(row[4]) > 0, (name, library, row)
    assert "cuLaunchKernel 1" in " ".join(rows["strided device copy on a stream", "arrayport"])
    assert ("strided device copy on a stream", "ctypes-floor") in rows
    try:
        import cuda.core  # noqa: F401
    except ImportError:
        pass
    else:   # cuda-core's copy as it orders nothing, and ordered as arrayport orders it
        ordered = rows["device copy on a stream", "cuda-core+order"]
        assert ordered[:3] == ["6", "0", "0"], ordered   # two records, two waits, the
        # allocation, the transfer; no host wait, no event made per copy (both reused)
    assert "never released" not in result.stderr


# bench_copy.py's GPU table, run where PyTorch has no GPU: "CUDA" tensors are CPU tensors
# (their .cuda() a clone) and arrayport's device copies go to the CUDA driver simulator. The
# figures mean nothing; the table's code, every row and bar, runs, so that a lent GPU's
# minutes are not spent on a slip in it.
_GPU_TABLE_DRY_RUN = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import cudasim
if cudasim.install() is None:
    sys.exit('skip: ' + cudasim.unavailable())
import torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_name = lambda *a: 'dry run'
torch.cuda.synchronize = lambda *a: None
torch.Tensor.cuda = lambda self, *a, **k: self.clone()
torch.Tensor.pin_memory = lambda self, *a, **k: self.clone()
import bench_copy
sys.argv = ['bench_copy.py', '--repeat', '1', '--gpu-mib', '64']
bench_copy.gpu_table(bench_copy.arguments())
"""


@needs("torch")
def test_the_copy_benchmarks_gpu_table_runs_every_row(tmp_path):
    helpers = Path(__file__).parent / "helpers"
    result = subprocess.run([sys.executable, "-c", _GPU_TABLE_DRY_RUN, str(helpers),
                             str(BENCHMARKS)], capture_output=True, text=True, timeout=600)
    if result.returncode and result.stderr.startswith("skip: "):
        pytest.skip(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = result.stdout.splitlines()[2:]
    labels = [row[:40].strip() for row in rows]
    assert labels == ["host -> device (pageable)", "host -> device (pageable, no ring)",
                      "host -> device (pinned)", "device -> host", "device -> device",
                      "device transposed 4096x4096", "device transposed 4096x4096 -> host",
                      "device transposed 512x512", "device transposed 2048x2048",
                      "device reversed rows (negative stride)",
                      "device uint8 HWC -> CHW 2160x3840x3",
                      "device permuted 3-d (2, 0, 1) 256^3",
                      "device permuted 4-d (3, 1, 2, 0) 64^4"], result.stdout
    # The bar column says '≥0.80' (met) or '<0.80!' (missed): whichever the dry run's
    # timings gave (they are a CPU's, and vary), each row names issue 43's bar.
    bars = {row[:40].strip(): re.fullmatch(r"(?:≥|<)(\d\.\d\d)!?",
                                            row.split("x ", 1)[1].split()[0]).group(1)
            for row in rows if re.search(r"[≥<]\d\.\d\d", row)}
    assert (bars["device transposed 2048x2048"], bars["device -> device"],
            bars["device permuted 3-d (2, 0, 1) 256^3"]) == ("0.80", "0.90", "0.70"), rows
    assert "never released" not in result.stderr, result.stderr


def test_the_gpu_check_runs_every_step_and_summarizes(tmp_path):
    # scripts/gpu-check, the one command for a lent GPU: here (no GPU) each step still runs
    # within its limit and is summarized, whatever its outcome, so that its shell logic is
    # proven before a GPU's minutes are spent on it.
    script = Path(__file__).parent.parent / "scripts" / "gpu-check"
    result = subprocess.run([str(script), str(tmp_path)], capture_output=True, text=True,
                            timeout=900, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    import importlib.util
    checks = [f"check-{target}" for target in ("cupy", "numba.cuda", "cuda.core")
              if importlib.util.find_spec(target.partition(".")[0]) is not None]
    assert [line.split()[0] for line in summary] == ["machine", "build", "gpu-suite",
                                                     "exchange-bench", "copy-bench",
                                                     "gpu-matrix", *checks]
    # the matrix of CUDA libraries runs where a CUDA driver answers (a GPU's, or the
    # simulator as libcuda.so.1, as in CI), and says why not where none does
    assert ("gpu-matrix       skipped: no CUDA driver answers" in summary[5]
            or "gpu-matrix       exit 0" in summary[5]), summary[5]
    assert "exit 0" in summary[0] and "python" in (tmp_path / "machine.log").read_text()
