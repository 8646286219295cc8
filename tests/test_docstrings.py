"""Every public name has a docstring (issue 21's rule, checked for what exists today): the
package's exports, their public methods and properties, and the arrayport.typing protocols.
``help(ap.view)`` must be useful on its own."""

import inspect
import typing

import pytest

import arrayport as ap
import arrayport.typing as apt


def public_members(obj):
    for name, member in vars(obj).items():
        if not name.startswith("_"):
            yield name, member


def undocumented():
    missing = []
    for module, names in ((ap, ap.__all__), (apt, apt.__all__)):
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or isinstance(obj, (int, tuple, str)):
                continue
            if typing.get_origin(obj) is not None:
                continue   # a type alias (ArrayLike): documented in its module's docstring
            if not (inspect.getdoc(obj) or "").strip():
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj) and obj.__module__.startswith("arrayport"):
                for member_name, member in public_members(obj):
                    doc = (member.__doc__ if isinstance(member, property)
                           else inspect.getdoc(getattr(obj, member_name)))
                    if isinstance(getattr(obj, member_name), (int, str, tuple, float)):
                        continue
                    if not (doc or "").strip():
                        missing.append(f"{module.__name__}.{name}.{member_name}")
    return missing


def test_every_public_name_has_a_docstring():
    assert undocumented() == []


@pytest.mark.parametrize("function", [ap.view, ap.require, ap.from_dlpack, ap.to_numpy,
                                      ap.to_torch, ap.accepts])
def test_help_says_something_useful(function):
    doc = inspect.getdoc(function)
    assert len(doc) > 120, doc
