#!/usr/bin/env bash
# Runs the README's test command (scripts/test.sh) on a busy machine: N CPU-bound processes
# spin beside it for the whole run, as on a shared CI host. The suite must pass anyway: no
# test may depend on how fast this machine is.
#
# Usage: scripts/stress-test.sh [--load N] [--repeat K] [pytest args...]
#   --load N     CPU-bound processes beside the suite (default: one per core, `nproc`)
#   --repeat K   run the suite K times in a row under the same load; stop at the first failure
#                (default 1)
# The load is stopped on every exit: success, failure, Ctrl-C or SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."

load=$(nproc)
repeat=1
while (($#)); do
  case "$1" in
    --load) load=${2:?--load needs a number}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a number}; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
for v in "$load" "$repeat"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "stress-test: error: --load/--repeat take a whole number, got '$v'" >&2; exit 2; }
done
((repeat >= 1)) || { echo "stress-test: error: --repeat must be >= 1" >&2; exit 2; }

pids=()
stop_load() {
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    pids=()
  fi
}
trap stop_load EXIT
trap 'stop_load; exit 130' INT
trap 'stop_load; exit 143' TERM

for ((i = 0; i < load; i++)); do
  # A pure CPU spinner: no memory, no I/O, one core's worth of competition each.
  ( exec bash -c 'while :; do :; done' ) &
  pids+=("$!")
done
echo "stress-test: $load CPU-bound processes running beside the suite (pids ${pids[*]})"

for ((run = 1; run <= repeat; run++)); do
  start=$(date +%s)
  status=0
  scripts/test.sh "$@" || status=$?
  echo "stress-test: run $run/$repeat exited $status after $(($(date +%s) - start)) s under load $load"
  ((status == 0)) || exit "$status"
done
