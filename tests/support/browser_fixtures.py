"""Debian's Chromium for the browser tests (`apt-get install chromium`; `make env` installs it as
root), driven by Playwright, never a browser that a tool downloads itself."""

from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Skipped on a developer's machine without Chromium; in CI (CI=true) a missing browser is a failure,
# so that the browser tests can never pass there by not running.
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and os.environ.get("CI") != "true",
    reason=f"no {CHROMIUM}: install Debian's chromium (`make env` does, as root)",
)
