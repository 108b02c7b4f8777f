"""Clients of a live dashboard that behave as browsers do, for the load test
(``tests/dashboard/test_load.py``) and its benchmark (``benchmarks/dashboard_load.py``).

Each client fetches the page, its layout and its callbacks (``/_dash-dependencies``), as
Dash's renderer does, then switches runs, views (tabs) and steps at random (its own seed).
A switch sends every callback the renderer sends for that change, each once its inputs that
other pending callbacks set are set, and those the callbacks' outputs set off in turn, with
the values they returned: the requests a person clicking through the page makes, on one
keep-alive connection. Clients stop at a deadline or after a number of requests, whichever
comes first; every request's status and latency is kept, and the server's resident memory is
sampled beside them.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

Prop = tuple[str, str]  # (component id, property)
ACTIONS = ("run", "view", "step")
TABS = "view-tabs"
RUN = "run-a"
STEP = "step"


@dataclass(frozen=True, slots=True)
class Sample:
    action: str  # the switch it belongs to ("start": the page load)
    what: str  # the path, or the callback's output
    status: int  # 0: no answer (connection refused, reset, timed out: ``error`` says)
    seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class Callback:
    output: str
    outputs: tuple[Prop, ...]
    inputs: tuple[Prop, ...]
    state: tuple[Prop, ...]


def _props(items: list[dict[str, Any]]) -> tuple[Prop, ...]:
    return tuple((str(i["id"]), str(i["property"])) for i in items)


def callbacks_of(dependencies: list[dict[str, Any]]) -> list[Callback]:
    out = []
    for d in dependencies:
        key = str(d["output"])
        parts = key[2:-2].split("...") if key.startswith("..") else [key]
        outputs = tuple((p.rsplit(".", 1)[0], p.rsplit(".", 1)[1]) for p in parts)
        out.append(Callback(key, outputs, _props(d["inputs"]), _props(d.get("state", []))))
    return out


def layout_values(node: Any, out: dict[Prop, Any]) -> dict[Prop, Any]:
    """Every (id, property) value the layout sets."""
    if isinstance(node, dict):
        props = node.get("props")
        if isinstance(props, dict) and isinstance(props.get("id"), str):
            for name, value in props.items():
                if name not in ("children", "id"):
                    out[(props["id"], name)] = value
        for value in node.values():
            layout_values(value, out)
    elif isinstance(node, list):
        for value in node:
            layout_values(value, out)
    return out


@dataclass
class Client:
    """One browser: its connection, its page's values, what it sent."""

    base: str
    seed: int
    samples: list[Sample] = field(default_factory=list)
    values: dict[Prop, Any] = field(default_factory=dict)
    callbacks: list[Callback] = field(default_factory=list)
    _conn: http.client.HTTPConnection | None = None

    def _request(
        self, action: str, what: str, method: str, path: str, body: bytes | None
    ) -> bytes | None:
        url = urlsplit(self.base)
        start = time.perf_counter()
        status, data, error = 0, b"", ""
        try:
            if self._conn is None:
                self._conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
            headers = {"Content-Type": "application/json"} if body is not None else {}
            self._conn.request(method, path, body=body, headers=headers)
            resp = self._conn.getresponse()
            status, data = resp.status, resp.read()
        except (OSError, http.client.HTTPException) as e:
            error = f"{type(e).__name__}: {e}"
            if self._conn is not None:
                self._conn.close()
            self._conn = None
        self.samples.append(Sample(action, what, status, time.perf_counter() - start, error))
        return data if status == 200 else None

    def _json(self, action: str, what: str, method: str, path: str, body: bytes | None) -> Any:
        data = self._request(action, what, method, path, body)
        return json.loads(data) if data else None

    def start(self) -> bool:
        """The page, its layout and its callbacks; False when the server did not give them."""
        self._request("start", "/", "GET", "/", None)
        layout = self._json("start", "/_dash-layout", "GET", "/_dash-layout", None)
        deps = self._json("start", "/_dash-dependencies", "GET", "/_dash-dependencies", None)
        if layout is None or deps is None:
            return False
        self.values = layout_values(layout, {})
        self.callbacks = callbacks_of(deps)
        return True

    def _send(self, action: str, cb: Callback, changed: set[Prop]) -> set[Prop]:
        """Post one callback as the renderer does; the props its answer changed."""

        def items(props: tuple[Prop, ...]) -> list[dict[str, Any]]:
            return [
                {"id": i, "property": p, **({"value": self.values[(i, p)]} if (i, p) in self.values else {})}
                for i, p in props
            ]  # fmt: skip

        outs = [{"id": i, "property": p} for i, p in cb.outputs]
        body = {
            "output": cb.output,
            "outputs": outs if cb.output.startswith("..") else outs[0],
            "inputs": items(cb.inputs),
            "state": items(cb.state),
            "changedPropIds": [f"{i}.{p}" for i, p in cb.inputs if (i, p) in changed],
        }
        answer = self._json(action, cb.output, "POST", "/_dash-update-component",
                            json.dumps(body).encode())  # fmt: skip
        new: set[Prop] = set()
        for cid, props in ((answer or {}).get("response") or {}).items():
            for prop, value in props.items():
                if self.values.get((cid, prop)) != value:
                    new.add((cid, prop))
                self.values[(cid, prop)] = value
        return new

    def change(self, action: str, prop: Prop, value: Any) -> None:
        """Set ``prop`` as a click does, and send what the renderer sends for it."""
        self.values[prop] = value
        changed, fired = {prop}, set()
        pending = [cb for cb in self.callbacks if set(cb.inputs) & changed]
        while pending:
            later = {o for cb in pending for o in cb.outputs}
            ready = [cb for cb in pending if not set(cb.inputs) & (later - set(cb.outputs))]
            for cb in ready or pending:
                fired.add(cb.output)
                changed |= self._send(action, cb, changed)
            pending = [
                c for c in self.callbacks if c.output not in fired and set(c.inputs) & changed
            ]

    def act(self, rng: random.Random) -> None:
        action = rng.choice(ACTIONS)
        if action == "run":
            runs = [o["value"] for o in self.values.get((RUN, "options"), [])]
            self.change(action, (RUN, "value"), rng.choice(runs))
        elif action == "view":
            tabs = [v for (i, p), v in self.values.items() if i.startswith("tab-") and p == "value"]
            self.change(action, (TABS, "value"), rng.choice(tabs))
        else:
            steps = [o["value"] for o in self.values.get((STEP, "options"), [])] or [None]
            self.change(action, (STEP, "value"), rng.choice(steps))


