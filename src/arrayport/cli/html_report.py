"""The matrix as a self-contained HTML page (no scripts, no external files): a guide to
reading it and what to do, an overview heat map (producers × consumers, each square split
into direct | through arrayport, filled by how its cases split between zero-copy, copy,
clean refusal and failure, framed where some route crashes or gives wrong data), one map per
pair (dtype × layout, coloured by outcome), and the crashes and wrong results. Every square
has a tooltip with the exact outcome; the overview's come from the same record
(:class:`arrayport.cli.report.Cell`) as its colours and numbers."""

from __future__ import annotations

from html import escape

from .report import (LEGEND, SIDES, Cell, cell_records, finding_lines, header_lines,
                     library_lines, pair_rows, refusal_lines, COLUMNS)

# One palette for the overview and the per-pair maps. Working by copy is hatched as well as
# lighter, so it stays apart from zero-copy in grey print and for colour-blind readers; a
# clean refusal is slate, not red: it is a deliberate answer, not a failure.
ZERO_COPY, COPY, REFUSED, FAILED = "#1a9641", "#a6d96a", "#8da0b8", "#d73027"
COPY_FILL = "url(#copy-hatch)"
HAZARD = "#67000d"
OWN = "#8c6d31"          # the frame of a library's own limitation (dashed)
PAGE_WIDTH = 1352        # widest figure: a 1,400 px window less the page's margins
STATUS_COLOURS = {"zero-copy": ZERO_COPY, "copy": COPY, "refused": REFUSED,
                  "wrong": "#f46d43", "crashed": HAZARD, "tool-error": "#7b3294"}
STATUS_FILLS = {**STATUS_COLOURS, "copy": COPY_FILL}
NO_CASE = "#f4f4f4"

# Defined once per page: inline SVGs share the document's ids, so every map can use it.
PATTERNS = (f'<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
            f'<pattern id="copy-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{COPY}"/>'
            f'<rect width="2" height="6" fill="{ZERO_COPY}" opacity="0.55"/></pattern>'
            f'</defs></svg>')
# The same hatch for the HTML legend's swatches.
COPY_CSS = f"repeating-linear-gradient(45deg, {COPY} 0 3px, #74b95a 3px 5px)"


def _rect(x, y, w, h, fill, tip="", extra="") -> str:
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" {extra}>{title}</rect>'


def _text(x, y, text, size=12, anchor="middle", extra="") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" {extra}>'
            f"{escape(text)}</text>")


def _segments(cell: Cell) -> list[tuple[int, str]]:
    """The square's fill, left to right: how its cases split between zero-copy, copy, clean
    refusal and failure — the same four numbers its text and tooltip give."""
    return [(count, fill) for count, fill in ((cell.zero_copy, ZERO_COPY),
                                              (cell.copy, COPY_FILL),
                                              (cell.refused, REFUSED), (cell.failed, FAILED))
            if count]


def cell_svg(cell: Cell, x: float, y: float, w: float, h: float) -> str:
    """One half-square of the overview, all from ``cell``: its class (verdict, and "hazard"
    when some route crashes or gives wrong data), fill, text and tooltip."""
    classes = f"cell {cell.verdict}" + (" hazard" if cell.hazard else "")
    parts = [f'<g class="{classes}" data-works="{cell.works_pct}" '
             f'data-zero-copy="{cell.zero_copy_pct}"><title>{escape(cell.tooltip())}</title>']
    if not cell.cases:
        parts += [_rect(x, y, w, h, NO_CASE), _text(x + w / 2, y + h / 2 + 4, "no route", 11,
                                                     extra='fill="#777"')]
        return "".join(parts + ["</g>"])
    left = x
    for count, fill in _segments(cell):
        width = w * count / cell.cases
        parts.append(_rect(round(left, 2), y, round(width, 2), h, fill))
        left += width
    if cell.hazard:  # a thick dark-red frame: some route here kills the process or lies
        frame = (f'stroke="{OWN}" stroke-width="4" stroke-dasharray="7 4"' if cell.own_limitation
                 else f'stroke="{HAZARD}" stroke-width="4"')
        parts.append(_rect(x + 2, y + 2, w - 4, h - 4, "none", extra=frame))
    # The numbers on a white label, legible over any fill.
    lines = [(cell.works_pct, 17, 'font-weight="bold"'),
             (f"{cell.zero_copy_pct} zero-copy", 11, "")]
    if cell.works == 0:
        lines[1] = ("refused" if cell.verdict == "refused" else "fails", 11, "")
    if cell.hazard:
        marks = cell.hazard_marks + (" its own" if cell.own_limitation else "")
        lines.append((marks, 11, f'fill="{OWN if cell.own_limitation else HAZARD}" '
                                 f'font-weight="bold"'))
    box_h = 8 + sum(size + 3 for _text_, size, _extra in lines)
    box_y = y + (h - box_h) / 2
    parts.append(_rect(x + 5, round(box_y, 2), w - 10, box_h, "white",
                       extra='opacity="0.88" rx="4"'))
    line_y = box_y + 4
    for content, size, extra in lines:
        line_y += size + 1
        parts.append(_text(x + w / 2, round(line_y, 2), content, size, extra=extra))
        line_y += 2
    return "".join(parts + ["</g>"])


