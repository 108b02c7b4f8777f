"""Request-level guard of the dashboard's Flask server: malformed requests get a 4xx, never a
traceback in the log.

- request bodies are capped (``MAX_BODY_BYTES``, HTTP 413 beyond it; the largest legitimate
  request, a callback carrying the layout's state, is a few kB);
- a callback request (``_dash-update-component``) must be a JSON object naming a registered
  output, with ``inputs`` (and ``state``, ``changedPropIds`` if present) lists of the shape
  Dash sends: otherwise HTTP 400;
- ``_dash-component-suites/PKG/PATH`` serves only files Dash registered for ``PKG``: anything
  else (an unknown package, ``..``, a file outside the assets) is HTTP 404.
"""

from __future__ import annotations

from typing import Any

import flask
from dash import Dash
from dash.fingerprint import check_fingerprint

MAX_BODY_BYTES = 1 << 20
_CALLBACK = "_dash-update-component"
_SUITES = "_dash-component-suites/"


def _is_prop_list(value: object) -> bool:
    """``[{"id": ..., "property": "..."}, ...]``; nested lists are pattern-matching groups."""
    if not isinstance(value, list):
        return False
    for item in value:
        if isinstance(item, list):
            if not _is_prop_list(item):
                return False
        elif not (
            isinstance(item, dict) and "id" in item and isinstance(item.get("property"), str)
        ):
            return False
    return True


def callback_problem(body: object, callback_map: dict[str, Any]) -> str | None:
    """Why ``body`` is not a callback request this app can answer, or None."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in callback_map:
        return "unknown output"
    if "outputs" not in body:
        return "no outputs"
    if not _is_prop_list(body.get("inputs")):
        return "inputs must be a list of {id, property}"
    if "state" in body and not _is_prop_list(body["state"]):
        return "state must be a list of {id, property}"
    changed = body.get("changedPropIds", [])
    if not (isinstance(changed, list) and all(isinstance(c, str) for c in changed)):
        return "changedPropIds must be a list of strings"
    return None


def asset_allowed(registered: dict[str, Any], package: str, fingerprinted: str) -> bool:
    """Dash registered ``fingerprinted`` (without its fingerprint) as an asset of ``package``."""
    path, _ = check_fingerprint(fingerprinted)
    parts = path.split("/")
    if ".." in parts or "" in parts:
        return False
    return path in registered.get(package, ())


def install(app: Dash) -> None:
    """Put the guard in front of ``app``'s routes."""
    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    prefix = app.config.requests_pathname_prefix or "/"

    @server.before_request
    def _guard() -> Any:
        req = flask.request
        if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
            flask.abort(413)
        path = req.path
        if not path.startswith(prefix):
            return None
        rel = path[len(prefix) :]
        if rel == _CALLBACK and req.method == "POST":
            body = req.get_json(silent=True)  # reads at most MAX_CONTENT_LENGTH (413 beyond)
            problem = callback_problem(body, app.callback_map)
            if problem is not None:
                return flask.Response(f"bad callback request: {problem}\n", status=400)
        elif rel.startswith(_SUITES):
            package, _, rest = rel[len(_SUITES) :].partition("/")
            if not asset_allowed(app.registered_paths, package, rest):
                return flask.Response("not found\n", status=404)
        return None
