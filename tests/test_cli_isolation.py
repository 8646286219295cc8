"""arrayport.cli.isolation: a case that kills or hangs its process is reported as crashed
and the run goes on; a library whose import kills the worker is reported as broken."""

import os
from pathlib import Path

import pytest

from arrayport.cli import isolation

HELPERS = str(Path(__file__).parent / "helpers")


@pytest.fixture(autouse=True)
def helpers_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HELPERS + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(actions, libraries=(), timeout=30.0, reordered=None):
    results, libs = {}, {}
    broken = isolation.run_isolated(
        "crashy_runner", list(libraries), [{"action": a} for a in actions],
        on_result=lambda i, r: results.__setitem__(i, r),
        on_library=lambda name, error: libs.__setitem__(name, error), case_timeout=timeout,
        reordered=reordered)
    return [results[i] for i in range(len(actions))], libs, broken


def test_a_crash_is_one_result_and_the_rest_still_run():
    results, _, _ = run(["ok", "abort", "ok", "raise", "print", "ok"])
    assert [r["status"] for r in results] == ["ok", "crashed", "ok", "tool-error", "ok", "ok"]
    assert "SIGABRT" in results[1]["detail"] and "deliberate abort" in results[1]["detail"]
    assert "a bug in the runner" in results[3]["detail"]
    assert results[0]["pid"] != os.getpid()          # never in the caller's process
    assert results[0]["pid"] != results[2]["pid"]    # a fresh child after the crash


def test_a_hanging_case_is_killed_and_reported():
    results, _, _ = run(["hang", "ok"], timeout=1.0)
    assert results[0]["status"] == "crashed" and "hung" in results[0]["detail"]
    assert results[1]["status"] == "ok"


def test_a_library_that_kills_its_importer_is_left_out():
    results, libs, broken = run(["ok", "ok"], libraries=["crash_on_import", "json"])
    assert "crash_on_import" in broken and "SIGABRT" in broken["crash_on_import"]
    assert libs["json"] is None
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert results[0]["modules"] == ["json"]


def test_a_library_that_fails_to_import_is_reported_not_raised():
    _, libs, broken = run(["ok"], libraries=["no_such_library_anywhere"])
    assert "ModuleNotFoundError" in broken["no_such_library_anywhere"]
    assert libs["no_such_library_anywhere"] == broken["no_such_library_anywhere"]


def test_a_library_that_dies_after_another_is_imported_first_instead():
    reordered = {}
    results, libs, broken = run(["ok", "ok"], libraries=["rival_framework", "jealous_framework"],
                                reordered=reordered)
    assert broken == {}
    assert libs == {"rival_framework": None, "jealous_framework": None}
    assert "after rival_framework" in reordered["jealous_framework"]
    assert "SIGABRT" in reordered["jealous_framework"]
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert results[0]["modules"] == ["jealous_framework", "rival_framework"]


def test_a_library_that_dies_on_its_own_is_broken_even_when_moved_first():
    reordered = {}
    _, libs, broken = run(["ok"], libraries=["json", "crash_on_import"], reordered=reordered)
    assert "SIGABRT" in broken["crash_on_import"] and "crash_on_import" in reordered
    assert libs["json"] is None
