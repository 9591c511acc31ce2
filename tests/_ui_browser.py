"""A headless Debian chromium driven by Selenium, for the inspector's browser tests.

The browser and its driver are the system's (``apt-get install chromium chromium-driver``,
which ``.ci/run`` does when they are missing); Selenium Manager is kept offline, so nothing is
downloaded. Without them a test is skipped locally, with the reason shown, and fails under CI.
Screenshots go to ``tests/artifacts/ui/`` (ignored by git; ``MEMCOMPILE_UI_ARTIFACTS`` moves it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

from _data_paths import in_ci

CHROMIUM = os.environ.get("MEMCOMPILE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MEMCOMPILE_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("MEMCOMPILE_UI_ARTIFACTS", Path(__file__).resolve().parent / "artifacts" / "ui"))

WIDE = (1280, 800)
NARROW = (390, 844)


def require_browser() -> None:
    """Skip (locally) or fail (CI) when the system browser, its driver or Selenium is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (test extra)")
    if missing:
        msg = f"browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)


class Browser:
    """One headless chromium with a fresh profile; ``quit`` removes the profile."""

    def __init__(self, size: tuple[int, int] = WIDE):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        # Selenium Manager must neither download nor phone home.
        os.environ["SE_OFFLINE"] = "true"
        os.environ["SE_AVOID_STATS"] = "true"
        self.profile = tempfile.mkdtemp(prefix="memcompile-ui-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--disable-extensions", "--disable-default-apps", "--mute-audio", "--force-color-profile=srgb",
                    f"--user-data-dir={self.profile}", f"--window-size={size[0]},{size[1]}"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
        self.driver.set_page_load_timeout(60)
        self.driver.set_script_timeout(60)
        self.resize(size)

    def resize(self, size: tuple[int, int]) -> None:
        # The window's inner size, not its outer one: set the viewport through DevTools.
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": size[0], "height": size[1], "deviceScaleFactor": 1,
                                     "mobile": size[0] < 600})

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # ---------------------------------------------------------------- helpers
    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def go(self, base: str, hash_: str) -> None:
        """Navigate within the app (a hash change) and wait until the page is shown."""
        if not self.driver.current_url.startswith(base + "/ui/"):
            self.open(f"{base}/ui/{hash_}")
        else:
            self.js("location.hash = arguments[0]", hash_)
        self.wait_ready()

    def wait(self, predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        last_exc = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except Exception as exc:  # an element not there yet
                last_exc = exc
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what} (last error: {last_exc}); "
                             f"page state {self.state()!r}, text: {self.text()[:800]!r}")

    def state(self) -> str | None:
        return self.js("const m = document.getElementById('main'); return m && m.dataset.state + '/' + m.dataset.page")

    def wait_ready(self, page: str | None = None, timeout: float = 30.0) -> None:
        def ready():
            s = self.state() or ""
            st, _, pg = s.partition("/")
            return st in ("ready", "error") and (page is None or pg == page)
        # The hash change renders asynchronously: let the router mark the page as loading first.
        time.sleep(0.05)
        self.wait(ready, timeout, f"page {page or ''} ready")

    def text(self) -> str:
        try:
            return self.js("return document.getElementById('main') ? document.getElementById('main').innerText : ''") or ""
        except Exception:
            return ""

    def find(self, css: str):
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def full_screenshot(self, name: str, max_height: int = 4000) -> Path:
        """A screenshot of the whole page (up to ``max_height`` CSS pixels), beyond the viewport."""
        import base64

        metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height), "scale": 1}
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot",
                                           {"format": "png", "captureBeyondViewport": True, "clip": clip})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def overflows_horizontally(self) -> bool:
        """Whether the page is wider than the viewport (content cut off or a sideways scroll)."""
        return bool(self.js("return document.documentElement.scrollWidth > document.documentElement.clientWidth + 1"))

    def console_errors(self) -> list[str]:
        """Script errors logged since the last call (a refused request, such as an expected 404,
        is logged by the browser too: those are left out)."""
        return [e["message"] for e in self.driver.get_log("browser")
                if e.get("level") == "SEVERE" and "Failed to load resource" not in e["message"]]
