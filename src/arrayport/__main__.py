"""``arrayport`` / ``python -m arrayport``: what arrayport sees, the interop matrix of the
array libraries installed (``matrix``), and a DLPack conformance run against any array
library (``check``)."""

from __future__ import annotations

import argparse
import json
import platform
import sys

from arrayport.cli.libraries import LIBRARIES, exercisable, installed


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


def _info(args) -> int:
    import arrayport

    major, minor = arrayport.DLPACK_VERSION
    print(f"arrayport {arrayport.__version__} (DLPack {major}.{minor}, Python "
          f"{sys.version.split()[0]})")
    print(f"C headers: {arrayport.get_include()}")
    print("array libraries:")
    versions = dict((library.name, version) for library, version in installed())
    for library in LIBRARIES:
        if not library.variant:   # torch-cuda, jax-gpu: the matrix's records, one library
            print(f"  {library.name:<18} {versions.get(library.name, '-')}")
    from arrayport.gpu import driver_status
    print("GPU drivers (View.copy, stream ordering):")
    for vendor, status in driver_status():
        print(f"  {vendor:<18} {status}")
    if getattr(args, "internals", False):   # tuning detail, not a newcomer's first screen
        _print_copy_kernel()
    print("\nnext: `arrayport matrix` (what works between them) or `arrayport check numpy`")
    return 0


def _print_copy_kernel() -> None:
    from arrayport._core import copy_kernel
    kernel = copy_kernel()
    caches = ", ".join(f"{name} {kernel[name] >> 10} KiB" for name in ("l1d", "l2", "llc"))
    print(f"host copy kernel: {kernel['path']} path (CPU runs {', '.join(kernel['paths'])}; "
          f"ARRAYPORT_COPY_PATH to force one)\n  sized from {caches}: bands of "
          f"{kernel['band_lines']} source lines, streaming stores from "
          f"{kernel['streaming_bytes'] >> 20} MiB (ARRAYPORT_COPY_STREAMING_BYTES); up to "
          f"{kernel['threads']} thread(s) (ARRAYPORT_NUM_THREADS), "
          f"{kernel['thread_bytes'] >> 20} MiB each at least (ARRAYPORT_COPY_THREAD_BYTES); "
          f"huge pages from {kernel['huge_page_bytes'] >> 20} MiB (ARRAYPORT_HUGE_PAGE_BYTES)")


def _why_not_exercised(library) -> str:
    if library.make is None:
        return ""
    if not exercisable(library):
        return "CUDA memory, and no CUDA driver answers here"
    return "not asked for"


def _meta(exercised: list[str], dtypes: list[str], layouts: list[str],
          unavailable: dict[str, str] | None = None) -> dict:
    """The report's header: versions, and each installed library exercised or why not
    (``unavailable``: the libraries the run found could not run here, and why)."""
    import arrayport

    unavailable = unavailable or {}
    libraries = []
    for library, version in installed():
        if library.name == "arrayport":
            version = arrayport.__version__
        libraries.append({"name": library.name, "version": version,
                          "exercised": library.name in exercised
                          and library.name not in unavailable,
                          "note": unavailable.get(library.name) or library.note
                          or _why_not_exercised(library)})
    return {"arrayport": arrayport.__version__,
            "dlpack": "%d.%d" % arrayport.DLPACK_VERSION,
            "python": platform.python_version(), "platform": platform.platform(),
            "libraries": libraries, "dtypes": dtypes, "layouts": layouts}


class _ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.last = -1

    def __call__(self, done: int, total: int, case: dict) -> None:
        if not self.enabled:
            return
        permille = 1000 * done // max(total, 1)
        if permille == self.last and done != total:
            return
        self.last = permille
        filled = 30 * done // max(total, 1)
        label = f"{case['producer']} → {case['consumer']} {case['route']} {case['dtype']}"
        sys.stderr.write(f"\r[{'█' * filled}{'░' * (30 - filled)}] {done}/{total} "
                         f"{label[:40]:<40}")
        if done == total:
            sys.stderr.write("\r" + " " * 100 + "\r")
        sys.stderr.flush()


