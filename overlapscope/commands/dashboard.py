"""``overlapscope dashboard [RUN_DIR ...]``: serve the web dashboard (``dashboards``).

With no RUN_DIR it opens every run directory below ``traces/`` (the shipped sample runs).
Binds 127.0.0.1 unless ``--host`` says otherwise; Dash debug mode only with ``--debug``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from overlapscope.errors import UserError

REPO_TRACES = Path(__file__).resolve().parents[2] / "traces"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "dashboard",
        help="web dashboard: timelines, exposed communication per unit, trade-offs",
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
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--debug", action="store_true", help="Dash debug mode (never on a shared host)")
    p.add_argument("--no-warm", action="store_true", help="do not analyse every run before serving")
    p.set_defaults(func=run)
    return p


def default_roots() -> list[Path]:
    """``traces/`` of the working directory, else of the source checkout."""
    for root in (Path.cwd() / "traces", REPO_TRACES):
        if root.is_dir() and any(root.rglob("run.json")):
            return [root]
    raise UserError(
        "no RUN_DIR given and no sample runs under traces/: pass a run directory "
        "(overlapscope dashboard runs/my-run)"
    )


def url_for(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def run(args: argparse.Namespace) -> int:
    from dashboards import create_app, discover_runs  # Dash is imported only for this command
    from dashboards.app import registry_of

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: pick a port between 1 and 65535")
    runs = discover_runs(args.paths or default_roots())
    app = create_app(runs)
    if not args.no_warm:
        registry = registry_of(app)
        for src in runs:
            try:
                registry.load(src.key)
            except UserError as e:  # shown as an error panel in the app; say it here too
                print(f"warning: {e}", file=sys.stderr)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: reachable from other machines", file=sys.stderr)
    print(
        f"overlapscope dashboard: {len(runs)} run(s) at {url_for(args.host, args.port)}", flush=True
    )
    try:
        app.run(host=args.host, port=args.port, debug=args.debug, use_reloader=False)
    except OSError as e:
        raise UserError(
            f"cannot serve on {args.host}:{args.port}: {e.strerror or e} (try --port)"
        ) from e
    except KeyboardInterrupt:
        pass
    return 0