_HALF, _GAP = 92, 8


def overview_svg(report: dict, records: dict | None = None) -> str:
    """The heat map, producers × consumers, as one SVG per block of consumers that fits
    ``PAGE_WIDTH`` (no column is cut on a 1,400 px screen or a printout)."""
    records = records if records is not None else cell_records(report)
    producers = list(dict.fromkeys(p["producer"] for p in report["pairs"]))
    consumers = list(dict.fromkeys(p["consumer"] for p in report["pairs"]))
    left = 24 + 8 * max(len(name) for name in producers + ["producer ↓"])
    per_block = max(1, (PAGE_WIDTH - left - 10) // (2 * _HALF + _GAP))
    return "".join(_overview_block(producers, consumers[i:i + per_block], left, records)
                   for i in range(0, len(consumers), per_block))


def _overview_block(producers: list[str], consumers: list[str], left: int,
                    records: dict) -> str:
    half, height_, gap = _HALF, 84, _GAP
    cell = 2 * half + gap
    top = 74
    width, height = left + cell * len(consumers) + 10, top + height_ * len(producers) + 14
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="interop heat map" font-family="sans-serif">',
             _text(left + cell * len(consumers) / 2, 16, "consumer →", 14),
             _text(8, top - 10, "producer ↓", 14, "start")]
    for j, consumer in enumerate(consumers):
        x = left + j * cell
        parts.append(_text(x + half, top - 32, consumer, 14, extra='font-weight="bold"'))
        parts.append(_text(x + half / 2, top - 10, "direct", 12, extra='fill="#444"'))
        parts.append(_text(x + 3 * half / 2, top - 10, "via arrayport", 12,
                           extra='fill="#444"'))
    for i, producer in enumerate(producers):
        y = top + i * height_
        parts.append(_text(left - 10, y + height_ / 2 + 5, producer, 14, "end",
                           'font-weight="bold"'))
        for j, consumer in enumerate(consumers):
            x = left + j * cell
            for k, side in enumerate(SIDES):
                record = records.get((producer, consumer, side)) or Cell(producer, consumer,
                                                                         side)
                parts.append(cell_svg(record, x + k * half, y, half - 2, height_ - 4))
    parts.append("</svg>")
    return "".join(parts)


def pair_svg(report: dict, producer: str, consumer: str, dtypes: list[str],
             layouts: list[str], outcomes: dict) -> str:
    """dtype rows × layout columns; each square's left half the best direct outcome, its right
    half the arrayport outcome. The margins grow with the longest label, and the column
    heads are turned 45°, so no label is clipped however long."""
    cell, size = 26, 12
    char = 0.62 * size  # a sans-serif character's typical width, to size the margins
    left = 10 + char * max(len(d) for d in dtypes)
    top = 12 + 0.71 * char * max(len(layout) for layout in layouts)
    width = left + cell * len(layouts) + 0.71 * char * len(layouts[-1]) + 6
    height = top + cell * len(dtypes) + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{round(width)}" '
             f'height="{round(height)}" font-family="sans-serif" overflow="visible">']
    for j, layout in enumerate(layouts):
        x = left + j * cell + cell / 2
        parts.append(_text(round(x, 1), round(top - 6, 1), layout, size, "start",
                           f'transform="rotate(-45 {round(x, 1)} {round(top - 6, 1)})"'))
    for i, dtype in enumerate(dtypes):
        y = top + i * cell
        parts.append(_text(round(left - 5, 1), round(y + cell / 2 + 4, 1), dtype, size, "end"))
        for j, layout in enumerate(layouts):
            x = left + j * cell
            for k, side in enumerate(("direct", "arrayport")):
                status, detail = outcomes.get((producer, consumer, dtype, layout, side),
                                              ("not offered", ""))
                tip = f"{producer} → {consumer}, {dtype}, {layout}, {side}: {status}"
                if detail:
                    tip += f" — {detail}"
                # The halves touch; a 3-pixel gap parts one case from the next.
                parts.append(_rect(round(x + k * cell / 2, 1), round(y, 1),
                                   cell / 2 - 3 * k, cell - 3,
                                   STATUS_FILLS.get(status, NO_CASE), tip))
    parts.append("</svg>")
    return "".join(parts)