def _matrix(args) -> int:
    from arrayport.cli import html_report, matrix, report
    from arrayport.libraries import samples

    available = [library.name for library, _ in installed() if exercisable(library)]
    libraries = _split(args.libraries) or available
    unknown = [name for name in libraries if name not in available]
    if unknown:
        print(f"arrayport matrix: not installed or not exercised: {', '.join(unknown)} "
              f"(can use: {', '.join(available)})", file=sys.stderr)
        return 2
    dtypes = _split(args.dtypes) or samples.available_dtypes()
    layouts = _split(args.layouts) or list(samples.LAYOUTS)
    bad = [d for d in dtypes if d not in samples.available_dtypes()] + \
          [layout for layout in layouts if layout not in samples.LAYOUTS]
    if bad:
        print(f"arrayport matrix: unknown dtype or layout: {', '.join(bad)} (dtypes: "
              f"{', '.join(samples.available_dtypes())}; layouts: "
              f"{', '.join(samples.LAYOUTS)})", file=sys.stderr)
        return 2
    result = matrix.run(libraries, dtypes, layouts, progress=_ProgressBar(not args.no_progress),
                        case_timeout=args.case_timeout)
    result["meta"] = _meta(libraries, dtypes, layouts, result["libraries_unavailable"])
    if args.html:
        with open(args.html, "w", encoding="utf-8") as out:
            out.write(html_report.render_html(result))
    render = {"text": report.render_text, "markdown": report.render_markdown,
              "html": html_report.render_html,
              "json": lambda r: json.dumps(r, indent=1) + "\n"}[args.format]
    sys.stdout.write(render(result))
    if args.html:
        print(f"HTML report: {args.html}", file=sys.stderr)
    return 0


def _check(args) -> int:
    from arrayport.cli import check

    try:
        results = check.run(args.target, case_timeout=args.case_timeout)
    except check.TargetError as exc:
        print(f"arrayport check: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(results, indent=1) + "\n")
    else:
        sys.stdout.write(check.render_text(results))
    return 1 if results["summary"]["fail"] else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arrayport",
        description="arrayport moves arrays between Python libraries (DLPack, the CUDA Array "
                    "Interface, NumPy's protocols). Without a command it prints what it sees.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    i = commands.add_parser("info", help="versions and the array libraries installed (default)")
    i.add_argument("--internals", action="store_true",
                   help="also the host copy kernel's path and sizes (for tuning)")

    m = commands.add_parser(
        "matrix", help="try every producer × consumer × protocol × dtype × layout",
        description="For every pair of installed array libraries, every protocol the consumer "
                    "reads and every dtype and layout class, exchange an array directly and "
                    "through arrayport, each case in an isolated process: zero-copy, copy, "
                    "refused (with the error), crashed or wrong data, and the median time.")
    m.add_argument("--libraries", help="comma-separated subset (default: all installed)")
    m.add_argument("--dtypes", help="comma-separated subset (default: all)")
    m.add_argument("--layouts", help="comma-separated subset of: contiguous, transposed, "
                                     "sliced, negative, 0-d, size-0, read-only")
    m.add_argument("--format", choices=["text", "json", "markdown", "html"], default="text",
                   help="what to print on stdout (default: a table)")
    m.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report "
                                                  "with heat maps to FILE")
    m.add_argument("--case-timeout", type=float, default=60.0, metavar="S",
                   help="seconds before a hanging case is killed and reported (default 60)")
    m.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    c = commands.add_parser(
        "check", help="DLPack conformance of an array library (module or module:factory)",
        description="Test TARGET as a DLPack producer and consumer and its array interface and "
                    "buffer exports, against the clauses of the specifications. TARGET is a "
                    "module (numpy, arrayport, any library of `arrayport info`, "
                    "or any module with asarray/from_dlpack) or module:factory, a callable that "
                    "takes a NumPy array and returns the library's array of it. Exits 1 when a "
                    "check fails.")
    c.add_argument("target")
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.add_argument("--case-timeout", type=float, default=60.0, metavar="S")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {None: _info, "info": _info, "matrix": _matrix, "check": _check}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
