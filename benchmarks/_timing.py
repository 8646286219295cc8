"""Shared by the benchmark scripts: medians of timeit runs, the header naming the machine
and library versions, the side-by-side table (arrayport vs. a peer, same run), and the
Python calls an operation makes."""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import timeit

import numpy as np

import arrayport as ap

OPTIONAL = ("torch", "tvm_ffi")


def cpu_model() -> str:
    """The processor's model name ("AMD EPYC 9R14 …"), which platform.processor() does not
    give on Linux, with the x86 family and model numbers: virtual machines often name only
    the line ("AMD EPYC"), and the numbers tell its generations apart (family 25: Zen 3
    and 4, 26: Zen 5). The machine architecture where the system does not say."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                key = key.strip()
                if not line.strip():
                    break  # the first processor is enough
                fields.setdefault(key, value.strip())
    except OSError:
        pass
    name = next((fields[key] for key in ("model name", "Model", "Hardware") if key in fields),
                None)
    if name is None:
        return platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000)
    return parser.parse_args()


def median_ns(statement: str, namespace: dict, number: int, repeat: int) -> float:
    timer = timeit.Timer(statement, globals=namespace)
    timer.timeit(number // 10 or 1)  # warm-up
    return statistics.median(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def paired_medians_ns(first: str, second: str, namespace: dict, number: int,
                      repeat: int) -> tuple[float, float]:
    """Medians of two statements timed in alternation (first, second, first, …), so that
    the machine's drift during the run weighs on both alike."""
    timers = [timeit.Timer(s, globals=namespace) for s in (first, second)]
    for timer in timers:
        timer.timeit(number // 10 or 1)  # warm-up
    samples = ([], [])
    for _ in range(repeat):
        for timer, taken in zip(timers, samples):
            taken.append(timer.timeit(number))
    return tuple(statistics.median(taken) / number * 1e9 for taken in samples)


def namespace_with_libraries() -> dict:
    """ap, np and whichever optional libraries are installed (never failing without them),
    plus the inputs every benchmark shares: a small (3, 4) float32 ``np_array``, its
    ``view``, and ``torch_tensor`` of the same shape when PyTorch is installed."""
    namespace = {"ap": ap, "np": np}
    for module in OPTIONAL:
        if importlib.util.find_spec(module) is not None:
            namespace[module] = __import__(module)
    namespace["np_array"] = np.ones((3, 4), np.float32)
    namespace["view"] = ap.view(namespace["np_array"])
    if "torch" in namespace:
        namespace["torch_tensor"] = namespace["torch"].ones((3, 4))
    return namespace


def print_table(rows, namespace: dict, args: argparse.Namespace, header: bool = True) -> None:
    """rows: (label, arrayport statement, peer statement, needed module or None).
    ``header=False`` continues a table (same columns, another ``args.number``)."""
    if header:
        versions = [f"arrayport {ap.__version__}", f"numpy {np.__version__}"] + [
            f"{m} {getattr(namespace[m], '__version__', '?')}" for m in OPTIONAL
            if m in namespace]
        print(f"# {cpu_model()}, Python "
              f"{platform.python_version()}; " + ", ".join(versions))
        print(f"{'case':<38} {'arrayport':>10} {'peer':>10} {'ratio':>7}  peer statement")
    print(f"# median of {args.repeat} x {args.number} calls, ns per call")
    for label, ours, peer, needs in rows:
        if needs is not None and needs not in namespace:
            continue
        ours_ns, peer_ns = paired_medians_ns(ours, peer, namespace, args.number, args.repeat)
        print(f"{label:<38} {ours_ns:>10.0f} {peer_ns:>10.0f} {ours_ns / peer_ns:>7.2f}  {peer}")
    missing = [m for m in OPTIONAL if m not in namespace]
    if missing:
        print(f"# not installed, rows skipped: {', '.join(missing)}")


def python_calls(exchange, repeat=20):
    """Function calls the interpreter makes per exchange (Python functions and built-ins,
    counted by ``sys.setprofile``): the host work of an exchange, exactly, on any machine."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    kept = [exchange()]
    sys.setprofile(profile)
    try:
        for _ in range(repeat):
            kept.append(exchange())
    finally:
        sys.setprofile(None)
    kept.clear()
    return (count[0] - 1) / repeat   # the setprofile(None) call itself