# Which direct outcome a pair's square shows when several routes were tried: the worst
# hazard first (a user can hit it), then the best working outcome.
_DIRECT_ORDER = ["crashed", "wrong", "zero-copy", "copy", "refused", "tool-error"]


def _outcomes(cells: list[dict]) -> dict:
    outcomes: dict[tuple, tuple[str, str]] = {}
    for cell in cells:
        side = "arrayport" if cell["route"] == "arrayport" else "direct"
        key = (cell["producer"], cell["consumer"], cell["dtype"], cell["layout"], side)
        detail = f"{cell['route']}: {cell.get('detail', '')}".rstrip(": ")
        current = outcomes.get(key)
        if current is None or (_DIRECT_ORDER.index(cell["status"]) <
                               _DIRECT_ORDER.index(current[0])):
            outcomes[key] = (cell["status"], detail)
    return outcomes


def _swatch(background: str, label: str, frame: str = "#999") -> str:
    return (f'<span class="key"><span class="swatch" style="background:{background};'
            f'border-color:{frame}"></span>{escape(label)}</span>')


def _overview_legend() -> str:
    return ('<p class="legend">' + "".join([
        _swatch(ZERO_COPY, "works, zero-copy"), _swatch(COPY_CSS, "works by copy (hatched)"),
        _swatch(REFUSED, "refused cleanly: a deliberate no (every reason is listed under the map)"),
        _swatch(FAILED, "fails: no route works, something crashed or gave wrong data"),
        _swatch("white", "dark-red frame: some route crashes (✗n) or gives wrong data (!n)",
                HAZARD),
        _swatch("white", "dashed brown frame (\"its own\"): the same, for a library with its "
                         "own arrays through its own entry points — its own limitation, not an "
                         "exchange's", OWN),
        _swatch(NO_CASE, "no route")]) + "</p>")


def _legend() -> str:
    names = {"copy": "copy (hatched)", "refused": "refused cleanly"}
    swatches = "".join(_swatch(COPY_CSS if name == "copy" else colour, names.get(name, name))
                       for name, colour in STATUS_COLOURS.items() if name != "tool-error")
    return f'<p class="legend">{swatches}{_swatch(NO_CASE, "not offered by the producer")}</p>'


def arrayport_call(consumer: str) -> str:
    """How a user reaches ``consumer`` through arrayport (the matrix's arrayport route): its
    adapter's ``ARRAYPORT_CALL``, else ``ap.to`` with its first target, else ``ap.view``."""
    from arrayport.libraries import by_name
    try:
        library = by_name(consumer)
    except KeyError:
        return f'ap.to(x, "{consumer}")'
    call = library.get("ARRAYPORT_CALL")
    if call is not None:
        return call
    return f'ap.to(x, "{library.targets[0]}")' if library.targets else "ap.view(x)"


def advice(report: dict, records: dict) -> list[str]:
    """What the reader should do, one line per consumer, from the same records the map
    shows: the producers whose direct routes crash, give wrong data, take fewer cases than
    arrayport's route or do not exist — use arrayport's route; then where arrayport refuses
    on purpose, and why."""
    switch: dict[str, list[str]] = {}
    no_route: dict[str, list[str]] = {}
    refusals: dict[tuple[str, str], list[str]] = {}
    for pair in report["pairs"]:
        producer, consumer = pair["producer"], pair["consumer"]
        direct, via = (records[(producer, consumer, side)] for side in SIDES)
        if via.cases and via.works and not via.hazard:
            if direct.hazard:
                switch.setdefault(consumer, []).append(f"{producer} ({direct.hazard_marks})")
            elif not direct.cases:
                no_route.setdefault(consumer, []).append(producer)
            elif direct.works * via.cases < via.works * direct.cases:
                switch.setdefault(consumer, []).append(
                    f"{producer} ({direct.works_pct} → {via.works_pct})")
        if via.verdict == "refused" and via.reasons:
            refusals.setdefault((producer, via.reasons[0][0]), []).append(consumer)
    lines = [f"into {consumer} from {', '.join(producers)}: use {arrayport_call(consumer)}"
             for consumer, producers in switch.items()]
    lines += [f"into {consumer}, which has no direct route from {', '.join(producers)}: use "
              f"{arrayport_call(consumer)}" for consumer, producers in no_route.items()]
    lines += [f"{producer} into {', '.join(consumers)}: arrayport refuses on purpose — {reason}"
              for (producer, reason), consumers in refusals.items()]
    return lines


