"""Write docs/api.md from the installed package: every public name of ``arrayport`` with its
signature and the first line of its docstring, readable as plain Markdown (GitHub, an
editor), followed per section by the directives the documentation site renders in full.

    python scripts/api_summary.py           # rewrite docs/api.md
    python scripts/api_summary.py --check   # exit 1 when docs/api.md is not what it gives

The sections (which names, in which order) live here and nowhere else;
tests/test_docs_examples.py runs ``--check`` so the page cannot drift from the code, and
fails when a public name of ``arrayport.__all__`` is in no section.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "api.md"

# (title, names, their members shown: "all" public ones, or a tuple of names)
SECTIONS = [
    ("Making Views", ["view", "from_dlpack"]),
    ("Converting to a library's array", ["to_numpy", "to_torch", "to", "explain",
                                         "Explanation", "warn_on_copies"]),
    ("The View", ["View"]),
    ("Contracts for library authors", ["require", "Spec", "accepts"]),
    ("Types and devices", ["DType", "DTypeCode", "Device", "DeviceType"]),
    ("Streams and GPU drivers", ["set_implicit_sync", "implicit_sync_enabled",
                                 "no_implicit_sync", "release_device_memory"]),
    ("Across processes", ["SharedHandle", "empty_shared", "device_pickling",
                          "set_device_pickling"]),
    ("Errors and warnings", ["NeedsCopy", "RequirementError", "DriverUnavailable",
                             "TypeNotHeld", "CopyWarning", "ReadOnlySharedWarning", "errors"]),
    ("Building against arrayport", ["get_include", "DLPACK_VERSION", "MAX_NDIM",
                                    "__version__"]),
]

HEADER = """# API reference

Everything `import arrayport as ap` exports: each name's signature and what it does in one
line, then (on the documentation site) its full docstring. Generated from the package by
`scripts/api_summary.py`; `tests/test_docs_examples.py` fails when it is out of date.
"""


def first_line(obj) -> str:
    """The first sentence-line of ``obj``'s docstring, past a signature line Cython embeds."""
    doc = inspect.getdoc(obj) or ""
    lines = [line.strip() for line in doc.splitlines()]
    if lines and re.match(r"^[\w.]+\(.*\)(\s*->.*)?$", lines[0]):
        lines = lines[1:]
    text = []
    for line in lines:
        if not line:
            if text:
                break
            continue
        text.append(line)
    summary = " ".join(text)
    cut = re.search(r"(?<!e\.g\.)(?<!i\.e\.)(?<=\.)\s", summary)   # the first sentence
    return (summary[:cut.start()] if cut else summary).rstrip(":") or "(undocumented)"


def signature(name: str, obj) -> str:
    if not callable(obj) or isinstance(obj, type) and issubclass(obj, (BaseException,
                                                                       enum.Enum)):
        return name
    try:
        found = inspect.signature(obj)
    except (TypeError, ValueError):
        found = None
    if found is not None:   # shown without annotations: the stubs and docstrings have them
        plain = found.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                          for p in found.parameters.values()],
                              return_annotation=inspect.Signature.empty)
        return f"{name}{plain}"
    doc = (inspect.getdoc(obj) or "").splitlines()   # Cython's embedded signature line
    if doc and re.match(rf"^{re.escape(name)}\(", doc[0]):
        return doc[0]
    return name if inspect.isclass(obj) else f"{name}(...)"   # a class made by functions


def members(cls) -> list[tuple[str, object]]:
    found = []
    for member_name, member in vars(cls).items():
        if member_name.startswith("_") and member_name not in ("__dlpack__",
                                                              "__dlpack_device__"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if callable(member) or isinstance(member, property) or \
                type(member).__name__ == "getset_descriptor":
            found.append((member_name, member))
    return found


def directive(name: str, obj) -> str:
    qualified = f"arrayport.{name}"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return f".. autoexception:: {qualified}"
    if inspect.isclass(obj):
        extra = "   :members:\n"
        if issubclass(obj, enum.Enum):
            extra += "   :undoc-members:\n"
        if name == "View":
            extra += "   :special-members: __dlpack__, __dlpack_device__, __array__, __getitem__\n"
        return f".. autoclass:: {qualified}\n{extra.rstrip()}"
    if callable(obj):
        return f".. autofunction:: {qualified}"
    return f".. autodata:: {qualified}\n   :annotation:"


def render() -> str:
    import arrayport
    listed = set()
    out = [HEADER]
    for title, names in SECTIONS:
        out.append(f"## {title}\n")
        for name in names:
            obj = getattr(arrayport, name)
            listed.add(name)
            if inspect.ismodule(obj):
                out.append(f"- **`ap.{name}`** — {first_line(obj)}")
                continue
            if not callable(obj) and not inspect.isclass(obj):
                out.append(f"- **`ap.{name}`** = `{obj!r}`")
                continue
            out.append(f"- **`ap.{signature(name, obj)}`** — {first_line(obj)}")
            if inspect.isclass(obj) and not issubclass(obj, (BaseException, enum.Enum)):
                for member_name, member in members(obj):
                    shown = signature(member_name, member) if callable(member) else member_name
                    out.append(f"  - `.{shown}` — {first_line(member)}")
            if inspect.isclass(obj) and issubclass(obj, enum.Enum):
                out.append(f"  - members: {', '.join(f'`{m.name}`' for m in obj)}")
        out.append("")
        out.append("```{eval-rst}")
        out += [directive(name, getattr(arrayport, name)) for name in names
                if not inspect.ismodule(getattr(arrayport, name))]   # its classes are listed
        out.append("```\n")
    missing = sorted(set(arrayport.__all__) - listed)
    if missing:
        raise SystemExit(f"api_summary: public names in no section: {', '.join(missing)}")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail when docs/api.md is not what the package gives")
    args = parser.parse_args()
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            print("docs/api.md is out of date: run python scripts/api_summary.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
