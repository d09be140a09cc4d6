"""The browser the dashboard benchmarks drive: Debian's Chromium, headless, as tests/browser.py
launches it for the tests."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("OPENRUNS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-precise-memory-info",
    # Headless Chromium builds the omnibox's popup (a WebUI page of its own, in Lit) for every
    # page it opens: ~0.7 s of CPU a page, which a person's browser, moving between pages in
    # one tab, does not spend (docs/benchmarks.md, "Where the suite's CPU goes, by process").
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxFullPopup,WebUIOmniboxAimPopup",
]
