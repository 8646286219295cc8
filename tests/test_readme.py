"""The README stays a front door (issue 21: at most ~8 KB; the manual lives in docs/). Its
example runs in tests/test_docs_examples.py, with every page's."""

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_the_readme_fits_on_a_screen_or_two_and_its_links_resolve():
    text = README.read_text()
    assert len(text.encode()) <= 8 * 1024
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (README.parent / target).exists(), target
