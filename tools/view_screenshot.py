"""Take a PNG of a saga page that ``safebunny view`` serves, with Debian's headless Chromium (docs/saga-view.png).

    safebunny view safebunny.demo.fulfilment --port 8765 &      # while `make demo` runs, with its environment
    python tools/view_screenshot.py http://127.0.0.1:8765/ docs/saga-view.png

Needs ``chromium`` and ``chromium-driver`` (apt) and selenium (the ``test`` extra); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

__all__ = ["screenshot"]

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--hide-scrollbars")


def screenshot(url: str, out: str, width: int = 1400, max_height: int = 2400) -> None:
    """Load ``url`` and save the page (up to ``max_height`` pixels tall) as the PNG ``out``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="sb-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*FLAGS, f"--window-size={width},900", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        WebDriverWait(driver, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-view .sb-graph"))
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, min(int(height) + 20, max_height))
        driver.save_screenshot(out)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args()
    screenshot(args.url, args.out, args.width)
    print(args.out)