def _guide(report: dict, records: dict) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in advice(report, records))
    return f"""<div class="guide">
<p><b>How to read it.</b> Each consumer column has two halves: <b>direct</b> (the consumer's
own entry points — DLPack, the array interface, the buffer protocol, <code>__array__</code> —
the best one per case) and <b>via arrayport</b>. The big number is the share of cases
(dtype × layout) that work; under it, the share that is zero-copy. The fill shows the same
split: dark green zero-copy, hatched light green by copy, slate refused on purpose, red
failing.</p>
<p><b>What to do.</b> Where the direct half is red, has a dark-red frame, or works less than
the arrayport half, use arrayport's route: <code>ap.to(x, "&lt;consumer&gt;")</code> (or
<code>ap.view(x)</code> to keep it zero-copy or fail). Hatched works but copies: correct, at
the cost of memory and time — the per-pair maps below show which dtypes and layouts copy.
Slate is a deliberate refusal (a lazy Dask array must be computed first; a type the consumer
cannot hold): every reason is listed under the map.</p>
<p><b>In this run</b> (✗n: n cases crash, !n: n give wrong data, a → b: the share that
works directly → through arrayport):</p>
<ul>{items or "<li>nothing to switch: no direct route here crashes or lags arrayport</li>"}</ul>
</div>"""


def render_html(report: dict) -> str:
    meta = report["meta"]
    records = cell_records(report)  # once: the overview, the guide and the table share it
    outcomes = _outcomes(report["cells"])
    small = []
    for pair in report["pairs"]:
        small.append(f'<figure><figcaption>{escape(pair["producer"])} → '
                     f'{escape(pair["consumer"])}</figcaption>'
                     f'{pair_svg(report, pair["producer"], pair["consumer"], meta["dtypes"], meta["layouts"], outcomes)}'
                     f'</figure>')
    table = ["<table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in COLUMNS) + "</tr>"]
    for row in pair_rows(report, records):
        table.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    table.append("</table>")
    findings = "".join(f"<li>{escape(line)}</li>" for line in finding_lines(report)) \
        or "<li>none</li>"
    refusals = "".join(f"<li>{escape(line)}</li>" for line in refusal_lines(records)) \
        or "<li>none</li>"
    header = header_lines(report) + library_lines(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>arrayport interop matrix</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 24px; }} h2 {{ font-size: 18px; margin-top: 28px; }}
.meta {{ color: #555; font-size: 13px; }}
.guide {{ background: #f6f8fa; border-left: 4px solid #1a9641; padding: 4px 16px;
          font-size: 14px; max-width: 1100px; line-height: 1.4; }}
.guide li {{ font-size: 13px; }}
.legend {{ font-size: 13px; line-height: 1.9; max-width: 1100px; }}
.key {{ white-space: nowrap; margin-right: 14px; }}
.swatch {{ display: inline-block; width: 14px; height: 14px; margin: 0 5px 0 0;
          vertical-align: middle; border: 2px solid #999; }}
figure {{ display: inline-block; margin: 10px 14px; vertical-align: top; }}
figcaption {{ font-size: 14px; font-weight: bold; margin-bottom: 2px; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ddd; padding: 2px 6px; text-align: right; }}
td:first-child {{ text-align: left; }}
li {{ font-size: 13px; margin: 3px 0; }}
</style></head><body>
{PATTERNS}
<h1>arrayport interop matrix</h1>
{_guide(report, records)}
<p class="meta">{"<br>".join(escape(line) for line in header)}</p>
<h2>What works, directly and through arrayport</h2>
{_overview_legend()}
<p class="legend">{escape(LEGEND)}</p>
{overview_svg(report, records)}
<h3>Refused on purpose, and why</h3>
<ul class="reasons">{refusals}</ul>
<h2>Every case: dtype × layout (left half direct, right half through arrayport)</h2>
{_legend()}
<div>{"".join(small)}</div>
<h2>Crashes and wrong data</h2>
<ul>{findings}</ul>
<h2>Numbers</h2>
{"".join(table)}
</body></html>
"""
