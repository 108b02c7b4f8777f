#!/usr/bin/env bash
# The main job on the bundled sample, from a fresh machine:
#   1. set up (scripts/setup.sh),
#   2. profile: a 2-rank run of the engine on CPU (backward_pre) into runs/quickstart,
#   3. analyse: `overlapscope analyze` and `overlapscope diagnose` on it,
#   4. open the dashboard on the shipped sample sweep (traces/) plus the new run.
# Usage: [PORT=8050] scripts/demo.sh [--check]
#   PORT: the dashboard's port (default 8050; a taken one is refused before any work)
#   --check: serve on a free port, fetch the page once, stop (for tests)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-8050}
if [ "${1:-}" != "--check" ] && ! python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null; then
  echo "demo: port $port is in use or invalid; pick another: PORT=8051 scripts/demo.sh" >&2
  exit 2
fi
scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== profile: 2 ranks, policy backward_pre"
overlapscope run --nproc 2 --policy backward_pre --layers 4 --dim 256 --seq-len 128 \
  --global-batch 8 --steps 6 --out runs/quickstart --force

echo "== analyse"
overlapscope analyze runs/quickstart
overlapscope diagnose runs/quickstart

runs=(runs/quickstart)
while IFS= read -r dir; do runs+=("$dir"); done \
  < <(find traces -mindepth 2 -name run.json -printf '%h\n' 2>/dev/null | sort)

echo "== dashboard (Ctrl-C to stop)"
if [ "${1:-}" = "--check" ]; then
  port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  overlapscope dashboard "${runs[@]}" --port "$port" & pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    if python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/', timeout=2)" 2>/dev/null; then
      echo "demo: dashboard answered on http://127.0.0.1:$port/"; exit 0
    fi
    sleep 1
  done
  echo "demo: dashboard did not answer" >&2; exit 1
fi
exec overlapscope dashboard "${runs[@]}" --port "$port"
