#!/usr/bin/env bash
# The measured sweeps behind docs/BENCHMARKS.md "What-if prediction accuracy".
#
#     benchmarks/whatif_sweeps.sh OUT_DIR [REPEATS] [POLICIES]   (root: the lab shapes the link)
#     python benchmarks/whatif_validation.py OUT_DIR/*/
#
# One repeat of every policy at 1 Gbit/s, then at 0.25 Gbit/s, REPEATS times (default 3):
# the two link rates alternate in time, so a slow phase of the machine lands on both rates
# instead of looking like an effect of one (two back-to-back sweeps, one per rate, once
# showed 0.25 Gbit/s runs computing 12 % more per step than 1 Gbit/s runs; alternated,
# 5 % less). POLICIES: the sweep's --policies (default: the four of the validation; the
# forward-prefetch check used none,backward_pre,backward_pre+fwd,backward_post+fwd).
#
# The policies' order rotates by one each repeat (repeat k starts with the k-th policy):
# with a fixed order each policy always ran at the same place in its sweep (none first,
# right after the lab re-shaped the link), so whatever the machine does at that place was
# read as an effect of the policy. With as many repeats as policies, each policy runs once
# at every place.
#
# 10 profiled steps per run (6 in the earlier sweeps of 2026-11-24): forward compute varies
# by up to 40 % from step to step on this VM (the four units: 27-33 ms per step, spikes to
# 44 ms), and a run's mean over 6 steps carried that into every prediction made from it.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 3 ]]; then
  echo "usage: $0 OUT_DIR [REPEATS] [POLICIES]" >&2
  exit 2
fi
out=$1
repeats=${2:-3}
policies=${3:-none,backward_post,backward_pre,backward_pre+limit=2}
if ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: REPEATS must be a positive integer, got '$repeats'" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
IFS=, read -r -a order <<<"$policies"
for ((rep = 0; rep < repeats; rep++)); do
  rotated=()
  for ((i = 0; i < ${#order[@]}; i++)); do
    rotated+=("${order[(i + rep) % ${#order[@]}]}")
  done
  this=$(IFS=,; echo "${rotated[*]}")
  for link in 1 0.25; do
    echo "== repeat $((rep + 1))/$repeats at $link Gbit/s ($this) -> $out/l$link-$rep" >&2
    python3 -m overlapscope sweep --policies "$this" \
      --link-gbit "$link" --repeats 1 --out "$out/l$link-$rep" --force \
      --layers 4 --dim 256 --seq-len 128 --global-batch 8 --steps 14 --profile-active 10
  done
done
