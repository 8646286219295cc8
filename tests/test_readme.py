"""The README's example runs as written (no example may rot), in a fresh interpreter, and the
README stays a front door (issue 21: at most ~8 KB; the manual lives in docs/)."""

import re
import subprocess
import sys
from pathlib import Path

from optional import needs

README = Path(__file__).parent.parent / "README.md"


@needs("torch")
def test_the_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        child = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                               timeout=120)
        assert child.returncode == 0, child.stderr


def test_the_readme_fits_on_a_screen_or_two_and_its_links_resolve():
    text = README.read_text()
    assert len(text.encode()) <= 8 * 1024
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (README.parent / target).exists(), target
