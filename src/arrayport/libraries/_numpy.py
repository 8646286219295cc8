"""NumPy at run time: the ``arrayport.to`` target (``to_numpy``). Its cases for the command
and the tests: ``arrayport.libraries.cases._numpy``."""

from __future__ import annotations

from arrayport import _core


TARGETS = {"numpy": _core.to_numpy}
