#!/usr/bin/env bash
# Sets up everything overlapscope needs on a Debian machine, idempotently:
#   - system packages: chromium + chromium-driver (dashboard browser tests),
#     iproute2 (the slow-network lab); installed with apt-get when running as root.
#   - a virtual environment in .venv with overlapscope and its dev, hta and cluster (Dask) extras.
# Usage: scripts/setup.sh            (then: source .venv/bin/activate)
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v tc >/dev/null 2>&1 || need_apt+=(iproute2)
if ((${#need_apt[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing system packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: warning: not root, cannot install ${need_apt[*]}; browser/lab tests will skip" >&2
  fi
fi

PY=${PYTHON:-python3}
stamp=.venv/.overlapscope-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$want" ]; then
  # pyproject changed: start clean, so a dependency removed from it is gone from .venv too.
  echo "setup: pyproject.toml changed; recreating .venv"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing overlapscope into .venv (torch==2.13.0 CPU build, pinned)"
  # torch first, exactly pinned, so no other requirement can pull a newer (CUDA) build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[dev,hta,cluster]"
  echo "$want" > "$stamp"
fi
echo "setup: ready (.venv)"
