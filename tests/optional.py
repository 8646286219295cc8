"""Optional libraries for the tests: a module or None, and a skip mark per test — so that a
test module runs whatever of its tests the installed libraries allow (the suite runs, with
skips, where only NumPy is installed)."""

from __future__ import annotations

import importlib
import importlib.util

import pytest


def optional_module(name: str):
    """The module ``name`` when it imports, else None."""
    if importlib.util.find_spec(name.partition(".")[0]) is None:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def needs(*names: str):
    """A skip mark for a test that needs every library in ``names``."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")
