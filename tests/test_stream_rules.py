"""Stream order has one owner (issue 32): the core's _core_streams.pxi decides what a stream
value means, who waits for whom, and reads the synchronization switch; every other module
asks it. Held here by reading the sources (one home per rule), and by the rules' own answers
on this machine, GPU or not (the GPU suite, `pytest -m gpu`, runs them on the simulator)."""

import re
from pathlib import Path

import pytest

from arrayport import _core
from arrayport.devices import DeviceType

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "arrayport"
OWNER = "_core_streams.pxi"
SOURCES = [path for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.glob("_core*.p*"))
           if path.suffix in (".py", ".pyx", ".pxi")]


@pytest.mark.parametrize("rule", [
    r"\.make_stream_wait\(",       # a consumer's stream waits for a producer's (an event)
    r"\.synchronize\(",            # the host waits for a stream
    r"\b_implicit_sync\b",         # the switch, read
    r"\b_NONE_STREAM\b",           # which stream None stands for
])
def test_each_stream_rule_is_applied_in_one_module(rule):
    homes = {path.name for path in SOURCES
             if re.search(rule, "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith(("#", "def "))))}
    assert homes == {OWNER}, f"{rule} is applied in {sorted(homes)}"


def test_the_grep_sees_a_second_home():
    assert re.search(r"\.make_stream_wait\(", "    driver.make_stream_wait(0, 1, 2)")


class CudaCoreStream:
    """An object with cuda-core's stream protocol, as cuda.core.Stream has."""

    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


@pytest.mark.parametrize("answer, handle", [((0, 0x5000), 0x5000), ((0, 1), 1), ((0, 2), 2)])
def test_an_object_with_cuda_stream_names_its_handle(answer, handle):
    assert _core.check_stream(CudaCoreStream(answer), DeviceType.CUDA) == handle


@pytest.mark.parametrize("answer, error, match", [
    ((1, 0x5000), TypeError, r"returned \(1, 20480\), not \(0, handle\)"),   # a newer protocol
    ((0, "s"), TypeError, "not \\(0, handle\\)"),
    ([0, 5], TypeError, "not \\(0, handle\\)"),
    ((0, 0), ValueError, "stream 0 is ambiguous on CUDA"),
    ((0, -5), ValueError, "stream must be >= -1"),
])
def test_a_bad_cuda_stream_answer_is_refused(answer, error, match):
    with pytest.raises(error, match=match):
        _core.check_stream(CudaCoreStream(answer), DeviceType.CUDA)


@pytest.mark.parametrize("stream", [True, 1.0, "1", object()])
def test_what_is_not_a_stream_is_a_type_error(stream):
    with pytest.raises(TypeError, match="stream must be an int or None"):
        _core.check_stream(stream, DeviceType.CUDA)


def test_host_memory_takes_no_stream_whatever_its_form():
    with pytest.raises(ValueError, match="stream must be None for cpu memory"):
        _core.check_stream(CudaCoreStream((0, 5)), DeviceType.CPU)
    assert _core.check_stream(None, DeviceType.CPU) is None


def test_none_means_each_vendor_s_default_stream_for_a_copy():
    assert _core.copy_work_stream(None, DeviceType.CUDA) == 1
    assert _core.copy_work_stream(None, DeviceType.CUDA_HOST) == 1
    assert _core.copy_work_stream(None, DeviceType.ROCM) == 0
    assert _core.copy_work_stream(77, DeviceType.CUDA) == 77
    with pytest.raises(ValueError, match="stream=-1 names no stream"):
        _core.copy_work_stream(-1, DeviceType.CUDA)
