"""Rendering a matrix run for people: the terminal table and Markdown (the HTML report is in
:mod:`arrayport.cli.html_report`). Both show the same two things: per producer and consumer
pair, how much works directly and through arrayport; then every crash and wrong result."""

from __future__ import annotations

import textwrap

MARKS = {"crashed": "✗", "wrong": "!"}
COLUMNS = ["producer → consumer", "direct", "zero-copy", "✗ crash", "! wrong", "µs",
           "arrayport", "zero-copy", "✗ crash", "! wrong", "µs"]


def _percent(part: int, whole: int) -> str:
    return f"{100 * part // whole}%" if whole else "-"


def _micros(ns) -> str:
    return "-" if ns is None else f"{ns / 1000:.2f}"


def pair_rows(report: dict) -> list[list[str]]:
    """One row per pair, in the order producers and consumers were found."""
    medians = _pair_medians(report["routes"])
    rows = []
    for pair in report["pairs"]:
        row = [f"{pair['producer']} → {pair['consumer']}"]
        for side in ("direct", "arrayport"):
            counts = pair[side]
            if not counts["cases"]:
                row += ["no route", "", "", "", ""]
                continue
            row += [_percent(counts["works"], counts["cases"]),
                    _percent(counts["zero-copy"], counts["cases"]),
                    str(counts["crashed"] or ""), str(counts["wrong"] or ""),
                    _micros(medians.get((pair["producer"], pair["consumer"], side)))]
        rows.append(row)
    return rows


def _pair_medians(routes: list[dict]) -> dict:
    """The fastest direct route's median, and the arrayport route's, per pair."""
    best: dict[tuple, int] = {}
    for route in routes:
        if route["median_ns"] is None:
            continue
        side = "arrayport" if route["route"] == "arrayport" else "direct"
        key = (route["producer"], route["consumer"], side)
        best[key] = min(best.get(key, route["median_ns"]), route["median_ns"])
    return best


def finding_lines(report: dict) -> list[str]:
    lines = []
    for finding in sorted(report["findings"], key=lambda f: (f["status"] != "crashed",
                                                              f["producer"], f["consumer"])):
        dtypes = finding["dtypes"]
        dtype_text = ", ".join(dtypes) if len(dtypes) <= 3 else f"{len(dtypes)} dtypes"
        mark = MARKS.get(finding["status"], "?")
        lines.append(f"{mark} {finding['producer']} → {finding['consumer']} via "
                     f"{finding['route']} [{', '.join(finding['layouts'])}; {dtype_text}]: "
                     f"{finding['detail']}")
    return lines


def header_lines(report: dict) -> list[str]:
    meta = report["meta"]
    exercised = [f"{lib['name']} {lib['version']}" for lib in meta["libraries"]
                 if lib["exercised"]]
    others = [f"{lib['name']} ({lib['note']})" for lib in meta["libraries"]
              if not lib["exercised"]]
    lines = [f"arrayport matrix — arrayport {meta['arrayport']} (DLPack {meta['dlpack']}), "
             f"Python {meta['python']}: {len(report['cells'])} cells in "
             f"{report['seconds']} s",
             f"exercised: {', '.join(exercised)}"]
    if others:
        lines.append(f"not exercised: {'; '.join(others)}")
    lines.append(f"{len(meta['dtypes'])} dtypes × {len(meta['layouts'])} layouts "
                 f"({', '.join(meta['layouts'])})")
    return lines


LEGEND = ("direct: % of the cases (dtype × layout) the producer can make that the consumer's "
          "own entry points take (best protocol per case); arrayport: the same through "
          "arrayport (ap.to / ap.view). ✗ crash / ! wrong: cases where some route killed the "
          "process or gave wrong data (shape, dtype, values, or a writable alias of "
          "read-only memory). µs: median per exchange of the fastest route.")


def unusual_lines(report: dict) -> list[str]:
    """One line per unusual kind: how its exchanges ended, directly and through arrayport,
    and which direct routes crashed or gave wrong data."""
    lines = []
    for entry in report.get("unusual") or []:
        sides = []
        for side in ("direct", "arrayport"):
            counts = entry[side]
            parts = [f"{counts[status]} {status}" for status in
                     ("zero-copy", "copy", "refused", "crashed", "wrong") if counts[status]]
            sides.append(f"{side}: {', '.join(parts) or 'no route'}")
        lines.append(f"{entry['kind']:<32} {sides[0]}  │  {sides[1]}")
        lines += [f"    {MARKS.get(bad.split(': ')[1].split(' ')[0], '?')} {bad}"
                  for bad in entry["bad_direct"] + entry["bad_arrayport"]]
    return lines


UNUSUAL_LEGEND = ("Unusual arrays (arrayport.cli.unusual: conjugate/negative/grad/sparse/meta "
                  "tensors, deleted or sharded JAX arrays, NumPy broadcasts and masked arrays, "
                  "Arrow nulls…) into every consumer route, judged against the producer's own "
                  "resolved values; an array with no faithful strided form must be refused.")


def render_text(report: dict) -> str:
    rows = [COLUMNS] + pair_rows(report)
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    out = header_lines(report) + [""] + textwrap.wrap(LEGEND, 100) + [""]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i])
                                              for i in range(1, len(row))]
        out.append("  ".join(cells[:6]) + "  │  " + "  ".join(cells[6:]))
        if index == 0:
            out.append("─" * len(out[-1]))
    lines = finding_lines(report)
    out += ["", f"Crashes and wrong data ({len(lines)}):" if lines else "No crashes, no wrong data."]
    out += [f"  {line}" for line in lines]
    unusual = unusual_lines(report)
    if unusual:
        out += ["", *textwrap.wrap(UNUSUAL_LEGEND, 100), ""] + [f"  {line}" for line in unusual]
    out += [f"  {line}" for line in library_lines(report)]
    return "\n".join(out) + "\n"


def library_lines(report: dict) -> list[str]:
    """Libraries left out of the run, and those that had to be imported first."""
    return ([f"library {name} left out: {why}"
             for name, why in (report.get("libraries_broken") or {}).items()]
            + [f"library {name} {why}"
               for name, why in (report.get("libraries_reordered") or {}).items()])


def render_markdown(report: dict) -> str:
    out = [f"### {header_lines(report)[0]}", ""] + [f"- {line}" for line in
                                                    header_lines(report)[1:]]
    out += ["", LEGEND, ""]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|")
    for row in pair_rows(report):
        out.append("| " + " | ".join(row) + " |")
    lines = finding_lines(report)
    out += ["", f"**Crashes and wrong data ({len(lines)})**", ""]
    out += [f"- {line}" for line in lines] or ["- none"]
    unusual = unusual_lines(report)
    if unusual:
        out += ["", "**Unusual arrays**", "", UNUSUAL_LEGEND, "", "```"] + unusual + ["```"]
    libraries = library_lines(report)
    if libraries:
        out += ["", "**Libraries**", ""] + [f"- {line}" for line in libraries]
    return "\n".join(out) + "\n"
