"""Optional libraries for the tests: a module or None, and a skip mark per test — so that a
test module runs whatever of its tests the installed libraries allow (the suite runs, with
skips, where only NumPy is installed: .ci/run proves it). ``hypothesis_api()`` does the same
for a module whose hypothesis properties sit beside tests that need NumPy alone."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect

import pytest


def installed(name: str) -> bool:
    """Whether module ``name`` can be found — without raising for a dotted name whose parent
    package is absent (``importlib.util.find_spec("dask.array")`` imports ``dask`` first, and
    raises ModuleNotFoundError when it is missing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package missing, or failing to import
        return False


def optional_module(name: str):
    """The module ``name`` when it imports, else None."""
    if not installed(name.partition(".")[0]):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def needs(*names: str):
    """A skip mark for a test that needs every library in ``names``."""
    missing = [name for name in names if not installed(name)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")


class _Absent:
    """Stands for hypothesis's strategies and health checks where hypothesis is not installed:
    every attribute, call, ``|`` and iteration gives a stand-in, so that a module's strategies
    (``st.integers(0, 5).map(tuple)``, ``@st.composite``, ``list(HealthCheck)``) still build."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())


def _given_absent(*strategies, **named):
    """``hypothesis.given`` where hypothesis is not installed: the test is collected, without
    the arguments hypothesis would have drawn (its fixtures and parameters stay), and skips
    saying why."""

    def decorate(test):
        parameters = [p for p in inspect.signature(test).parameters.values()
                      if p.name not in named]
        if strategies:  # positional strategies fill the rightmost parameters
            parameters = parameters[:-len(strategies)]

        def skipped(*args, **kwargs):
            pytest.skip("needs hypothesis (not installed)")

        functools.update_wrapper(skipped, test)  # its name, marks and (as __wrapped__) place
        skipped.__signature__ = inspect.Signature(parameters)  # the arguments pytest supplies
        return needs("hypothesis")(skipped)

    return decorate


def hypothesis_api():
    """``(given, settings, strategies, HealthCheck)``: hypothesis's own where it is installed;
    else stand-ins under which every ``@given`` test skips, "needs hypothesis (not
    installed)", and the module's other tests run."""
    if installed("hypothesis"):
        from hypothesis import HealthCheck, given, settings, strategies
        return given, settings, strategies, HealthCheck

    def settings(*args, **kwargs):
        return lambda test: test

    return _given_absent, settings, _Absent(), _Absent()
