"""Build the documentation site, serve it locally and take screenshots of its key pages in headless
Chromium, to look at what a reader sees (formulas typeset, lists, tables, the API pages).

Needs Debian's Chromium and Playwright's Python package; nothing is downloaded (Playwright drives the
system browser, so ``playwright install`` is not needed):

    apt-get install chromium && pip install -e ".[docs,screenshots]"
    python scripts/screenshots.py [OUT]          # default OUT: screenshots/ (ignored by git)

Each page is written as OUT/<page>.png (the top 1600 pixels at 1280 wide). The script also fails when a
page shows a KaTeX error or a formula left untypeset, so a broken math setup cannot pass unnoticed.
Not part of CI: it takes about half a minute.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: page path in the site -> screenshot name
PAGES = {
    "": "home",
    "getting-started/": "getting-started",
    "concepts/": "concepts",
    "cli/": "cli",
    "python/": "python",
    "exported/": "exported",
    "theory/": "theory",
    "edge/": "edge",
    "api/ops/": "api-ops",
    "api/models/": "api-models",
    "api/training/": "api-training",
}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def build(site: Path) -> None:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT, check=True,
                   env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(site: Path) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(out: Path) -> int:
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        print("no chromium on PATH: apt-get install chromium", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        build(site)
        server = serve(site)
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            for path, name in PAGES.items():
                if not (site / path / "index.html").exists():
                    problems.append(f"{path or '/'}: no such page")
                    continue
                page.goto(base + path, wait_until="networkidle")
                page.evaluate("document.fonts.ready")
                errors = page.locator(".katex-error").count()
                raw = page.locator(".arithmatex:not(:has(.katex))").count()
                if errors or raw:
                    problems.append(f"{path or '/'}: {errors} KaTeX errors, {raw} formulas not typeset")
                page.screenshot(path=str(out / f"{name}.png"))
                print(f"{out / f'{name}.png'}: {page.locator('.arithmatex').count()} formulas")
            browser.close()
        server.shutdown()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "screenshots"))
