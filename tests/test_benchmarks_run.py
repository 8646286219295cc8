"""The benchmark scripts run (tiny counts; no timing is asserted — speed is shown by
running them, see README)."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def test_dlpack_benchmark_prints_every_row_it_can():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_dlpack.py"), "--repeat", "1", "--number", "10"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "from_dlpack(numpy array)" in result.stdout
    assert "np.from_dlpack(View vs ndarray)" in result.stdout
