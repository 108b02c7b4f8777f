"""Request-level guard of the dashboard's Flask server: malformed requests get a 4xx, never a
traceback in the log.

- request bodies are capped (``MAX_BODY_BYTES``, HTTP 413 beyond it; the largest legitimate
  request, a callback carrying the layout's state, is a few kB);
- a callback request (``_dash-update-component``) must be a JSON object naming a registered
  output, with ``inputs`` (and ``state``, ``changedPropIds`` if present) lists of the shape
  Dash sends, whose outputs, inputs and state are exactly those the callback declares (ids,
  properties, count) and whose values pass the property's check (dashboards/values.py):
  otherwise HTTP 400 and one log line (a warning, never a traceback);
- ``_dash-component-suites/PKG/PATH`` serves only files Dash registered for ``PKG``: anything
  else (an unknown package, ``..``, a file outside the assets) is HTTP 404.
"""

from __future__ import annotations

import logging
from typing import Any

import flask
from dash import Dash
from dash.fingerprint import check_fingerprint

from dashboards.values import Check

log = logging.getLogger("overlapscope.dashboard")
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


def _shape_problem(body: object, callback_map: dict[str, Any]) -> str | None:
    """Why ``body`` is not shaped as a callback request of this app, or None."""
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


def declared_outputs(output: str) -> list[tuple[str, str]]:
    """The (id, property) pairs a callback's key names (``a.b`` or ``..a.b...c.d..``)."""
    parts = output[2:-2].split("...") if output.startswith("..") else [output]
    return [(p.rsplit(".", 1)[0], p.rsplit(".", 1)[-1]) for p in parts]


def _pairs(items: list[Any]) -> list[tuple[object, object]]:
    return [(i.get("id"), i.get("property")) for i in items]


def _fit_problem(body: dict[str, Any], spec: dict[str, Any]) -> str | None:
    """Why the request's outputs, inputs and state are not those the callback declares."""
    outputs = body["outputs"]
    sent = outputs if isinstance(outputs, list) else [outputs]
    if not all(isinstance(o, dict) for o in sent) or _pairs(sent) != declared_outputs(
        body["output"]
    ):
        return "outputs are not the callback's"
    for part in ("inputs", "state"):
        declared = [(d["id"], d["property"]) for d in spec.get(part, [])]
        got = body.get(part, [])
        if len(got) != len(declared):
            return f"{len(got)} {part}, the callback declares {len(declared)}"
        if _pairs(got) != declared:
            return f"{part} are not the callback's (ids or properties)"
    inputs = {f"{i}.{p}" for i, p in _pairs(body["inputs"])}
    if not set(body.get("changedPropIds", [])) <= inputs:
        return "changedPropIds names a property that is not an input"
    return None


def _value_problem(body: dict[str, Any], checks: dict[tuple[str, str], Check]) -> str | None:
    for item in [*body["inputs"], *body.get("state", [])]:
        key = (item["id"], item["property"])
        check = checks.get(key)
        if check is None:
            return f"no value check declared for {key[0]}.{key[1]} (dashboards/values.py)"
        if not check(item.get("value")):
            return f"{key[0]}.{key[1]}: a value of the wrong type or out of range"
    return None


def callback_problem(
    body: object, callback_map: dict[str, Any], checks: dict[tuple[str, str], Check]
) -> str | None:
    """Why ``body`` is not a callback request this app can answer, or None: its shape, then
    whether it fits the callback it names (outputs, inputs and state: ids, properties,
    count), then its values (``checks``: dashboards/values.py)."""
    problem = _shape_problem(body, callback_map)
    if problem is not None or not isinstance(body, dict):
        return problem
    # (pattern-matching ids, dicts, are not used by this app: a dict id fits no declaration)
    return _fit_problem(body, callback_map[body["output"]]) or _value_problem(body, checks)


def asset_allowed(registered: dict[str, Any], package: str, fingerprinted: str) -> bool:
    """Dash registered ``fingerprinted`` (without its fingerprint) as an asset of ``package``."""
    path, _ = check_fingerprint(fingerprinted)
    parts = path.split("/")
    if ".." in parts or "" in parts:
        return False
    return path in registered.get(package, ())


def install(app: Dash, checks: dict[tuple[str, str], Check]) -> None:
    """Put the guard in front of ``app``'s routes; ``checks``: what each property a
    callback reads may hold (dashboards/values.py)."""
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
            problem = callback_problem(body, app.callback_map, checks)
            if problem is not None:
                log.warning("400 %s: bad callback request: %s", req.path, problem)
                return flask.Response(f"bad callback request: {problem}\n", status=400)
        elif rel.startswith(_SUITES):
            package, _, rest = rel[len(_SUITES) :].partition("/")
            if not asset_allowed(app.registered_paths, package, rest):
                return flask.Response("not found\n", status=404)
        return None
