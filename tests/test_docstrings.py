"""Every public name has a docstring (issue 21's rule, checked for what exists today): the
package's exports, their public methods and properties, and the arrayport.typing protocols.
``help(ap.view)`` must be useful on its own."""

import inspect
import re
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


# ---- numpydoc sections (the API reference renders them: docs/api.md) ------------------------

def public_callables():
    """(name, callable) of every public function and method, classes' constructors aside."""
    for name in ap.__all__:
        obj = getattr(ap, name)
        if inspect.ismodule(obj) or isinstance(obj, (int, tuple, str)):
            continue
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue
            for member_name, member in vars(obj).items():
                if member_name.startswith("_") or isinstance(member, property):
                    continue
                member = getattr(obj, member_name)
                if callable(member) and not isinstance(member, obj):   # not an enum member
                    yield f"{name}.{member_name}", member
        elif callable(obj):
            yield name, obj


def documented_parameters(doc):
    section = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[\w ]*\n-+\n|\Z)", doc, re.S | re.M)
    if not section:
        return set()
    names = set()
    for line in section.group(1).splitlines():
        if line and not line.startswith(" "):
            for part in line.split(":")[0].split(","):
                names.add(part.strip().lstrip("*"))
    return names


@pytest.mark.parametrize("name,function", list(public_callables()),
                         ids=[name for name, _ in public_callables()])
def test_public_callables_have_numpydoc_sections(name, function):
    doc = inspect.getdoc(function) or ""
    assert re.search(r"^Returns\n-+\n", doc, re.M), f"{name}: no Returns section"
    try:
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.name not in ("self", "cls")]
    except (TypeError, ValueError):
        parameters = []
    documented = documented_parameters(doc)
    missing = [p.name for p in parameters if p.name not in documented]
    assert not missing, f"{name}: parameters not in its Parameters section: {missing}"


def test_dir_shows_every_public_name_the_lazy_ones_included():
    # accepts and SharedHandle are imported on first use; tab completion must still see them
    shown = dir(ap)
    assert set(ap.__all__) <= set(shown)
    assert "accepts" in shown and "SharedHandle" in shown


def test_classes_a_user_constructs_show_their_parameters():
    # help() and inspect.signature read the compiled Spec's text signature: not "(...)"
    spec = inspect.signature(ap.Spec)
    assert list(spec.parameters)[:3] == ["dtype", "ndim", "shape"]
    assert all(p.kind is p.KEYWORD_ONLY for p in spec.parameters.values())
    assert spec.parameters["cast"].default is False
    shown = {name: p.default for name, p in spec.parameters.items()}
    assert ap.Spec(**shown) == ap.Spec()            # the names and defaults shown are real
    for cls in (ap.DType, ap.Device, ap.NeedsCopy):
        assert inspect.signature(cls).parameters, cls
