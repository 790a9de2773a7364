"""Headless Chromium for the console's browser tests and screenshots (Debian's chromium
and chromium-driver), with networking extras off."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync",
         "--disable-extensions", "--no-first-run", "--disable-default-apps", "--disable-component-update",
         "--disable-dev-shm-usage", "--window-size=1360,900")


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and not shutil.which(Path(path).name):
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    return None


def start_browser():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    return driver
