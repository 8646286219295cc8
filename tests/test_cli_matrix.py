"""`arrayport matrix` end to end, in a subprocess, as a user runs it: the JSON records real
findings (PyTorch aborts on negative strides when reached directly, and is reached cleanly
through arrayport), the other formats render, and it runs with NumPy alone."""

import importlib.util
import json
import subprocess
import sys

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None


def arrayport_cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "arrayport", *args], capture_output=True,
                          text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def torch_matrix(tmp_path_factory):
    if not HAS_TORCH:
        pytest.skip("needs torch")
    html = tmp_path_factory.mktemp("matrix") / "matrix.html"
    result = arrayport_cli("matrix", "--libraries", "numpy,torch,arrayport", "--dtypes",
                           "float32,int64,bool", "--layouts", "contiguous,negative,read-only",
                           "--format", "json", "--html", str(html), "--no-progress")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), html


def cell(report, producer, consumer, route, dtype, layout):
    [found] = [c for c in report["cells"] if (c["producer"], c["consumer"], c["route"],
                                              c["dtype"], c["layout"]) ==
               (producer, consumer, route, dtype, layout)]
    return found


def test_torch_crash_on_negative_strides_is_recorded_and_arrayport_copies(torch_matrix):
    report, _ = torch_matrix
    direct = cell(report, "numpy", "torch", "dlpack", "float32", "negative")
    assert direct["status"] == "crashed"
    assert "SIGABRT" in direct["detail"] and "Storage size" in direct["detail"]
    through = cell(report, "numpy", "torch", "arrayport", "float32", "negative")
    assert through["status"] == "copy" and through["median_ns"] > 0


def test_read_only_memory_reaches_torch_writable_directly_but_not_through_arrayport(torch_matrix):
    report, _ = torch_matrix
    direct = cell(report, "numpy", "torch", "dlpack", "float32", "read-only")
    assert direct["status"] == "wrong" and "read-only" in direct["detail"]
    assert cell(report, "numpy", "torch", "arrayport", "float32", "read-only")["status"] == "copy"


def test_working_cells_say_zero_copy_and_carry_a_time(torch_matrix):
    report, _ = torch_matrix
    for producer, consumer, route in [("numpy", "torch", "dlpack"), ("torch", "numpy", "dlpack"),
                                      ("numpy", "torch", "arrayport"),
                                      ("torch", "arrayport", "dlpack")]:
        found = cell(report, producer, consumer, route, "float32", "contiguous")
        assert found["status"] == "zero-copy", found
        assert isinstance(found["median_ns"], int) and found["median_ns"] > 0


def test_no_arrayport_route_crashes_or_gives_wrong_data(torch_matrix):
    report, _ = torch_matrix
    bad = [c for c in report["cells"] if c["route"] == "arrayport"
           and c["status"] in ("crashed", "wrong", "tool-error")]
    assert bad == []
    [pair] = [p for p in report["pairs"] if (p["producer"], p["consumer"]) == ("numpy", "torch")]
    assert pair["direct"]["crashed"] == 3       # float32, int64 and bool, all negative
    assert pair["arrayport"] == {**pair["arrayport"], "crashed": 0, "wrong": 0}
    assert pair["arrayport"]["works"] == pair["arrayport"]["cases"]


def test_findings_group_the_crash(torch_matrix):
    report, _ = torch_matrix
    crashes = [f for f in report["findings"] if f["status"] == "crashed"
               and (f["producer"], f["consumer"]) == ("numpy", "torch")]
    assert crashes and crashes[0]["layouts"] == ["negative"]
    assert {"float32", "int64"} <= set(crashes[0]["dtypes"])


def test_meta_names_versions_and_what_was_not_exercised(torch_matrix):
    report, _ = torch_matrix
    meta = report["meta"]
    names = {lib["name"]: lib for lib in meta["libraries"]}
    assert names["torch"]["exercised"] and names["torch"]["version"].startswith("2.13.0")
    assert meta["layouts"] == ["contiguous", "negative", "read-only"]
    assert meta["dlpack"] == "1.3"


def test_html_report_is_self_contained(torch_matrix):
    _, html = torch_matrix
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "numpy → torch" in page and "SIGABRT" in page


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_text_and_markdown_formats():
    common = ["matrix", "--libraries", "numpy,torch", "--dtypes", "float32", "--layouts",
              "contiguous,negative"]
    text = arrayport_cli(*common)
    assert text.returncode == 0, text.stderr
    assert "numpy → torch" in text.stdout and "✗ numpy → torch via dlpack" in text.stdout
    assert "\r[" not in text.stderr  # no progress bar when stderr is not a terminal
    markdown = arrayport_cli(*common, "--format", "markdown")
    assert "| numpy → torch |" in markdown.stdout and "|---|" in markdown.stdout


