"""`arrayport check` end to end: it fails deliberately broken producers (so its checks can
fail), passes arrayport itself, names a spec clause for every result, and reports what it
finds in real libraries."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HELPERS = str(Path(__file__).parent / "helpers")


def check(target, **more_env):
    env = {**os.environ, "PYTHONPATH": HELPERS + os.pathsep + os.environ.get("PYTHONPATH", ""),
           **more_env}
    result = subprocess.run([sys.executable, "-m", "arrayport", "check", target, "--format",
                             "json"], capture_output=True, text=True, timeout=600, env=env)
    report = json.loads(result.stdout) if result.stdout.strip() else None
    return result, report


def statuses(report):
    return {row["id"]: row for row in report["results"]}


@pytest.mark.parametrize("factory, failing, says", [
    ("wrong_capsule_name", "producer.legacy-capsule", "'dl_tensor'"),
    ("deleter_never_called", "producer.deleter-unconsumed", "deleter called 0 times"),
    ("accepts_stream_zero", "producer.stream-cpu", "accepted stream 0"),
])
def test_broken_producers_fail(factory, failing, says):
    result, report = check(f"broken_producers:{factory}")
    assert result.returncode == 1, result.stderr
    row = statuses(report)[failing]
    assert row["status"] == "fail" and says in row["reason"]
    assert report["summary"]["fail"] >= 1


def test_the_same_producer_unbroken_passes():
    result, report = check("broken_producers:well_behaved")
    assert result.returncode == 0, result.stdout
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] >= 20


def test_arrayport_passes_every_check():
    result, report = check("arrayport")
    assert result.returncode == 0
    # Every check passes but the CUDA ones, which host arrays skip, saying so.
    rows = statuses(report)
    assert rows.pop("producer.stream-cuda")["reason"] == "not a CUDA array"
    for interface_check in [name for name in rows if name.startswith("consumer.interface")]:
        assert "CUDA Array Interface consumer" in rows.pop(interface_check)["reason"]
    assert {row["status"] for row in rows.values()} == {"pass"}
    assert all(row["clause"] for row in report["results"])


def test_numpy_passes_but_for_masked_arrays():
    # NumPy's own protocol checks all pass; its one failure is numpy.ma's __dlpack__
    # (ndarray's), which exports masked arrays without their masks.
    result, report = check("numpy")
    rows = statuses(report)
    failing = [row_id for row_id, row in rows.items() if row["status"] == "fail"]
    assert failing == ["unusual.masked"], result.stdout
    assert rows["consumer.read-only"]["status"] == "pass"
    assert rows["producer.read-only"]["status"] == "pass"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_torch_findings():
    result, report = check("torch")
    assert result.returncode == 1
    rows = statuses(report)
    # Reached directly, negative strides abort PyTorch: reported as a failed check, the run
    # itself goes on.
    assert rows["consumer.negative-strides"]["status"] == "fail"
    assert "crashed" in rows["consumer.negative-strides"]["reason"]
    assert rows["consumer.read-only"]["status"] == "warn"
    assert rows["producer.tensor"]["status"] == "pass"


def test_text_output_and_usage_errors():
    text = subprocess.run([sys.executable, "-m", "arrayport", "check", "arrayport"],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "PASS  producer.deleter-unconsumed" in text.stdout
    missing = subprocess.run([sys.executable, "-m", "arrayport", "check", "no_such_module_x"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no_such_module_x" in missing.stderr
    result, _ = check("numpy:no_such_factory")
    assert result.returncode == 1  # every check fails: the factory does not exist


def test_unusual_kinds_judge_the_librarys_own_export():
    """`check torch` runs PyTorch's own __dlpack__ on its unusual tensors: the negative bit
    is dropped (wrong signs: fail), conjugate and grad tensors are refused (pass), a nested
    tensor is refused with RuntimeError instead of BufferError (warn)."""
    pytest.importorskip("torch")
    _, report = check("torch")
    rows = statuses(report)
    assert rows["unusual.neg"]["status"] == "fail"
    assert "[1.0, 2.0, 3.0] where the library reports [-1.0, -2.0, -3.0]" in \
        rows["unusual.neg"]["reason"]
    assert rows["unusual.conj"]["status"] == "pass"
    assert rows["unusual.requires-grad"]["status"] == "pass"
    assert rows["unusual.nested"]["status"] == "warn"
    assert "lazy conjugation" in rows["unusual.neg"]["clause"]


def test_unusual_kinds_of_numpy_include_masked_arrays():
    _, report = check("numpy")
    rows = statuses(report)
    assert rows["unusual.masked"]["status"] == "fail"  # ndarray's __dlpack__ drops the mask
    assert rows["unusual.byteswapped"]["status"] == "pass"


# ---- CUDA libraries, on the CUDA driver simulator --------------------------------------------

@pytest.fixture(scope="module")
def on_simulator():
    """The environment that makes a child process's libcuda.so.1 the CUDA driver simulator."""
    import cudasim
    library = cudasim.library()
    if library is None:
        pytest.skip(cudasim.unavailable())
    return {"LD_LIBRARY_PATH": os.path.dirname(library)}


