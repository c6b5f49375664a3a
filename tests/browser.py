"""Headless Chromium (Debian's ``chromium`` and ``chromium-driver``, which
``make browser`` installs) driven through Selenium, for the dashboard tests.

Screenshots go to ``$KEEPMEM_ARTIFACTS/screenshots`` (default
``artifacts/screenshots`` in the checkout), one PNG per step a test names.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = os.environ.get("KEEPMEM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KEEPMEM_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("KEEPMEM_ARTIFACTS", Path(__file__).parent.parent / "artifacts"))
WAIT = 20.0
BROWSER_ZONE = "Pacific/Auckland"

# Chromium on a closed network: no background fetches, no sandbox as root.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1400,1000",
)


def missing() -> str | None:
    """What is missing to run the browser tests, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (shutil.which(path) or Path(path).is_file()):
            return f"{path} not found: run `make browser` (Debian's chromium and chromium-driver)"
    return None


class Browser:
    """One Chromium for a test module; each test signs in afresh."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.profile = tempfile.mkdtemp(prefix="keepmem-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # far from UTC, so a time shown in the browser's zone instead of UTC shows
        service = Service(CHROMEDRIVER, env={**os.environ, "TZ": BROWSER_ZONE})
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(30)
        self.shots: list[Path] = []
        # this run's screenshots only: a stale FAILED-... would mislead
        shutil.rmtree(ARTIFACTS / "screenshots", ignore_errors=True)

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    # -- driving -----------------------------------------------------------------

    def open(self, fragment: str = "") -> None:
        self.driver.get(f"{self.base}/ui{fragment}")

    def sign_in(self, key: str, project: str = "") -> None:
        """Through the sign-in form, with the keyboard (Enter submits); no
        project: the key's own (or "default")."""
        # forget the last test's key on a page of the origin that runs no script
        self.driver.get(f"{self.base}/ui/static/favicon.svg")
        self.driver.execute_script("sessionStorage.clear()")
        self.open()
        key_box = self.find("input[name=key]")
        key_box.send_keys(key)
        project_box = self.find("input[name=project]")
        project_box.clear()
        project_box.send_keys(project + "\n")
        self.find("nav[aria-label=Sections]")
        self.until(lambda d: self.text("#live-state") == "● live", "the live stream to connect")

    def go(self, fragment: str) -> None:
        """Follow an in-page route (``#/jobs?status=dead``) without reloading."""
        self.driver.execute_script("window.location.hash = arguments[0]", fragment)

    def find(self, css: str) -> WebElement:
        return WebDriverWait(self.driver, WAIT).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, css)), f"no element {css}"
        )

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """The rendered text of the first match, or "" (one step: the page may redraw)."""
        return str(
            self.run(
                "const el = document.querySelector(arguments[0]); return el ? el.innerText : ''",
                css,
            )
        ).strip()

    def until(self, check: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(
            check, f"timed out waiting for {what}"
        )

    def run(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    # -- evidence -----------------------------------------------------------------

    def shot(self, name: str) -> Path:
        folder = ARTIFACTS / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"screenshot {name} failed"
        self.shots.append(path)
        return path

    def errors(self) -> list[str]:
        """Severe console messages since the last call (script errors, CSP
        violations, failed requests)."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def unlabelled(self) -> list[str]:
        """Form controls on the page without a label or an accessible name."""
        return list(
            self.run(
                """return [...document.querySelectorAll('input, select, textarea, button')]
                  .filter(el => !el.hidden && el.type !== 'hidden')
                  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                                && !(el.tagName === 'BUTTON' && el.textContent.trim()))
                  .map(el => el.outerHTML.slice(0, 120));"""
            )
        )
