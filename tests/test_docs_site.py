"""The documentation site (issue 21): it builds with warnings as errors, every page the
issue names is in it, and its landing page and an API page render in headless Chromium
(screenshot decoded, the expected text in the rendered page). The examples on its pages
run in tests/test_docs_examples.py."""

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from browser import find_browser, rendered_dom, screenshot
from png import read_png

pytestmark = pytest.mark.slow   # pytest --slow (CI) runs it; conftest.py

ROOT = Path(__file__).parent.parent

pytest.importorskip("sphinx", reason="the docs tools come with the [docs] extra")
pytest.importorskip("myst_parser", reason="the docs tools come with the [docs] extra")
pytest.importorskip("furo", reason="the docs tools come with the [docs] extra")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "html"
    built = subprocess.run([str(ROOT / "scripts" / "build-docs"), str(out)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr   # -W: a warning fails
    return out


def test_the_site_has_every_page_the_issue_names(site):
    for page in ("index", "usage", "library-authors", "devices", "processes",
                 "protocols/dlpack", "protocols/cuda-array-interface",
                 "protocols/array-interface", "protocols/buffer-protocol",
                 "protocols/array-method", "interop-findings", "reliability", "benchmarks",
                 "api"):
        assert (site / f"{page}.html").is_file(), page


def test_every_page_in_docs_is_in_the_site(site):
    for source in (ROOT / "docs").rglob("*.md"):
        page = source.relative_to(ROOT / "docs").with_suffix(".html")
        assert (site / page).is_file(), f"{source.name} is not built (not in a toctree?)"


def test_the_api_reference_documents_every_export(site):
    import arrayport as ap
    html = (site / "api.html").read_text()
    for name in ap.__all__:
        if name in ("errors", "__version__"):
            continue
        assert f'id="arrayport.{name}"' in html, f"arrayport.{name} is not in docs/api.md"


@pytest.mark.parametrize("page,text", [
    ("index.html", "Move arrays between Python libraries"),
    ("api.html", "A View of"),
])
def test_pages_render_in_chromium(site, tmp_path, page, text):
    browser = find_browser()
    url = (site / page).as_uri()
    dom = rendered_dom(browser, url)
    assert text in dom
    shot = tmp_path / "page.png"
    screenshot(browser, url, shot, 1280, 900)
    width, height, rows = read_png(shot.read_bytes())
    assert (width, height) == (1280, 900)
    colours = Counter(pixel for row in rows[::4] for pixel in row[::4])
    # Text and a sidebar, not a blank or error page: many colours, and the background
    # (the most common) less than nine tenths of the picture.
    assert len(colours) > 20, colours.most_common(5)
    assert colours.most_common(1)[0][1] < 0.9 * sum(colours.values())
