"""Rendering a matrix run for people: the terminal table and Markdown (the HTML report is in
:mod:`arrayport.cli.html_report`). Both show the same two things: per producer and consumer
pair, how much works directly and through arrayport; then every crash and wrong result."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

MARKS = {"crashed": "✗", "wrong": "!"}
COLUMNS = ["producer → consumer", "direct", "zero-copy", "✗ crash", "! wrong", "µs",
           "arrayport", "zero-copy", "✗ crash", "! wrong", "µs"]
SIDES = ("direct", "arrayport")


def percent(part: int, whole: int) -> str:
    """The one rounding rule for every format (text, Markdown, HTML): half up, on integers
    (so 117/200 is 59% everywhere, not 58% by float error or banker's rounding), except that
    only all is 100% and only nothing is 0% — a reader must never take 199/200 for
    "everything works" or 1/300 for "nothing does"."""
    if not whole:
        return "-"
    rounded = (200 * part + whole) // (2 * whole)
    if 0 < part < whole:
        rounded = min(max(rounded, 1), 99)
    return f"{rounded}%"


def _micros(ns) -> str:
    return "-" if ns is None else f"{ns / 1000:.2f}"


@dataclass(frozen=True)
class Cell:
    """One side (direct, or through arrayport) of one producer → consumer pair: every number,
    colour and tooltip of that square, in every format, comes from this one record, so they
    cannot disagree. Each case (dtype × layout) counts once, by the best route for it:
    zero_copy + copy + refused + failed == cases. ``crashed`` and ``wrong`` are not part of
    that split: they count cases where *some* route of this side crashed or gave wrong data,
    even if another route works — the hazard a user picking that route runs into."""

    producer: str
    consumer: str
    side: str
    cases: int = 0
    zero_copy: int = 0
    copy: int = 0
    refused: int = 0        # every route refused cleanly: a deliberate no
    failed: int = 0         # nothing worked, and not cleanly: a crash, wrong data, tool error
    crashed: int = 0
    wrong: int = 0
    median_ns: int | None = None
    reasons: tuple[tuple[str, int], ...] = ()   # refusal messages, most frequent first

    @classmethod
    def from_counts(cls, producer: str, consumer: str, side: str, counts: dict,
                    median_ns: int | None = None) -> "Cell":
        works = counts["works"]
        # Reports written before clean refusals were counted have no "refused": their
        # non-working cases stay failures rather than being guessed deliberate.
        refused = counts.get("refused", 0)
        reasons = sorted((counts.get("reasons") or {}).items(), key=lambda item: -item[1])
        return cls(producer, consumer, side, cases=counts["cases"],
                   zero_copy=counts["zero-copy"], copy=works - counts["zero-copy"],
                   refused=refused, failed=counts["cases"] - works - refused,
                   crashed=counts["crashed"], wrong=counts["wrong"], median_ns=median_ns,
                   reasons=tuple(reasons))

    @property
    def works(self) -> int:
        return self.zero_copy + self.copy

    @property
    def works_pct(self) -> str:
        return percent(self.works, self.cases)

    @property
    def zero_copy_pct(self) -> str:
        return percent(self.zero_copy, self.cases)

    @property
    def hazard(self) -> bool:
        return bool(self.crashed or self.wrong)

    @property
    def verdict(self) -> str:
        """The square's class, from best to worst; a hazard is marked on top of it."""
        if not self.cases:
            return "none"
        if self.zero_copy == self.cases:
            return "zero-copy"
        if self.works == self.cases:
            return "copy"
        if self.works:
            return "partial"
        return "failed" if self.failed else "refused"

    @property
    def own_limitation(self) -> bool:
        """A library with its own arrays, through its own entry points (numpy → numpy,
        direct): what goes wrong there is the library's own limitation, not an exchange's."""
        return self.side == "direct" and self.producer == self.consumer

    @property
    def hazard_marks(self) -> str:
        return " ".join(f"{MARKS[status]}{count}" for status, count in
                        (("crashed", self.crashed), ("wrong", self.wrong)) if count)

    def tooltip(self) -> str:
        where = "direct (best route per case)" if self.side == "direct" else "through arrayport"
        head = f"{self.producer} → {self.consumer}, {where}: "
        if not self.cases:
            return head + "no route"
        text = (f"{head}{self.works} of {self.cases} cases work ({self.works_pct}): "
                f"{self.zero_copy} zero-copy ({self.zero_copy_pct}), {self.copy} by copy; "
                f"{self.refused} refused cleanly; {self.failed} fail")
        if self.hazard:
            text += (f". On some route of this side {self.crashed} cases crash and "
                     f"{self.wrong} give wrong data")
            if self.own_limitation:
                text += f" ({self.producer}'s own limitation: its own arrays, its own entry points)"
        if self.reasons:
            text += f". Refused because: {self.reasons[0][0]}"
            if len(self.reasons) > 1:
                text += f" (and {len(self.reasons) - 1} other reasons)"
        return text


def cell_records(report: dict) -> dict[tuple[str, str, str], Cell]:
    """Every pair's two records, (producer, consumer, side) -> Cell, in report order."""
    medians = _pair_medians(report["routes"])
    return {(pair["producer"], pair["consumer"], side):
            Cell.from_counts(pair["producer"], pair["consumer"], side, pair[side],
                             medians.get((pair["producer"], pair["consumer"], side)))
            for pair in report["pairs"] for side in SIDES}


def pair_rows(report: dict, records: dict | None = None) -> list[list[str]]:
    """One row per pair, in the order producers and consumers were found."""
    records = records if records is not None else cell_records(report)
    rows = []
    for pair in report["pairs"]:
        row = [f"{pair['producer']} → {pair['consumer']}"]
        for side in SIDES:
            cell = records[(pair["producer"], pair["consumer"], side)]
            if not cell.cases:
                row += ["no route", "", "", "", ""]
                continue
            row += [cell.works_pct, cell.zero_copy_pct, str(cell.crashed or ""),
                    str(cell.wrong or ""), _micros(cell.median_ns)]
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


def own_limitation(finding: dict) -> bool:
    """A finding of a library with its own arrays through its own entry points."""
    return finding["route"] != "arrayport" and finding["producer"] == finding["consumer"]


def refusal_lines(records: dict) -> list[str]:
    """Every deliberate refusal and why, readable without a tooltip: one line per side and
    reason, naming the pairs it answers and how many cases."""
    grouped: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for (producer, consumer, side), cell in records.items():
        for reason, count in cell.reasons:
            grouped.setdefault((side, reason), []).append((f"{producer} → {consumer}", count))
    lines = []
    for (side, reason), pairs in grouped.items():
        where = "direct" if side == "direct" else "through arrayport"
        cases = sum(count for _pair, count in pairs)
        names = ", ".join(pair for pair, _count in pairs)
        lines.append(f"{where}, {names} ({cases} case{'s' if cases != 1 else ''}): {reason}")
    return lines


def finding_lines(report: dict) -> list[str]:
    lines = []
    for finding in sorted(report["findings"], key=lambda f: (f["status"] != "crashed",
                                                              f["producer"], f["consumer"])):
        dtypes = finding["dtypes"]
        dtype_text = ", ".join(dtypes) if len(dtypes) <= 3 else f"{len(dtypes)} dtypes"
        mark = MARKS.get(finding["status"], "?")
        own = f" ({finding['producer']}'s own limitation)" if own_limitation(finding) else ""
        lines.append(f"{mark} {finding['producer']} → {finding['consumer']} via "
                     f"{finding['route']}{own} [{', '.join(finding['layouts'])}; "
                     f"{dtype_text}]: {finding['detail']}")
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
