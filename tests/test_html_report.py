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
