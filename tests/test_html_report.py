"""The matrix's HTML report opens in headless Chromium and its picture is not empty: the
screenshot shows the heat map's colours."""

import importlib.util
import subprocess
import sys
from collections import Counter

from browser import find_browser, screenshot
from png import read_png

# bfloat16 rows only where ml_dtypes is installed (the matrix offers the type only then).
DTYPES = "float32,int8" + (",bfloat16" if importlib.util.find_spec("ml_dtypes") else "")


def test_html_report_renders_a_heat_map(tmp_path):
    browser = find_browser()
    html = tmp_path / "matrix.html"
    made = subprocess.run([sys.executable, "-m", "arrayport", "matrix", "--libraries",
                           "numpy,arrayport", "--dtypes", DTYPES,
                           "--html", str(html), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    shot = tmp_path / "shot.png"
    screenshot(browser, html.as_uri(), shot, 900, 900)
    width, height, rows = read_png(shot.read_bytes())
    assert (width, height) == (900, 900)
    colours = Counter(pixel for row in rows for pixel in row)
    # The overview's cells: green where everything works (numpy <-> arrayport), and more
    # than one colour in all: a real picture, not a blank page.
    greens = sum(n for (r, g, b), n in colours.items() if g > 120 and r < 80 and b < 100)
    assert greens > 2000, colours.most_common(5)
    assert len(colours) > 20


# ---- the overview's promises, on reports built by hand ----------------------------------------

import dataclasses
import re
from html import escape, unescape

import pytest

from arrayport.cli import html_report, matrix
from arrayport.cli import report as render
from arrayport.cli.report import Cell, cell_records, percent


def side(cases, works=0, zero_copy=0, refused=0, crashed=0, wrong=0, reasons=None):
    return {"cases": cases, "works": works, "zero-copy": zero_copy, "crashed": crashed,
            "wrong": wrong, "refused": refused, "reasons": reasons or {}}


def hand_made_report(*pairs):
    """A report with just the given pairs: (producer, consumer, direct side, arrayport side)."""
    return {"meta": {"arrayport": "0.1.0", "dlpack": "1.3", "python": "3.11", "libraries": [],
                     "dtypes": ["float32"], "layouts": ["contiguous"]},
            "cells": [], "seconds": 0.0, "routes": [], "findings": [], "unusual": [],
            "libraries_broken": {}, "libraries_reordered": {},
            "pairs": [{"producer": p, "consumer": c, "direct": d, "arrayport": a}
                      for p, c, d, a in pairs]}


def overview_cell(page: str, producer: str, consumer: str, side_: str) -> tuple[str, str, str]:
    """(class, tooltip, inner SVG) of one half-square of the overview heat map."""
    where = "direct (best route per case)" if side_ == "direct" else "through arrayport"
    head = re.escape(escape(f"{producer} → {consumer}, {where}: "))
    [(classes, tip, inner)] = re.findall(
        rf'<g class="([^"]*)"[^>]*><title>({head}[^<]*)</title>(.*?)</g>', page)
    return classes, unescape(tip), inner


def test_works_by_copy_is_drawn_apart_from_zero_copy():
    page = html_report.render_html(hand_made_report(
        ("jax", "torch", side(52, 39, 26), side(52, 52, 0)),
        ("jax", "jax", side(52, 52, 52), side(52, 52, 52))))
    copy_class, _, copy_svg = overview_cell(page, "jax", "torch", "arrayport")
    zero_class, _, zero_svg = overview_cell(page, "jax", "jax", "arrayport")
    assert copy_class.split() == ["cell", "copy"] and zero_class.split() == ["cell", "zero-copy"]
    # Both say 100% work; only the zero-copy share and the fill tell them apart.
    assert ">100%<" in copy_svg and ">100%<" in zero_svg
    assert ">0% zero-copy<" in copy_svg and ">100% zero-copy<" in zero_svg
    assert f'fill="{html_report.COPY_FILL}"' in copy_svg
    assert f'fill="{html_report.ZERO_COPY}"' not in copy_svg
    assert f'fill="{html_report.ZERO_COPY}"' in zero_svg
    assert html_report.COPY_FILL not in zero_svg
    assert 'id="copy-hatch"' in page  # the hatch the copy fill points at is on the page


def test_a_deliberate_refusal_is_not_painted_as_a_failure():
    reason = "NeedsCopy: view: a lazy Dask array; call .compute() first"
    page = html_report.render_html(hand_made_report(
        ("dask", "torch", side(0), side(10, refused=10, reasons={reason: 10})),
        ("numpy", "torch", side(10, crashed=10), side(10, 10, 10))))
    refused_class, refused_tip, refused_svg = overview_cell(page, "dask", "torch", "arrayport")
    failed_class, _, failed_svg = overview_cell(page, "numpy", "torch", "direct")
    assert refused_class.split() == ["cell", "refused"]
    assert failed_class.split() == ["cell", "failed", "hazard"]
    assert f'fill="{html_report.REFUSED}"' in refused_svg
    assert f'fill="{html_report.FAILED}"' not in refused_svg
    assert f'fill="{html_report.FAILED}"' in failed_svg
    assert reason in refused_tip and "10 refused cleanly; 0 fail" in refused_tip
    # The legend names the colour, and the guide says why arrayport refused.
    assert "refused cleanly" in page
    assert f"arrayport refuses on purpose — {escape(reason)}" in page


def test_the_matrix_counts_a_case_as_refused_only_when_every_route_refused_cleanly():
    def case(layout, route, status, detail=""):
        return {"producer": "dask", "consumer": "numpy", "route": route, "dtype": "float32",
                "layout": layout, "status": status, "detail": detail}
    [pair] = matrix.summarize_pairs([
        case("contiguous", "dlpack", "refused", "BufferError: lazy"),
        case("contiguous", "buffer", "refused", "TypeError: no buffer"),
        case("sliced", "dlpack", "refused", "BufferError: lazy"),
        case("sliced", "buffer", "crashed", "killed by SIGSEGV"),
        case("negative", "dlpack", "refused", "BufferError: lazy"),
        case("negative", "buffer", "copy")])
    direct = pair["direct"]
    assert (direct["cases"], direct["works"], direct["refused"]) == (3, 1, 1)
    assert direct["reasons"] == {"BufferError: lazy": 1, "TypeError: no buffer": 1}
    record = Cell.from_counts("dask", "numpy", "direct", direct)
    assert (record.copy, record.refused, record.failed, record.crashed) == (1, 1, 1, 1)
    assert record.verdict == "partial" and record.hazard


@pytest.mark.parametrize("part, whole, shown", [
    (117, 200, "59%"),   # 58.5%: half up, where floor and banker's rounding say 58%
    (1, 8, "13%"), (1, 3, "33%"), (2, 3, "67%"),
    (199, 200, "99%"),   # not all: never 100%
    (1, 300, "1%"),      # not nothing: never 0%
    (0, 5, "0%"), (5, 5, "100%"), (0, 0, "-")])
def test_one_rounding_rule(part, whole, shown):
    assert percent(part, whole) == shown


def test_text_markdown_and_html_show_the_same_rounded_percentage():
    # 117/200 works (58.5%: 0.585 * 100 is 58.4999… in floating point) and 1/3 zero-copy.
    report = hand_made_report(("numpy", "torch", side(200, 117, 67), side(0)))
    record = cell_records(report)[("numpy", "torch", "direct")]
    assert (record.works_pct, record.zero_copy_pct) == ("59%", "34%")
    text, markdown = render.render_text(report), render.render_markdown(report)
    page = html_report.render_html(report)
    [text_row] = [line for line in text.splitlines() if line.startswith("numpy → torch")]
    assert text_row.split()[3:5] == ["59%", "34%"]
    assert "| numpy → torch | 59% | 34% |" in markdown
    _, tip, svg = overview_cell(page, "numpy", "torch", "direct")
    assert ">59%<" in svg and ">34% zero-copy<" in svg and "(59%)" in tip and "(34%)" in tip
    assert "<td>59%</td><td>34%</td>" in page
    for output in (text, markdown, page):
        assert "58%" not in output and "33%" not in output


def test_every_number_of_a_square_comes_from_its_record():
    # numpy → numpy directly: every case works zero-copy by the best route, while another
    # route gives wrong data on 14 — once "119 zero-copy, 0 crash, 14 wrong", now explicit.
    report = hand_made_report(("numpy", "numpy", side(119, 119, 119, wrong=14), side(0)))
    record = cell_records(report)[("numpy", "numpy", "direct")]
    assert (record.zero_copy, record.copy, record.refused, record.failed) == (119, 0, 0, 0)
    assert record.tooltip() == (
        "numpy → numpy, direct (best route per case): 119 of 119 cases work (100%): "
        "119 zero-copy (100%), 0 by copy; 0 refused cleanly; 0 fail. On some route of this "
        "side 0 cases crash and 14 give wrong data (numpy's own limitation: its own arrays, "
        "its own entry points)")
    classes, tip, svg = overview_cell(html_report.render_html(report), "numpy", "numpy", "direct")
    assert tip == record.tooltip() and classes.split() == ["cell", "zero-copy", "hazard"]
    assert ">!14 its own<" in svg and f'stroke="{html_report.OWN}"' in svg   # not a red frame
    # Change the record, and the tooltip, the class, the text and the fill all follow it.
    changed = dataclasses.replace(record, zero_copy=60, copy=59, wrong=0)
    changed_svg = html_report.cell_svg(changed, 0, 0, 90, 80)
    assert "60 zero-copy (50%), 59 by copy" in changed.tooltip()
    assert escape(changed.tooltip()) in changed_svg
    assert 'class="cell copy"' in changed_svg and ">50% zero-copy<" in changed_svg
    assert html_report.COPY_FILL in changed_svg and ">!14 its own<" not in changed_svg
    # The split the fill draws adds up to the cases, as the tooltip's numbers do.
    numbers = [int(n) for n in re.findall(r"(\d+) (?:zero-copy \(|by copy|refused|fail)",
                                          changed.tooltip())]
    assert sum(numbers) == changed.cases == sum(n for n, _ in html_report._segments(changed))



def test_the_page_fits_1400_pixels_and_says_every_reason_in_text():
    # 20 consumers once made a 3,900 px map, cut on a 1,400 px screen; refusal reasons were
    # only in tooltips, which a screenshot or a printout cannot show.
    names = [f"lib{i}" for i in range(20)]
    reason = "TypeNotHeld: lib3 has no type for bfloat16 " + "and says so at length " * 8
    pairs = [(p, c, side(4, 4, 4), side(4, 3, 3, refused=1, reasons={reason: 1}))
             for p in names[:3] for c in names]
    page = html_report.render_html(hand_made_report(*pairs))
    widths = [int(w) for w in re.findall(r'<svg xmlns="[^"]*" width="(\d+)"', page)]
    assert widths and max(widths) <= html_report.PAGE_WIDTH
    assert sum('aria-label="interop heat map"' in part for part in page.split("<svg")) >= 3
    listed = re.search(r'<ul class="reasons">(.*?)</ul>', page, re.S).group(1)
    assert escape(reason) in listed and "…" not in listed        # whole, outside any tooltip
    assert "through arrayport, lib0 → lib0, lib0 → lib1" in unescape(listed)


def test_a_library_s_own_limitation_is_marked_in_the_findings():
    report = hand_made_report(("numpy", "numpy", side(4, 4, 4, wrong=2), side(4, 4, 4)))
    report["findings"] = [{"producer": "numpy", "consumer": "numpy", "route": "array_interface",
                           "status": "wrong", "dtypes": ["bfloat16"], "layouts": ["contiguous"],
                           "detail": "dtype |V2 where bfloat16 was expected"}]
    assert render.finding_lines(report) == [
        "! numpy → numpy via array_interface (numpy's own limitation) [contiguous; bfloat16]: "
        "dtype |V2 where bfloat16 was expected"]
