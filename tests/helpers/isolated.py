"""Run hostile code in a child interpreter, so that a crash shows up as a signal in one
test's report instead of killing the test run (tests/test_memory_safety.py,
tests/test_hostile_second_pass.py).

The child starts with ``PRELUDE``: NumPy, arrayport and ``attempt(call)``, which prints
what a call gave ("returned …" or "refused <Type>: <message>") for the parent to judge."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PRELUDE = """
import numpy as np
import arrayport as ap

def attempt(call):
    try:
        result = call()
    except Exception as error:  # the child reports; the parent judges
        print(f"refused {type(error).__name__}: {error}", flush=True)
    else:
        print(f"returned {result!r}", flush=True)
"""


def run_isolated(*parts: str, timeout: float = 300) -> str:
    """Run ``parts`` (each dedented on its own) after the prelude in a fresh interpreter;
    its stdout, after checking it exited normally (a negative return code is a signal: a
    crash)."""
    code = PRELUDE + "".join(textwrap.dedent(part) for part in parts)
    child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code],
                           capture_output=True, text=True, timeout=timeout)
    assert child.returncode == 0, (f"child died (return code {child.returncode}):\n"
                                   f"{child.stdout[-3000:]}\n{child.stderr[-3000:]}")
    return child.stdout


def refusals(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("refused")]