@dataclass(frozen=True, slots=True)
class Load:
    samples: list[Sample]
    rss_mb: list[tuple[float, float]]  # (seconds since the start, the server's resident MB)
    callbacks: list[Callback]  # the page's, as /_dash-dependencies gave them

    def switched_by(self) -> set[str]:
        """The callbacks a switch of run, view or step sets off (its first wave)."""
        clicked = {(RUN, "value"), (TABS, "value"), (STEP, "value")}
        return {cb.output for cb in self.callbacks if set(cb.inputs) & clicked}


def resident_mb(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), MB."""
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def run_load(
    base: str, server_pid: int, *, clients: int, seconds: float, max_requests: int, seed: int = 0
) -> Load:
    """``clients`` clients on ``base`` until ``seconds`` pass or each has sent
    ``max_requests``; the server's memory sampled every 0.5 s meanwhile."""
    deadline = time.monotonic() + seconds
    t0 = time.monotonic()
    crowd = [Client(base, seed * 1000 + i) for i in range(clients)]
    rss: list[tuple[float, float]] = []
    done = threading.Event()

    def browse(c: Client) -> None:
        rng = random.Random(c.seed)
        if not c.start():
            return
        while time.monotonic() < deadline and len(c.samples) < max_requests:
            c.act(rng)

    def sample() -> None:
        while not done.wait(0.5):
            rss.append((time.monotonic() - t0, resident_mb(server_pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=browse, args=(c,)) for c in crowd]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 300)
    done.set()
    sampler.join(timeout=10)
    return Load([s for c in crowd for s in c.samples], rss, crowd[0].callbacks)
