"""What the browser tests share: Debian's Chromium, how it is launched, and a page's error collector."""

from __future__ import annotations

from playwright.sync_api import Page

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
