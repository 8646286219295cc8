"""What a GPU exchange costs where no GPU can be timed: CUDA driver calls, host
synchronizations and events created per exchange, counted by the CUDA driver simulator
(tests/cudasim/, issue 32).

    python benchmarks/bench_driver_calls.py [--repeat N]

Exchanges: a CUDA Array Interface import with a consumer stream (the consumer waits on the
producer's stream), a DLPack export of a View with pending work to a consumer stream, and
a device-to-device copy on a stream. Counts are per exchange, averaged over N (they do not
vary: the figures are exact). The first exchange of each kind is left out (it retains the
primary context once for the process).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "helpers")]

import cudasim  # noqa: E402

if cudasim.install() is None:
    sys.exit(f"bench_driver_calls: the simulator cannot be built: {cudasim.unavailable()}")

import numpy as np  # noqa: E402

import arrayport as ap  # noqa: E402
from sim_arrays import DeviceArray, Stream  # noqa: E402

SIM = cudasim.Simulator(os.environ["CUDASIM_LIBRARY"])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def counted(exchange, repeat):
    """Driver calls by name per exchange (the first, warming, run left out)."""
    exchange()
    before = SIM.counters()
    for _ in range(repeat):
        exchange()
    after = SIM.counters()
    return {name: (after[name] - before[name]) / repeat for name in after
            if after[name] != before[name]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    SIM.set_delay_us(0)
    producer, consumer = Stream(0), Stream(0)
    values = np.arange(1024, dtype=np.float32)
    array = DeviceArray(values, device=0, stream=producer)
    pending = ap.view(array)          # a View whose data is pending on the producer's stream

    exchanges = {
        "CAI import, consumer stream": lambda: ap.view(array, stream=int(consumer)),
        "DLPack export to a consumer stream": lambda: pending.__dlpack__(
            stream=int(consumer), max_version=(1, 3)),
        "device copy on a stream": lambda: pending.copy(stream=int(consumer)),
    }
    print(f"CPU: {cpu_model()}; driver: the CUDA driver simulator; repeat {args.repeat}")
    print(f"{'exchange':38} {'calls':>6} {'host syncs':>10} {'events':>7}  calls by name")
    for name, exchange in exchanges.items():
        counts = counted(exchange, args.repeat)
        syncs = counts.pop("host_synchronizations", 0)
        calls = sum(counts.values())
        events = counts.get("cuEventCreate", 0)
        detail = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
        print(f"{name:38} {calls:6g} {syncs:10g} {events:7g}  {detail}")
    producer.synchronize()
    del pending
    array.free()
    producer.close()
    consumer.close()


if __name__ == "__main__":
    main()
