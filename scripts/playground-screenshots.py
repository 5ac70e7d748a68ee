#!/usr/bin/env python3
"""Takes the screenshots of the playground's main views into docs/ (shown by the README and
docs/playground.md), from a real daemon and Debian's chromium, as the browser tests do.

Usage (as root; scripts/setup-playground-tests.sh installs Playwright and chromium):
  WARDEN_BIN=…/warden /var/cache/warden/venv-playwright/bin/python scripts/playground-screenshots.py
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "tests" / "playground"))

from harness import Daemon, launch, open_page, run_and_wait, set_code, wait_ready  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

docs = root / "docs"


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    path = docs / name
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path.relative_to(root)}")


def main() -> None:
    with Daemon() as daemon, sync_playwright() as p:
        browser = launch(p)
        # The notebook: state between cells, streamed output, a chart, a table, a traceback.
        page = open_page(browser, daemon.url, 1280, 900)
        wait_ready(page)
        page.select_option("#profile", "data_science")
        page.set_input_files("#upload", files=[{"name": "sales.csv", "mimeType": "text/csv",
                                                "buffer": b"month,sales\nJan,12\nFeb,18\nMar,15\nApr,24\n"}])
        page.wait_for_selector('#files li[data-path="sales.csv"]')
        run_and_wait(page, "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(f'{len(df)} rows')\ndf.describe()")
        run_and_wait(page, "import matplotlib.pyplot as plt\n"
                           "fig, ax = plt.subplots(figsize=(6, 3))\n"
                           "ax.bar(df.month, df.sales, color='#2456a6')\n"
                           "ax.set_title('Sales by month');")
        run_and_wait(page, "def average(values):\n    return sum(values) / len(values)\naverage([])")
        set_code(page, "# Ctrl/Cmd-Enter runs the cell\n")
        shot(page, "playground.png")
        # A policy refusal marked in the editor (the standard profile allows few modules).
        page.select_option("#profile", "standard")
        set_code(page, "import json\nimport subprocess\nprint(subprocess.run(['id']))\n")
        page.click("#run")
        page.wait_for_selector(".CodeMirror .cm-violation")
        shot(page, "playground-refusal.png")
        page.context.close()
        # A phone.
        page = open_page(browser, daemon.url, 390, 844)
        wait_ready(page)
        run_and_wait(page, "for i in range(3):\n    print('line', i)\nsum(range(10))")
        page.screenshot(path=str(docs / "playground-phone.png"))
        print("wrote docs/playground-phone.png")
        page.context.close()
        browser.close()
    # The key prompt of a daemon with API keys.
    digest = hashlib.sha256(b"screenshot-key").hexdigest()
    with Daemon(settings=f'[[server.api_keys]]\nname = "demo"\nkey_sha256 = "{digest}"\n') as daemon, \
            sync_playwright() as p:
        browser = launch(p)
        page = open_page(browser, daemon.url, 1000, 600)
        page.wait_for_selector("#key-overlay:not([hidden])")
        page.screenshot(path=str(docs / "playground-key.png"))
        print("wrote docs/playground-key.png")
        browser.close()


if __name__ == "__main__":
    main()
