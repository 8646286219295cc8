"""The matrix as a self-contained HTML page (no scripts, no external files): an overview
heat map (producers × consumers, each square split into direct | through arrayport, coloured
by how much works), one small map per pair (dtype × layout, coloured by outcome), and the
crashes and wrong results. Every square has a tooltip with the exact outcome."""

from __future__ import annotations

from html import escape

from .report import LEGEND, finding_lines, header_lines, library_lines, pair_rows, COLUMNS

STATUS_COLOURS = {"zero-copy": "#1a9641", "copy": "#a6d96a", "refused": "#c8c8c8",
                  "wrong": "#f46d43", "crashed": "#67000d", "tool-error": "#7b3294"}
NO_CASE = "#f4f4f4"


def _works_colour(fraction: float) -> str:
    """Red (nothing works) through amber to green (everything works)."""
    stops = [(0.0, (215, 48, 39)), (0.5, (254, 224, 139)), (1.0, (26, 150, 65))]
    for (x0, c0), (x1, c1) in zip(stops, stops[1:]):
        if fraction <= x1:
            t = (fraction - x0) / (x1 - x0) if x1 > x0 else 0.0
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(c0, c1))
    return "#1a9641"


def _rect(x, y, w, h, fill, tip, extra="") -> str:
    return (f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" {extra}>'
            f"<title>{escape(tip)}</title></rect>")


def _text(x, y, text, size=12, anchor="middle", extra="") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" {extra}>'
            f"{escape(text)}</text>")


def overview_svg(report: dict) -> str:
    producers = list(dict.fromkeys(p["producer"] for p in report["pairs"]))
    consumers = list(dict.fromkeys(p["consumer"] for p in report["pairs"]))
    by_pair = {(p["producer"], p["consumer"]): p for p in report["pairs"]}
    cell, left, top = 96, 140, 70
    width, height = left + cell * len(consumers) + 10, top + cell * len(producers) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="interop heat map" font-family="sans-serif">',
             _text(left + cell * len(consumers) / 2, 16, "consumer →", 13),
             _text(12, top - 8, "producer ↓", 13, "start")]
    for j, consumer in enumerate(consumers):
        parts.append(_text(left + j * cell + cell / 2, top - 30, consumer, 12))
        parts.append(_text(left + j * cell + cell / 4, top - 10, "direct", 9))
        parts.append(_text(left + j * cell + 3 * cell / 4, top - 10, "via ap", 9))
    for i, producer in enumerate(producers):
        y = top + i * cell
        parts.append(_text(left - 8, y + cell / 2 + 4, producer, 12, "end"))
        for j, consumer in enumerate(consumers):
            x = left + j * cell
            pair = by_pair.get((producer, consumer))
            for k, side in enumerate(("direct", "arrayport")):
                counts = pair[side] if pair else {"cases": 0}
                sx = x + k * cell / 2
                if not counts["cases"]:
                    parts.append(_rect(sx, y, cell / 2 - 1, cell - 2, NO_CASE,
                                       f"{producer} → {consumer} ({side}): no route"))
                    parts.append(_text(sx + cell / 4, y + cell / 2 + 4, "—", 11))
                    continue
                fraction = counts["works"] / counts["cases"]
                tip = (f"{producer} → {consumer} ({side}): {counts['works']}/{counts['cases']}"
                       f" cases work, {counts['zero-copy']} zero-copy, {counts['crashed']} "
                       f"crash, {counts['wrong']} wrong")
                parts.append(_rect(sx, y, cell / 2 - 1, cell - 2, _works_colour(fraction), tip))
                parts.append(_text(sx + cell / 4, y + cell / 2, f"{round(100 * fraction)}%", 12,
                                   extra='font-weight="bold"'))
                hazards = " ".join(f"{mark}{counts[status]}" for status, mark in
                                   (("crashed", "✗"), ("wrong", "!")) if counts[status])
                if hazards:
                    parts.append(_text(sx + cell / 4, y + cell / 2 + 18, hazards, 10,
                                       extra='fill="#67000d" font-weight="bold"'))
    parts.append("</svg>")
    return "".join(parts)


def pair_svg(report: dict, producer: str, consumer: str, dtypes: list[str],
             layouts: list[str], outcomes: dict) -> str:
    """dtype rows × layout columns; each square's left half the best direct outcome, its right
    half the arrayport outcome."""
    cell, left, top = 16, 92, 72
    width, height = left + cell * len(layouts) + 4, top + cell * len(dtypes) + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif">']
    for j, layout in enumerate(layouts):
        x = left + j * cell + cell / 2
        parts.append(_text(x, top - 4, layout, 9, "start",
                           f'transform="rotate(-60 {x} {top - 4})"'))
    for i, dtype in enumerate(dtypes):
        y = top + i * cell
        parts.append(_text(left - 4, y + cell - 5, dtype, 9, "end"))
        for j, layout in enumerate(layouts):
            x = left + j * cell
            for k, side in enumerate(("direct", "arrayport")):
                status, detail = outcomes.get((producer, consumer, dtype, layout, side),
                                              ("not offered", ""))
                tip = f"{producer} → {consumer}, {dtype}, {layout}, {side}: {status}"
                if detail:
                    tip += f" — {detail}"
                parts.append(_rect(x + k * cell / 2, y, cell / 2, cell - 1,
                                   STATUS_COLOURS.get(status, NO_CASE), tip))
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


def _legend() -> str:
    swatches = "".join(f'<span class="swatch" style="background:{colour}"></span>{escape(name)} '
                       for name, colour in STATUS_COLOURS.items() if name != "tool-error")
    return f'<p class="legend">{swatches}<span class="swatch" style="background:{NO_CASE}">' \
           f'</span>not offered by the producer</p>'


def render_html(report: dict) -> str:
    meta = report["meta"]
    outcomes = _outcomes(report["cells"])
    small = []
    for pair in report["pairs"]:
        small.append(f'<figure><figcaption>{escape(pair["producer"])} → '
                     f'{escape(pair["consumer"])}</figcaption>'
                     f'{pair_svg(report, pair["producer"], pair["consumer"], meta["dtypes"], meta["layouts"], outcomes)}'
                     f'</figure>')
    table = ["<table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in COLUMNS) + "</tr>"]
    for row in pair_rows(report):
        table.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    table.append("</table>")
    findings = "".join(f"<li>{escape(line)}</li>" for line in finding_lines(report)) \
        or "<li>none</li>"
    header = header_lines(report) + library_lines(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>arrayport interop matrix</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; }}
.meta {{ color: #555; font-size: 13px; }}
.legend {{ font-size: 13px; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px;
          vertical-align: middle; border: 1px solid #999; }}
figure {{ display: inline-block; margin: 6px; vertical-align: top; }}
figcaption {{ font-size: 12px; font-weight: bold; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ddd; padding: 2px 6px; text-align: right; }}
td:first-child {{ text-align: left; }}
li {{ font-size: 13px; margin: 3px 0; }}
</style></head><body>
<h1>arrayport interop matrix</h1>
<p class="meta">{"<br>".join(escape(line) for line in header)}</p>
<h2>What works, directly and through arrayport</h2>
<p class="legend">{escape(LEGEND)}</p>
{overview_svg(report)}
<h2>Every case: dtype × layout (left half direct, right half through arrayport)</h2>
{_legend()}
<div>{"".join(small)}</div>
<h2>Crashes and wrong data</h2>
<ul>{findings}</ul>
<h2>Numbers</h2>
{"".join(table)}
</body></html>
"""