def test_unknown_library_dtype_or_layout_is_a_usage_error():
    for args in (["--libraries", "numpy,nosuchlib"], ["--dtypes", "float33"],
                 ["--layouts", "diagonal"]):
        result = arrayport_cli("matrix", *args)
        assert result.returncode == 2
        assert ("nosuchlib" in result.stderr or "float33" in result.stderr
                or "diagonal" in result.stderr)


HIDE_EVERYTHING_BUT_NUMPY = """
import importlib.abc, sys
from arrayport.cli.libraries import LIBRARIES
HIDDEN = {library.module.partition(".")[0] for library in LIBRARIES} - {"numpy", "arrayport"}
HIDDEN.add("jaxlib")
# Imported at start-up by site-packages' .pth files (cuda-bindings' redirector imports the
# `cuda` namespace): forgotten, so that looking for them again meets the finder below.
for name in [name for name in sys.modules if name.partition(".")[0] in HIDDEN]:
    del sys.modules[name]
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
from arrayport.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_with_only_numpy_it_shows_numpy_and_arrayport():
    result = subprocess.run([sys.executable, "-c", HIDE_EVERYTHING_BUT_NUMPY, "matrix",
                             "--format", "json", "--dtypes", "float32,int16"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    exercised = [lib["name"] for lib in report["meta"]["libraries"] if lib["exercised"]]
    # Where a CUDA driver answers (a GPU, or the simulator found as libcuda.so.1), arrayport
    # on CUDA memory needs nothing more than NumPy: it is exercised too. Asked of a new
    # process, as the matrix's is: this one may have loaded the simulator itself (the GPU
    # suite's tests do), which a child does not inherit.
    answer = subprocess.run([sys.executable, "-c", "from arrayport.cli.libraries import "
                             "cuda_devices; print(bool(cuda_devices()))"],
                            capture_output=True, text=True, timeout=120)
    on_cuda = ["arrayport-cuda"] if answer.stdout.strip() == "True" else []
    assert exercised == ["numpy", "arrayport", *on_cuda]
    pairs = {(p["producer"], p["consumer"]) for p in report["pairs"]}
    assert {pair for pair in pairs if "arrayport-cuda" not in pair} == {
        ("numpy", "numpy"), ("numpy", "arrayport"), ("arrayport", "numpy"),
        ("arrayport", "arrayport")}
    assert bool(pairs - {pair for pair in pairs if "arrayport-cuda" not in pair}) == bool(on_cuda)
    assert cell(report, "numpy", "arrayport", "arrayport", "float32",
                "negative")["status"] == "zero-copy"


def test_unusual_arrays_are_producer_cases(torch_matrix):
    """Each producer's unusual arrays go into every consumer route: PyTorch's own DLPack
    export loses the negative bit when NumPy or PyTorch reads it (wrong values), while the
    arrayport routes never share wrong values or crash."""
    report, _ = torch_matrix
    cells = report["unusual_cells"]
    assert {c["kind"] for c in cells} >= {"torch:neg", "torch:conj", "numpy:masked",
                                          "numpy:broadcast", "torch:sparse-coo"}
    neg = [c for c in cells if c["kind"] == "torch:neg" and c["consumer"] == "numpy"
           and c["route"] == "dlpack"]
    assert neg and neg[0]["status"] == "wrong"
    through_arrayport = [c for c in cells if c["route"] == "arrayport"]
    assert through_arrayport
    assert not [c for c in through_arrayport if c["status"] in ("wrong", "crashed")]
    summary = {entry["kind"]: entry for entry in report["unusual"]}
    assert summary["torch:neg"]["direct"]["wrong"] >= 1
    assert summary["torch:neg"]["arrayport"]["wrong"] == 0


def test_reports_name_libraries_left_out_or_imported_first():
    made = subprocess.run([sys.executable, "-m", "arrayport", "matrix", "--libraries",
                           "numpy,arrayport", "--dtypes", "float32", "--layouts", "contiguous",
                           "--format", "json", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["libraries_broken"] == {} and report["libraries_reordered"] == {}
    from arrayport.cli import html_report
    from arrayport.cli import report as render
    report["libraries_broken"] = {"broken_lib": "crashed the process while importing"}
    report["libraries_reordered"] = {"paddle": "killed the process when imported after "
                                               "tensorflow (killed by SIGSEGV); imported first"}
    for text in (render.render_text(report), render.render_markdown(report),
                 html_report.render_html(report)):
        assert "library broken_lib left out: crashed the process while importing" in text
        assert "library paddle killed the process when imported after tensorflow" in text


# ---- CUDA memory, on the CUDA driver simulator ------------------------------------------------

def test_the_gpu_matrix_runs_on_the_simulator_with_nvidia_s_libraries(tmp_path):
    """The matrix's CUDA libraries (arrayport's device Views, numba-cuda, cuda-core) on the
    CUDA driver simulator, reached as any libcuda.so.1 is: through LD_LIBRARY_PATH. Direct
    routes record the libraries' own findings; routes through arrayport have none."""
    import os

    import cudasim
    missing = [name for name in ("numba", "cuda") if importlib.util.find_spec(name) is None]
    if missing or importlib.util.find_spec("cuda.core") is None:
        pytest.skip("needs numba-cuda and cuda-core (pip install -e '.[test]')")
    library = cudasim.library()
    if library is None:
        pytest.skip(cudasim.unavailable())
    env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(library)}
    result = arrayport_cli("matrix", "--libraries", "arrayport-cuda,numba-cuda,cuda_core",
                           "--dtypes", "float32,bool", "--layouts",
                           "contiguous,transposed,negative,read-only", "--format", "json",
                           "--no-progress", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert not report["libraries_broken"]
    # Every pair exchanges device memory, zero-copy, both ways.
    for producer, consumer, route in [("numba-cuda", "arrayport-cuda", "cuda_array_interface"),
                                      ("arrayport-cuda", "numba-cuda", "cuda_array_interface"),
                                      ("arrayport-cuda", "cuda_core", "dlpack"),
                                      ("cuda_core", "arrayport-cuda", "dlpack"),
                                      ("numba-cuda", "cuda_core", "cuda_array_interface")]:
        assert cell(report, producer, consumer, route, "float32", "transposed")["status"] \
            == "zero-copy", (producer, consumer, route)
    # numba-cuda ignores the interface's read-only flag: a writable alias, found directly;
    # through arrayport (ap.to(x, "numba")) the read-only data is copied instead.
    assert cell(report, "arrayport-cuda", "numba-cuda", "cuda_array_interface", "float32",
                "read-only")["status"] == "wrong"
    assert cell(report, "arrayport-cuda", "numba-cuda", "arrayport", "float32",
                "read-only")["status"] == "copy"
    through_arrayport = [c for c in report["cells"] if c["route"] == "arrayport"]
    assert through_arrayport and not [c for c in through_arrayport
                                      if c["status"] in ("wrong", "crashed")]


def test_gpu_libraries_that_cannot_run_here_are_named_not_exercised(tmp_path):
    """PyTorch's and JAX's GPU arrays are matrix libraries of their own (torch-cuda, jax-gpu),
    exercised where PyTorch has CUDA and JAX a GPU backend; here (PyTorch's CPU build, JAX on
    its CPU) the report says why they were not, and has no cell of theirs — not their host
    arrays' unusual kinds either, which are the torch and jax records'."""
    import os

    import cudasim
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    library = cudasim.library()
    if library is None:
        pytest.skip(cudasim.unavailable())
    env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(library)}
    result = arrayport_cli("matrix", "--libraries", "torch-cuda,jax-gpu,arrayport-cuda",
                           "--dtypes", "float32", "--layouts", "contiguous", "--format", "json",
                           "--no-progress", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    import torch
    if torch.cuda.is_available():
        pytest.skip("PyTorch sees a CUDA device here: torch-cuda is exercised")
    assert "sees no CUDA device" in report["libraries_unavailable"]["torch-cuda"]
    assert "has no GPU backend" in report["libraries_unavailable"]["jax-gpu"]
    named = {lib["name"]: lib for lib in report["meta"]["libraries"]}
    assert not named["torch-cuda"]["exercised"] and not named["jax-gpu"]["exercised"]
    assert named["arrayport-cuda"]["exercised"]
    every = report["cells"] + report["unusual_cells"]
    assert every and not [c for c in every
                          if {c["producer"], c["consumer"]} & {"torch-cuda", "jax-gpu"}]


# ---- the arrow route: Arrow's PyCapsule methods, nothing else ---------------------------------

ARROW_LIBRARIES = ("pyarrow", "polars", "nanoarrow", "duckdb")


def test_the_arrow_hand_over_offers_only_the_producers_capsule_methods():
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    import numpy as np

    from arrayport.cli.matrix import PROTOCOLS
    offered, hand_over = PROTOCOLS["arrow"]
    array = pa.array(np.arange(4.0))
    wrapped = hand_over(array)
    assert offered(array) and hasattr(wrapped, "__arrow_c_array__")
    for absent in ("__dlpack__", "__array__", "__array_interface__", "__arrow_c_stream__"):
        assert not hasattr(wrapped, absent), absent
    with pytest.raises(TypeError):
        memoryview(wrapped)
    assert pa.array(wrapped).equals(array)
    series = pl.Series(np.arange(3.0))             # a stream only: so is its hand-over
    streamed = hand_over(series)
    assert hasattr(streamed, "__arrow_c_stream__")
    assert not hasattr(streamed, "__arrow_c_array__") and not hasattr(streamed, "__array__")
    assert not offered(np.arange(3.0))             # NumPy has no Arrow methods


@pytest.fixture(scope="module")
def arrow_matrix():
    missing = [name for name in ARROW_LIBRARIES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (not installed)")
    result = arrayport_cli("matrix", "--libraries",
                           "numpy,arrayport," + ",".join(ARROW_LIBRARIES), "--dtypes",
                           "float32,int64,complex64", "--layouts",
                           "contiguous,transposed,size-0,read-only", "--format", "json",
                           "--no-progress")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["libraries_broken"] == {}
    return report


@pytest.mark.parametrize("producer, consumer", [
    ("nanoarrow", "pyarrow"), ("arrayport", "pyarrow"), ("arrayport", "nanoarrow"),
    ("nanoarrow", "polars"), ("polars", "nanoarrow"), ("polars", "arrayport"),
    ("nanoarrow", "arrayport"), ("arrayport", "polars")])
def test_arrow_route_cells_share_memory(arrow_matrix, producer, consumer):
    # zero-copy is the consumer's element 0 at the producer's address: pointer identity
    for dtype in ("float32", "int64"):
        found = cell(arrow_matrix, producer, consumer, "arrow", dtype, "contiguous")
        assert found["status"] == "zero-copy", found
        assert found["median_ns"] > 0


def test_duckdb_copies_what_it_scans(arrow_matrix):
    for producer in ("nanoarrow", "polars", "arrayport"):
        found = cell(arrow_matrix, producer, "duckdb", "arrow", "float32", "contiguous")
        assert found["status"] == "copy", found        # the right values, its own memory
    assert cell(arrow_matrix, "numpy", "duckdb", "arrayport", "int64",
                "contiguous")["status"] == "copy"


def test_arrow_producers_make_only_what_an_arrow_column_holds(arrow_matrix):
    arrow_cells = [c for c in arrow_matrix["cells"] if c["route"] == "arrow"]
    producers = {c["producer"] for c in arrow_cells}
    assert producers == {"arrayport", "polars", "nanoarrow", "duckdb"}  # not NumPy; pyarrow's
    for c in arrow_cells:                                               # make is a Tensor
        if c["producer"] != "arrayport":
            assert c["layout"] != "transposed" and c["dtype"] != "complex64", c
    # arrayport's own transposed View is offered, and refused saying how to share it
    refused = cell(arrow_matrix, "arrayport", "polars", "arrow", "float32", "transposed")
    assert refused["status"] == "refused" and "C-contiguous" in refused["detail"]
    # read-only memory stays read-only when shared over Arrow
    assert not [c for c in arrow_cells if c["status"] in ("crashed", "tool-error")]
    assert not [c for c in arrow_cells if c["status"] == "wrong"]


def test_duckdb_table_reaches_polars_and_arrayport_as_its_column(arrow_matrix):
    # A relation is a one-column table: Polars makes a Series of one-field structs of it
    # (its reading of a table; the field is the column), arrayport views the column.
    for consumer in ("polars", "arrayport"):
        found = cell(arrow_matrix, "duckdb", consumer, "arrow", "float32", "contiguous")
        assert found["status"] in ("zero-copy", "copy"), found


def test_pyarrow_nulls_are_refused_on_the_arrow_route(arrow_matrix):
    [nulls] = [c for c in arrow_matrix["unusual_cells"] if c["kind"] == "pyarrow:nulls"
               and c["consumer"] == "arrayport" and c["route"] == "arrow"]
    assert nulls["status"] == "refused" and "1 null" in nulls["detail"], nulls
    [plain] = [c for c in arrow_matrix["unusual_cells"] if c["kind"] == "pyarrow:plain"
               and c["consumer"] == "nanoarrow" and c["route"] == "arrow"]
    assert plain["status"] == "zero-copy", plain
