"""A screenshot of a run's Perfetto export opened in Chromium's own trace viewer, headless.

    python scripts/perfetto_screenshot.py RUN OUT.png [--steps 4] [--expand 129,398]

Exports RUN (``overlapscope analyze RUN --perfetto``), opens DevTools' Performance panel
(``devtools://devtools/bundled/devtools_app.html?panel=timeline``: the trace viewer built
into Chromium, which reads the Chrome trace format; this machine reaches no
ui.perfetto.dev and its Chromium has no chrome://tracing) in headless Chromium, loads the
file through the panel's "Load profile" input, closes the shortcuts dialog and the sidebar,
clicks each ``--expand`` height (CSS px) on the track headers to expand a rank's process,
and saves the top of the window (the tracks) as a PNG.
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.common.action_chains import ActionChains

WIDTH, HEIGHT = 1600, 1300
PANEL = "devtools://devtools/bundled/devtools_app.html?panel=timeline"
FILE_INPUTS = """
function walk(root, out) {
  for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'INPUT' && el.type === 'file') out.push(el);
    if (el.shadowRoot) walk(el.shadowRoot, out);
  }
  return out;
}
return walk(document, []);
"""
CLOSE_SHORTCUTS, CLOSE_SIDEBAR = (1571, 77), (16, 39)


def _click(driver: webdriver.Chrome, x: int, y: int) -> None:
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(x, y)
    actions.w3c_actions.pointer_action.click()
    actions.perform()
    time.sleep(1.0)


def shoot(trace: Path, out: Path, expand: list[int], height: int) -> None:
    options = Options()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options)
    try:
        driver.get(PANEL)
        time.sleep(4)
        driver.execute_script(FILE_INPUTS)[0].send_keys(str(trace))
        time.sleep(8)
        for x, y in (CLOSE_SHORTCUTS, CLOSE_SIDEBAR, *((120, y) for y in expand)):
            _click(driver, x, y)
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1}
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip})
        out.write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.quit()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", default="4")
    p.add_argument("--expand", default="129,398", help="heights of the headers to click")
    p.add_argument("--height", type=int, default=620, help="how much of the window to keep")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "run.perfetto.json.gz"
        cmd = [sys.executable, "-m", "overlapscope", "analyze", str(args.run)]
        cmd += ["--perfetto", str(trace), "--steps", args.steps]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        shoot(trace, args.out, [int(y) for y in args.expand.split(",")], args.height)


if __name__ == "__main__":
    main()