def test_cuda_core_is_checked_on_device_memory(on_simulator):
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None:
        pytest.skip("needs cuda-core (pip install -e '.[test]')")
    result, report = check("cuda.core", **on_simulator)
    assert result.returncode in (0, 1), result.stderr
    rows = statuses(report)
    assert rows["producer.dlpack-device"]["reason"] == "(2, 0)"      # CUDA memory, really
    for passing in ("producer.tensor", "producer.deleter-consumed", "consumer.capsule"):
        assert rows[passing]["status"] == "pass", rows[passing]
    # The CUDA stream clause is exercised (cuda-core 1.2 accepts the disallowed stream 0).
    assert rows["producer.stream-cuda"]["status"] in ("pass", "fail")
    assert not [row for row in report["results"] if row["status"] == "crash"]


def test_numba_cuda_is_checked_through_its_cuda_array_interface(on_simulator):
    # numba-cuda speaks only the CUDA Array Interface: it is checked as its producer (every
    # dtype, read back through a device-to-host copy) and as its consumer — the checks of
    # host protocols skip, saying its arrays live in device memory.
    if importlib.util.find_spec("numba") is None:
        pytest.skip("needs numba-cuda (pip install -e '.[test]')")
    result, report = check("numba.cuda", **on_simulator)
    assert result.returncode == 0, result.stderr
    rows = statuses(report)
    row = rows["producer.cuda-array-interface"]
    assert row["status"] == "pass" and row["reason"].startswith("version 3"), row
    assert rows["producer.dtype.float64"] == {**rows["producer.dtype.float64"], "status": "pass",
                                              "reason": "float64 through the CUDA Array Interface"}
    assert rows["producer.dtype.complex64"]["status"] == "pass"
    assert rows["producer.buffer"]["status"] == "skip"
    assert "cuda memory" in rows["producer.buffer"]["reason"]
    assert rows["consumer.interface"]["reason"] == "shared, the producer kept alive"
    assert rows["consumer.interface-strides"] == {**rows["consumer.interface-strides"],
                                                  "status": "pass",
                                                  "reason": "transposed read, negative read"}
    # numba ignores the read-only flag (documented), and refuses masks
    assert rows["consumer.interface-read-only"]["status"] == "warn"
    assert rows["consumer.interface-mask"]["reason"] == "refused with NotImplementedError"
    assert report["summary"]["pass"] >= 18


def test_a_device_consumer_is_given_device_memory(on_simulator):
    # cuda-core's arrays live on the GPU: the consumer checks offer it device capsules
    # and interfaces (a device-only consumer, as CuPy is, refuses host ones).
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None:
        pytest.skip("needs cuda-core (pip install -e '.[test]')")
    result, report = check("cuda.core", **on_simulator)
    rows = statuses(report)
    assert rows["consumer.max-version"]["status"] == "pass"
    assert rows["consumer.capsule"]["reason"] == "dltensor_versioned: shared, deleter once"
    assert rows["consumer.read-only"]["reason"] == "read-only"
    assert rows["consumer.interface"]["status"] == "pass"
    assert rows["consumer.interface-read-only"]["reason"] == "read-only"


def test_a_consumer_that_refuses_before_exporting_is_reported_not_crashed():
    result, report = check("early_refuser")
    rows = statuses(report)
    row = rows["consumer.foreign-major"]
    assert row["status"] == "skip", row
    assert row["reason"].startswith("refused with BufferError before asking for a capsule")
    assert rows["consumer.capsule"]["status"] == "fail"   # it takes nothing: reported as such


# ---- Arrow: a library that speaks only Arrow's capsules ---------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("nanoarrow") is None, reason="needs nanoarrow")
def test_nanoarrow_is_checked_over_arrow_alone():
    result, report = check("nanoarrow")
    assert result.returncode == 0, result.stdout
    rows = statuses(report)
    assert rows["producer.arrow"] == {**rows["producer.arrow"], "status": "pass",
                                      "reason": "float32[3, 4], zero-copy"}
    assert rows["consumer.arrow"]["status"] == "pass"
    assert rows["consumer.arrow"]["reason"] == "shared, released once"
    assert rows["producer.tensor"]["status"] == "skip"      # no DLPack to hold it to
    assert rows["consumer.capsule"]["reason"] == "the module has no from_dlpack"
    # Each dtype is held to its Arrow type and values; bool is the factory's uint8.
    assert rows["producer.dtype.float16"]["reason"] == "float16 through Arrow"
    assert rows["producer.dtype.uint64"]["status"] == "pass"
    assert rows["producer.dtype.bool"]["reason"] == "the factory made uint8 from bool"
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] == 13


def test_a_library_without_an_arrow_consumer_skips_the_arrow_consumer_check():
    _, report = check("numpy")
    rows = statuses(report)
    assert rows["consumer.arrow"] == {**rows["consumer.arrow"], "status": "skip",
                                      "reason": "arrayport knows no Arrow consumer of this "
                                                "library"}
    assert rows["producer.arrow"]["status"] == "skip"
