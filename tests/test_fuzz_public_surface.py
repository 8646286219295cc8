"""The coverage-guided fuzzer's harness (reliability/fuzz/public_surface.py, issue 31),
replayed over its seed corpus without atheris or instrumentation: every input the fuzzer
starts from — and every finding once fixed, which joins the corpus — runs in the suite,
in a child process (a crash is a failed test, not a dead run)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "reliability" / "fuzz" / "public_surface.py"
CORPUS = sorted((ROOT / "reliability" / "fuzz" / "corpus").iterdir())


def test_the_seed_corpus_covers_every_producer_and_operation():
    names = {path.name for path in CORPUS}
    assert len(CORPUS) >= 50
    assert {f"kind{p}-op{o}" for p in range(4) for o in range(7)} <= names


# The replay's address space capped at 8 GiB, as the fuzzer caps allocations (4 GiB): an
# input that makes pickle allocate 22 GB gets a MemoryError, not the machine's memory. Set
# by the child itself (a preexec_fn would fork this multithreaded process). Under
# AddressSanitizer, whose shadow needs terabytes of address space, its own
# max_allocation_size_mb does this instead (reliability/sanitize.sh).
_BOUNDED = ("import os, resource, runpy, sys\n"
            "if 'asan' not in os.environ.get('LD_PRELOAD', ''):\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_the_harness_replays_its_seed_corpus_cleanly():
    child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _BOUNDED, str(HARNESS),
                            "--replay", *map(str, CORPUS)], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]


def test_the_harness_reports_what_the_contract_does_not_allow(tmp_path):
    # The replay is not a test that cannot fail: an input whose story ends in an error
    # outside the contract (here, the harness's own check of a copy) fails it.
    sys.path.insert(0, str(HARNESS.parent))
    try:
        import public_surface
    finally:
        sys.path.pop(0)
    original = public_surface.exports

    def broken(view):
        raise RuntimeError("a finding")

    public_surface.exports = broken
    try:
        public_surface.one_input(bytes([2, 0, 1, 1]))
    except RuntimeError:
        pass
    else:
        raise AssertionError("the harness swallowed an error outside the contract")
    finally:
        public_surface.exports = original


@pytest.mark.gpu
def test_the_arrow_device_inputs_replay_cleanly_on_the_cuda_simulator():
    # With the simulator as the child's CUDA driver (as fuzz.sh runs it), the Arrow device
    # inputs put their buffers in its memory, and the fuzzer's own finding —
    # arrow-device-labelled-over-host-memory: host memory labelled cuda:0, copied strided —
    # runs arrayport's kernels for real. No kernel may fault (the simulator says "illegal
    # address" where one does, and the context dies with it).
    sys.path.insert(0, str(ROOT / "tests" / "helpers"))
    try:
        import cudasim
    finally:
        sys.path.pop(0)
    library = cudasim.library("libcuda.so.1")
    if library is None:
        pytest.skip("the CUDA driver simulator cannot be built here (no C compiler or cuda.h)")
    inputs = [path for path in CORPUS if path.name.startswith("arrow-device")]
    assert any(path.name == "arrow-device-labelled-over-host-memory" for path in inputs)
    environment = dict(os.environ, CUDASIM_LIBRARY=library,
                       PYTHONPATH=str(ROOT / "tests" / "helpers"),
                       LD_LIBRARY_PATH=os.pathsep.join(
                           filter(None, [os.path.dirname(library),
                                         os.environ.get("LD_LIBRARY_PATH")])))
    child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _BOUNDED, str(HARNESS),
                            "--replay", *map(str, inputs)], capture_output=True, text=True,
                           timeout=600, env=environment)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]
    assert "illegal address" not in child.stderr, child.stderr[-3000:]
    assert "Exception ignored" not in child.stderr, child.stderr[-3000:]
