"""Run risky cases in another process, so that a crash is a finding, not the end of the run.

The parent (:func:`run_isolated`) never imports an array library. It starts a worker,
``python -m arrayport.cli.isolation``, and sends it a job on stdin: the runner module, the
libraries to import and the cases. The worker imports the libraries one at a time, saying
so on stdout, then runs the cases and writes one JSON line per result.

On POSIX the worker is a fork server: it imports the libraries once (and runs nothing else),
then forks a child that runs cases until one kills it; the server reports that case as
``crashed`` (signal or exit status, and the tail of what the child wrote to stderr) and forks
a fresh child for the rest. A case that runs longer than ``case_timeout`` seconds is killed
and reported the same way. Without ``fork`` the worker runs cases itself, and the parent
restarts it after the case that killed it. A library whose import kills the worker is marked
broken and left out of the restarted worker.

A runner module provides ``run_case(case: dict, modules: dict[str, module]) -> dict``.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import Callable

CASE_TIMEOUT_S = 60.0


# --- the parent side --------------------------------------------------------------------------

def run_isolated(runner: str, libraries: list[str], cases: list[dict], *,
                 on_result: Callable[[int, dict], None],
                 on_library: Callable[[str, str | None], None] = lambda name, error: None,
                 case_timeout: float = CASE_TIMEOUT_S,
                 reordered: dict[str, str] | None = None) -> dict[str, str]:
    """Run ``cases`` through ``runner`` in a worker; call ``on_result(index, result)`` for each
    case as it finishes and ``on_library(name, error)`` as each library is imported (error is
    None when it imported). Returns {library: why} for libraries that could not be used.

    Frameworks can kill each other: PaddlePaddle 3.3 dies importing after TensorFlow 2.21,
    yet imports fine before it. A library whose import kills a worker that had imported
    others is moved to the front of the order and tried again, once; ``reordered`` (when
    given) receives {library: what happened}. Only a library that kills the worker from the
    front — on its own — is broken."""
    broken: dict[str, str] = {}
    order = list(libraries)
    start = 0
    reported_libraries: set[str] = set()
    while start < len(cases) or not reported_libraries >= set(libraries) - set(broken):
        usable = [name for name in order if name not in broken]
        job = {"runner": runner, "libraries": usable, "cases": cases[start:],
               "case_timeout": case_timeout}
        with tempfile.TemporaryFile() as worker_stderr:
            worker = subprocess.Popen(
                [sys.executable, "-m", "arrayport.cli.isolation"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=worker_stderr, text=True)
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write(json.dumps(job))
            worker.stdin.close()
            importing, next_index = None, start
            for line in worker.stdout:
                message = _parse(line)
                if message is None:
                    continue  # a library printed to stdout (only possible without fork)
                if "importing" in message:
                    importing = message["importing"]
                elif "imported" in message:
                    importing = None
                    name, error = message["imported"], message.get("error")
                    if error is not None:
                        broken[name] = error
                    if name not in reported_libraries:
                        reported_libraries.add(name)
                        on_library(name, error)
                elif "index" in message:
                    next_index = start + message["index"] + 1
                    on_result(next_index - 1, message["result"])
            returncode = worker.wait()
            worker_stderr.seek(0)
            tail = _tail(worker_stderr.read())
        if next_index >= len(cases) and returncode == 0 and importing is None:
            break
        if importing is not None:
            before = usable[:usable.index(importing)] if importing in usable else []
            if before and order[0] != importing:
                order.remove(importing)
                order.insert(0, importing)
                if reordered is not None:
                    reordered[importing] = (
                        f"killed the process when imported after {', '.join(before)} "
                        f"({_describe_exit(returncode)}); imported first instead")
                continue
            why = f"crashed the process while importing ({_describe_exit(returncode)}){tail}"
            broken[importing] = why
            if importing not in reported_libraries:
                reported_libraries.add(importing)
                on_library(importing, why)
            continue
        if next_index < len(cases):
            on_result(next_index, crashed_result(returncode, tail))
            start = next_index + 1
        else:
            break
    return broken


def crashed_result(returncode: int, stderr_tail: str) -> dict:
    return {"status": "crashed", "detail": _describe_exit(returncode) + stderr_tail}


def _parse(line: str) -> dict | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


# Lines that say why a process died, as runtimes print them; preferred over stack frames.
_DEATH_MARKERS = ("what():", "terminate called", "Check failed", "Fatal Python error",
                  "Segmentation fault", "Assertion", "Aborted", "Error:", "error:")


def _tail(raw: bytes, limit: int = 300) -> str:
    """What a dying process said about why: the lines with a known marker, else its last."""
    lines = [line.strip() for line in raw.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line and not line.startswith("Exception ignored")]
    telling = [line for line in lines if any(marker in line for marker in _DEATH_MARKERS)]
    text = " | ".join(telling[:2] if telling else lines[-2:])
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return f": {text}" if text else ""


# --- the worker side --------------------------------------------------------------------------

def _emit(stream, message: dict) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _import_libraries(names: list[str], out) -> dict:
    modules = {}
    for name in names:
        _emit(out, {"importing": name})
        try:
            modules[name] = importlib.import_module(name)
            error = None
        except BaseException as exc:  # a broken install may raise anything, even SystemExit
            first_line = (str(exc).splitlines() or [""])[0]
            error = f"import failed: {type(exc).__name__}: {first_line}"
        _emit(out, {"imported": name, "error": error})
    return modules


def _run_one(runner, case: dict, modules: dict) -> dict:
    try:
        return runner.run_case(case, modules)
    except BaseException as exc:  # a bug in the runner: report it as such, keep going
        return {"status": "tool-error", "detail": "".join(
            traceback.format_exception_only(type(exc), exc)).strip()}


def _serve_inline(runner, cases: list[dict], modules: dict, out) -> None:
    for index, case in enumerate(cases):
        _emit(out, {"index": index, "result": _run_one(runner, case, modules)})


def _serve_forked(runner, cases: list[dict], modules: dict, out, case_timeout: float) -> None:
    index = 0
    while index < len(cases):
        index = _run_child(runner, cases, index, modules, out, case_timeout)


def _run_child(runner, cases, first, modules, out, case_timeout) -> int:
    """Fork a child that runs cases from ``first`` on; return the index to go on from."""
    read_end, write_end = os.pipe()
    child_stderr = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the child: results go down the pipe, anything a library prints to a file
        try:
            os.close(read_end)
            os.dup2(child_stderr.fileno(), 1)
            os.dup2(child_stderr.fileno(), 2)
            with os.fdopen(write_end, "w") as results:
                for index in range(first, len(cases)):
                    _emit(results, {"index": index,
                                    "result": _run_one(runner, cases[index], modules)})
        finally:
            os._exit(0)
    os.close(write_end)
    next_index, pending = first, b""
    timed_out = False
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], case_timeout)
            if not ready:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                message = _parse(line.decode())
                if message is not None:
                    _emit(out, message)
                    next_index = message["index"] + 1
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if next_index >= len(cases):
        child_stderr.close()
        return next_index
    child_stderr.seek(0)
    tail = _tail(child_stderr.read())
    child_stderr.close()
    result = crashed_result(returncode, tail)
    if timed_out:
        result["detail"] = f"hung: no result within {case_timeout:g} s{tail}"
    _emit(out, {"index": next_index, "result": result})
    return next_index + 1


def main() -> None:
    job = json.loads(sys.stdin.read())
    out = sys.stdout
    runner = importlib.import_module(job["runner"])
    modules = _import_libraries(job["libraries"], out)
    if hasattr(os, "fork"):
        _serve_forked(runner, job["cases"], modules, out, job.get("case_timeout", CASE_TIMEOUT_S))
    else:
        _serve_inline(runner, job["cases"], modules, out)


if __name__ == "__main__":
    main()
