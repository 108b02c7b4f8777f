"""``overlapscope dashboard [RUN_DIR ...]``: serve the web dashboard (``dashboards``).

With no RUN_DIR it opens every run directory below ``traces/`` (the shipped sample runs).
With ``--dask ADDRESS|local`` each run is analysed as ``analyze --dask`` does (summaries in the
``--cache``), and the timeline reads one step of a few chosen ranks from that cache on demand
(dashboards/big_run.py): for runs of many ranks. Without it, nothing of the cache is read.
Binds 127.0.0.1 unless ``--host`` says otherwise; Dash debug mode only with ``--debug``.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from overlapscope import exit_guard
from overlapscope.commands import COMMANDS
from overlapscope.commands.flags import add_dask_args, int_at_least, target
from overlapscope.errors import UserError
from overlapscope.manifest import RUN_JSON

REPO_TRACES = Path(__file__).resolve().parents[2] / "traces"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "dashboard",
        help=COMMANDS["dashboard"].help,
        description="Serve a Dash web app over run directories (default: the sample runs in "
        "traces/). Prints the URL and serves until Ctrl-C.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run directories, trace files, or folders holding runs (default: traces/)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int_at_least(1, high=65535), default=8050, help="port (default 8050)"
    )
    p.add_argument("--debug", action="store_true", help="Dash debug mode (never on a shared host)")
    p.add_argument("--no-warm", action="store_true", help="do not analyse every run before serving")
    add_dask_args(p)  # each run analysed as analyze --dask does; its events left in the cache
    p.set_defaults(func=run)
    return p


def default_roots() -> list[Path]:
    """``traces/`` of the working directory, else of the source checkout."""
    for root in (Path.cwd() / "traces", REPO_TRACES):
        if root.is_dir() and any(root.rglob(RUN_JSON)):
            return [root]
    raise UserError(
        "no RUN_DIR given and no sample runs under traces/: pass a run directory "
        "(overlapscope dashboard runs/my-run)"
    )


def bind_port(host: str, port: int) -> socket.socket:
    """Listen on ``host:port`` ourselves, before any work: a port in use is one line here,
    and the server takes this socket, so nothing can take the port in between (werkzeug's
    own bind failure is several lines and exit 1)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise UserError(
            f"--port {port}: cannot serve on {host}:{port} ({e.strerror}); pick another --port"
        ) from None
    return sock


def check_port(host: str, port: int) -> None:
    """Refuse, in one line, a port something already listens on."""
    bind_port(host, port).close()


# waitress' worker threads; more requests at once wait in its queue (no thread per request,
# as the development server starts). The callbacks run Python, one at a time under the GIL.
SERVER_THREADS = 8
# Open connections waitress keeps (its default, 100, counts its own two sockets: the 99th
# browser of 100 at once waited unanswered); each costs a file descriptor, not a thread.
SERVER_CONNECTIONS = 500


def serve(app: Any, sock: socket.socket, host: str, port: int, debug: bool) -> None:
    """Serve ``app`` on the socket ``bind_port`` opened, until Ctrl-C or SIGTERM."""
    if debug:  # Dash's dev tools come with its own runner (which binds again)
        sock.close()
        app.run(host=host, port=port, debug=True, use_reloader=False)
        return
    serve_waitress(app, sock)


def serve_waitress(app: Any, sock: socket.socket, threads: int = SERVER_THREADS) -> None:
    """``app`` served by waitress, a production WSGI server, on ``sock``: under 20 and 100
    clients at once it answered every request, at a lower median latency than the
    development server (docs/BENCHMARKS.md, "The dashboard under load")."""
    import waitress

    logging.getLogger("waitress").setLevel(logging.ERROR)  # (its queue-depth line per burst)
    server = waitress.create_server(
        app.server, sockets=[sock], threads=threads, connection_limit=SERVER_CONNECTIONS
    )
    try:
        server.run()
    finally:
        server.close()


def url_for(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def warm(app: Any, runs: Sequence[Any], dask: bool) -> list[UserError]:
    """Analyse every run now; the errors of those that fail (shown as a panel in the app).
    None loads: one line, the run's own error with ``--dask`` (an unreachable scheduler is
    said as ``analyze --dask`` says it)."""
    from dashboards.app import registry_of

    registry = registry_of(app)
    failed: list[UserError] = []
    for src in runs:
        try:
            loaded = registry.load(src.key)
        except UserError as e:  # shown as an error panel in the app; say it here too
            failed.append(e)
            continue
        for w in loaded.analysis.warnings:  # shown on the overview; said here as analyze does
            print(f"warning: {src.label}: {w}", file=sys.stderr)
    if runs and len(failed) == len(runs):
        if dask:
            raise UserError(str(failed[0]))
        raise UserError(f"no run could be loaded ({failed[0]}); give a run directory")
    for err in failed:
        print(f"warning: {err}", file=sys.stderr)
    return failed


def run(args: argparse.Namespace) -> int:
    from dashboards import create_app, discover_runs  # Dash is imported only for this command

    where = target(args)
    sock = bind_port(args.host, args.port)
    try:
        runs = discover_runs(args.paths or default_roots())
        app = create_app(runs, target=where)
        failed = [] if args.no_warm else warm(app, runs, where.dask is not None)
    except BaseException:
        sock.close()
        raise
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: reachable from other machines", file=sys.stderr)
    print(
        f"overlapscope dashboard: {len(runs) - len(failed)} run(s)"
        + (f" ({len(failed)} could not be loaded)" if failed else "")
        + f" at {url_for(args.host, args.port)} (Ctrl-C to stop)",
        flush=True,
    )
    if not args.debug:
        # Our line above gives the URL: no second one from Dash, no line per request.
        logging.getLogger("dash.dash").setLevel(logging.WARNING)
    try:
        serve(app, sock, args.host, args.port, args.debug)
    except OSError as e:
        raise UserError(
            f"cannot serve on {args.host}:{args.port}: {e.strerror or e} (try --port)"
        ) from e
    except KeyboardInterrupt:
        pass
    exit_guard.arm(0, "overlapscope dashboard")  # serving is over: the exit is bounded
    return 0
