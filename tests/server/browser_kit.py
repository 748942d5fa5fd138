"""What the browser tests share: Debian's Chromium, how it is launched, and a page's error collector."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
TIMEOUT_MS = 30_000


def watch_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return errors


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless: the one browser fixture (tests/server/conftest.py and the session page test import
    it; a test module may define its own, as the cross-origin tests do)."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
