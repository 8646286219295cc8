"""Headless Chromium for the tests that look at rendered pages (the matrix's HTML report,
the documentation site): find it, screenshot a page, dump a page's DOM."""

import os
import shutil
import subprocess

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars")


def find_browser():
    """The browser's path; in CI its absence fails the test, elsewhere it skips it."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("CI must provide headless Chromium (.ci/run installs Debian's chromium)")
    pytest.skip("no Chromium on this machine (apt-get install chromium)")


def screenshot(browser, url, path, width, height):
    """Write a PNG of ``url`` rendered at ``width`` x ``height`` to ``path``."""
    subprocess.run([browser, *FLAGS, f"--screenshot={path}", f"--window-size={width},{height}",
                    url], capture_output=True, timeout=120)
    assert path.exists(), f"Chromium wrote no screenshot of {url}"


def rendered_dom(browser, url):
    """The page's DOM after its scripts ran, as HTML text."""
    result = subprocess.run([browser, *FLAGS, "--dump-dom", url], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout
